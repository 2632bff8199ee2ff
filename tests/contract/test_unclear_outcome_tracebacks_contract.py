"""An unclear tool outcome keeps its story, and so does a batch that fails (issue 33, item 3).

A tool that raises anything but ``ToolRejectedError`` may or may not have taken effect: the
call is looked at again and, for a tool that can neither look up, repeat nor undo it, parked for
a person. That person needs to see where the call failed, not only ``TimeoutError: ...``: the
traceback of the attempt (and of a failed lookup) is kept on the record, scrubbed and bounded,
and shown wherever the review is. A batch that fails beyond its policy records the story of its
first failed branch as its own traceback. Both journals (in-memory, and DynamoDB on moto).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from durable_agents import (
    NO_RETRY,
    AgentRegistry,
    CompletionPolicy,
    DurableContext,
    Secret,
    agent,
)
from durable_agents.admin.views import effect_view, history
from durable_agents.core.models import EffectStatus, EntryType
from durable_agents.core.tracebacks import MAX_CHARS
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolCall, ToolRegistry, tool
from durable_agents_local.testing import AgentTestRunner, Crash

KEY = "sk-live-9d2f-unclear-secret"


class Transfer(BaseModel):
    cents: int


def send_transfer(cents: int) -> str:
    key = Secret(KEY).reveal()
    raise TimeoutError(f"the bank did not answer within 30 s (key {key}, {cents} cents)")


SEND_RAISES = send_transfer.__code__.co_firstlineno + 2


def declare() -> Any:
    registry = ToolRegistry()

    @tool(name="transfer", registry=registry)  # no lookup, not idempotent, no compensation
    def transfer(request: Transfer, call: ToolCall) -> str:
        return send_transfer(request.cents)

    return transfer


def lookup_fails(request: Transfer, call: ToolCall) -> Any:
    raise ConnectionError("the bank's status endpoint is down")


LOOKUP_RAISES = lookup_fails.__code__.co_firstlineno + 1


def test_an_unclear_outcome_keeps_the_attempts_traceback_for_its_reviewer(
    journal: JournalStore,
) -> None:
    transfer = declare()

    @agent(name="wire", version="1", registry=AgentRegistry())
    def wire(ctx: DurableContext, cents: int) -> str:
        return str(ctx.tool(transfer, Transfer(cents=cents)))

    result = AgentTestRunner(wire, journal=journal).run(700)
    assert result.status == "PAUSED"
    (record,) = journal.effects_in_review()
    assert record.status is EffectStatus.NEEDS_REVIEW
    view = effect_view(record)
    unclear = view["unclear"]
    assert unclear["reason"].startswith("TimeoutError: the bank did not answer within 30 s")
    story = unclear["traceback"]
    assert f"line {SEND_RAISES}, in send_transfer" in story
    assert story.rstrip().endswith("(key ***, 700 cents)")
    assert len(story) <= MAX_CHARS
    assert KEY not in repr(journal.load(result.run_id)) and KEY not in repr(view)
    # The run's history shows the same story on the call's event.
    (event,) = [
        e for e in history(journal.load(result.run_id)) if e["event"] == "side_effect_needs_review"
    ]
    assert event["unclear"] == unclear


def test_a_failed_lookup_keeps_its_traceback_too(journal: JournalStore) -> None:
    registry = ToolRegistry()

    @tool(name="transfer", registry=registry, lookup=lookup_fails)
    def transfer(request: Transfer, call: ToolCall) -> str:
        return send_transfer(request.cents)

    @agent(name="wire-lookup", version="1", registry=AgentRegistry())
    def wire(ctx: DurableContext, cents: int) -> str:
        return str(ctx.tool(transfer, Transfer(cents=cents)))

    result = AgentTestRunner(wire, journal=journal).run(300)
    assert result.status == "PAUSED"
    (record,) = journal.effects_in_review()
    unclear = effect_view(record)["unclear"]
    assert unclear["reason"].startswith("lookup failed: ConnectionError")
    assert f"line {LOOKUP_RAISES}, in lookup_fails" in unclear["traceback"]


def test_a_call_that_settled_shows_no_unclear_outcome(journal: JournalStore) -> None:
    registry = ToolRegistry()
    calls: list[int] = []

    @tool(name="transfer", registry=registry, idempotent=True)
    def transfer(request: Transfer, call: ToolCall) -> str:
        calls.append(request.cents)
        if len(calls) == 1:
            send_transfer(request.cents)
        return "sent"

    @agent(name="wire-again", version="1", registry=AgentRegistry())
    def wire(ctx: DurableContext, cents: int) -> str:
        return str(ctx.tool(transfer, Transfer(cents=cents)))

    result = AgentTestRunner(wire, journal=journal).run(100)
    assert result.status == "SUCCEEDED" and calls == [100, 100]
    (record,) = journal.load(result.run_id).effects
    assert record.status is EffectStatus.COMMITTED
    assert effect_view(record)["unclear"] is None


def first_branch_fails(n: int) -> None:
    if n == 1:
        raise ValueError(f"item {n} cannot be priced")


BRANCH_RAISES = first_branch_fails.__code__.co_firstlineno + 2


def test_a_failed_batch_records_its_first_failed_branchs_story(journal: JournalStore) -> None:
    seen: list[str | None] = []

    @agent(name="prices", version="1", registry=AgentRegistry())
    def prices(ctx: DurableContext, _: Any) -> str:
        try:
            ctx.map(
                [0, 1, 2],
                lambda c, n, index: c.step(
                    lambda: first_branch_fails(n), name="price", retry=NO_RETRY
                ),
                name="fan",
                completion=CompletionPolicy(tolerated_failure_count=0),
            )
        except Exception as exc:
            seen.append(getattr(exc, "recorded_traceback", None))
        ctx.step(lambda: "ok", name="after")
        return "done"

    result = AgentTestRunner(prices, journal=journal, mode="faithful").run(
        None, crash=Crash("after", "after_record")
    )
    assert result.status == "SUCCEEDED"
    (entry,) = [
        e
        for e in journal.load(result.run_id).entries
        if e.name == "fan" and e.type is EntryType.FAILED
    ]
    assert entry.error is not None
    story = entry.error.traceback
    assert story is not None and len(story) <= MAX_CHARS
    assert "branch-1" in story
    assert f"line {BRANCH_RAISES}, in first_branch_fails" in story
    assert "ValueError: item 1 cannot be priced" in story
    assert "BatchFailedError: map 'fan' ended with" in story.rstrip().splitlines()[-1]
    # The first run and every replay raise it with the identical story.
    assert len(seen) >= 2 and set(seen) == {story}
