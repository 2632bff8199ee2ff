"""How ``ctx.wait_for_callback`` calls its submitter: the AWS SDK's ``(callback_id, context)``.

A submitter ported from the SDK takes ``(callback_id, context)``; a step's function that asks
for a ``StepContext`` takes it first. A two-argument submitter is called in the SDK's order,
with the step's ``StepContext`` (it has the SDK context's ``logger``) second, unless its first
parameter is annotated ``StepContext`` (this runtime's own convention, kept).
"""

from __future__ import annotations

from typing import Any

from durable_agents import AgentRegistry, DurableContext, StepContext, agent
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner


def _run(submitter: Any, journal: JournalStore) -> Any:
    @agent(name="courier", version="1", registry=AgentRegistry())
    def courier(ctx: DurableContext, _: Any) -> Any:
        return ctx.wait_for_callback(submitter, name="pickup")

    runner = AgentTestRunner(courier, journal=journal)
    waiting = runner.run(None)
    return runner.complete_callback(waiting.run_id, "pickup", result={"ok": True})


def test_one_argument_gets_the_callback_id(journal: JournalStore) -> None:
    seen: list[Any] = []
    assert _run(lambda callback_id: seen.append(callback_id), journal).output == {"ok": True}
    assert len(seen) == 1 and isinstance(seen[0], str) and seen[0]


def test_two_arguments_get_the_sdks_order(journal: JournalStore) -> None:
    seen: list[Any] = []

    def submit(callback_id, context):  # type: ignore[no-untyped-def]  # as ported from the SDK
        context.logger.info("asking the courier")
        seen.append((callback_id, context))

    assert _run(submit, journal).output == {"ok": True}
    ((callback_id, context),) = seen
    assert isinstance(callback_id, str) and callback_id
    assert isinstance(context, StepContext) and context.attempt == 1 and context.name == "submit"


def test_a_first_parameter_annotated_step_context_gets_it_first(journal: JournalStore) -> None:
    seen: list[Any] = []

    def submit(step: StepContext, callback_id: str) -> None:
        seen.append((step, callback_id))

    assert _run(submit, journal).output == {"ok": True}
    ((step, callback_id),) = seen
    assert isinstance(step, StepContext) and isinstance(callback_id, str)


def test_a_second_parameter_with_a_default_is_left_to_it(journal: JournalStore) -> None:
    seen: list[Any] = []

    def submit(callback_id: str, note: str = "default") -> None:
        seen.append((callback_id, note))

    assert _run(submit, journal).output == {"ok": True}
    ((callback_id, note),) = seen
    assert isinstance(callback_id, str) and note == "default"


def test_the_submit_step_keeps_the_submitters_name_for_the_scope(journal: JournalStore) -> None:
    def notify_courier(callback_id, context):  # type: ignore[no-untyped-def]
        return None

    @agent(name="named", version="1", registry=AgentRegistry())
    def named(ctx: DurableContext, _: Any) -> Any:
        return ctx.wait_for_callback(notify_courier)

    runner = AgentTestRunner(named, journal=journal)
    waiting = runner.run(None)
    done = runner.complete_callback(waiting.run_id, "notify_courier", result=1)
    assert done.output == 1
