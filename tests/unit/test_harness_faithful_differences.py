"""``AgentTestRunner(check_determinism=True)``: code outside operations changing between replays.

The check replays the run's journal twice, dry (budget 0, writes refused), and compares what
the agent's code did outside operations. It must warn for a print or a counter that changes
between replays, in both modes and on every journal the harness runs on, and never for
deterministic code, a step's own prints or ``ctx.logger``'s lines; and the dry replays must
change nothing: no write, no model call, no plugin hook.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, Literal

import pytest

from durable_agents import AgentRegistry, Plugin, agent
from durable_agents.journal.store import JournalStore
from durable_agents.llm import LlmRequest, Message, ModelConfig
from durable_agents.plugins import InvocationStartInfo, OperationStartInfo
from durable_agents_local.testing import (
    AgentTestRunner,
    ReplayDifference,
    ReplaySideEffectWarning,
)

Mode = Literal["continuous", "faithful"]
MODES: tuple[Mode, ...] = ("continuous", "faithful")
MODEL = ModelConfig(name="m", version="1", provider="scripted", model_id="s")

_calls = {"n": 0}


@pytest.fixture(autouse=True)
def _fresh_counter() -> Iterator[None]:
    _calls["n"] = 0
    yield


def _bump() -> int:
    _calls["n"] += 1
    return _calls["n"]


registry = AgentRegistry()


@agent(name="printer", version="1", registry=registry)
def printer(ctx: Any, n: int) -> int:
    print(f"entered {_bump()} times")  # outside operations: changes on every replay
    return int(ctx.step(lambda: n * 2, name="double"))


@agent(name="returner", version="1", registry=registry)
def returner(ctx: Any, n: int) -> int:
    ctx.step(lambda: n, name="work")
    return n + _bump()  # never printed: seen in the value a replay returns


@agent(name="renamer", version="1", registry=registry)
def renamer(ctx: Any, n: int) -> int:
    first = int(ctx.step(lambda: n, name=f"work-{_bump()}"))  # another name on every replay
    return first + int(ctx.step(lambda: n, name="more"))


@agent(name="steady", version="1", registry=registry)
def steady(ctx: Any, n: int) -> int:
    print(f"doubling {n}")  # the same on every replay
    doubled = int(ctx.step(lambda: print(f"inside {_bump()}") or n * 2, name="double"))
    ctx.logger.warning("doubled to %d (call %d)", doubled, _calls["n"])
    ctx.wait(60, name="nap")
    return doubled + int(ctx.step(lambda: _bump(), name="count"))


@agent(name="failing", version="1", registry=registry)
def failing(ctx: Any, n: int) -> int:
    def refuse() -> int:
        raise ValueError(f"no {n}")

    return int(ctx.step(refuse, name="refuse", retry=None))


@agent(name="asker", version="1", registry=registry)
def asker(ctx: Any, question: str) -> str:
    print(f"asking, call {_bump()}")
    request = LlmRequest(messages=[Message.user(question)])
    return str(ctx.llm("answer", request, config=MODEL).text)


@agent(name="approver", version="1", registry=registry)
def approver(ctx: Any, order: str) -> bool:
    print(f"waiting for a person, call {_bump()}")
    decision = ctx.wait_for_approval("ok", request={"order": order}, approvers=["user:lee"])
    return bool(decision.approved)


def _run(
    definition: Any, value: Any, *, mode: Mode = "continuous", **options: Any
) -> tuple[Any, list[warnings.WarningMessage]]:
    """Runs with the check on, stdout kept off the test's output, every warning recorded."""
    with warnings.catch_warnings(record=True) as caught, redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        result = AgentTestRunner(definition, mode=mode, check_determinism=True, **options).run(
            value
        )
    return result, [w for w in caught if w.category is ReplaySideEffectWarning]


@pytest.mark.parametrize("mode", MODES)
def test_a_print_that_changes_between_replays_is_warned(journal: JournalStore, mode: Mode) -> None:
    result, caught = _run(printer, 3, mode=mode, journal=journal)
    assert result.output == 6
    assert [d.what for d in result.replay_warnings] == ["output"]
    difference: ReplayDifference = result.replay_warnings[0]
    entered = _calls["n"]  # the run's own entries, then the two replays'
    assert difference.first == f"entered {entered - 1} times\n"
    assert difference.second == f"entered {entered} times\n"
    assert f"-entered {entered - 1} times\n+entered {entered} times" in difference.message
    assert "ctx.step" in difference.message and result.run_id in difference.message
    assert [str(w.message) for w in caught] == [difference.message]
    assert caught[0].filename == __file__  # points at the test's own line


@pytest.mark.parametrize("mode", MODES)
def test_a_counter_in_the_return_value_is_warned(mode: Mode) -> None:
    result, caught = _run(returner, 10, mode=mode)
    run_value = result.output
    kinds = [d.what for d in result.replay_warnings]
    assert kinds == ["ending", "recorded"]
    ending, recorded = result.replay_warnings
    assert (ending.first, ending.second) == (
        f"returned {run_value + 1}",
        f"returned {run_value + 2}",
    )
    assert (recorded.first, recorded.second) == (f"returned {run_value}", ending.first)
    assert len(caught) == 2


def test_a_counter_in_operation_names_is_warned_in_continuous_mode() -> None:
    # Continuous mode never replays this run, so nothing else would have seen it.
    result, _ = _run(renamer, 1)
    assert result.status == "SUCCEEDED"
    recorded = next(d for d in result.replay_warnings if d.what == "recorded")
    assert recorded.second.startswith("diverged: ReplayDivergedError")


def test_faithful_mode_pauses_such_a_run_itself() -> None:
    result, caught = _run(renamer, 1, mode="faithful")
    assert result.status == "PAUSED"  # its own replay found it; a paused run is not checked
    assert (result.replay_warnings, caught) == ([], [])


@pytest.mark.parametrize("mode", MODES)
def test_deterministic_code_steps_and_the_logger_are_never_warned(
    journal: JournalStore, mode: Mode
) -> None:
    result, caught = _run(steady, 5, mode=mode, journal=journal)
    assert result.status == "SUCCEEDED"
    assert (result.replay_warnings, caught) == ([], [])


@pytest.mark.parametrize("sticky", [False, True])
def test_sticky_faithful_runs_are_checked_too(sticky: bool) -> None:
    # A parked agent goes on without replaying; the dry replays are the check's own.
    quiet, none = _run(steady, 2, mode="faithful", sticky=sticky)
    assert (quiet.output, quiet.replay_warnings, none) == (6, [], [])
    loud, caught = _run(printer, 2, mode="faithful", sticky=sticky)
    assert [d.what for d in loud.replay_warnings] == ["output"] and len(caught) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_run_with_a_deterministic_error_is_not_warned(mode: Mode) -> None:
    # The run's error carries the step's traceback, a replay's the replayed one: only the
    # type and message are compared.
    result, caught = _run(failing, 4, mode=mode)
    assert result.status == "FAILED" and result.error is not None
    assert (result.replay_warnings, caught) == ([], [])


def test_a_waiting_run_is_checked_up_to_where_it_waits() -> None:
    runner = AgentTestRunner(approver, check_determinism=True)
    with warnings.catch_warnings(record=True) as caught, redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        waiting = runner.run("o-1")
        assert waiting.status == "SUSPENDED"
        assert [d.what for d in waiting.replay_warnings] == ["output"]
        done = runner.decide(waiting.run_id, approved=True)
    assert done.output is True
    assert [d.what for d in done.replay_warnings] == ["output"]
    assert len([w for w in caught if w.category is ReplaySideEffectWarning]) == 2


def test_dry_replays_write_nothing_and_call_no_model_and_no_plugin() -> None:
    class Heard(Plugin):
        def __init__(self) -> None:
            self.invocations = 0
            self.operations = 0

        def on_invocation_start(self, info: InvocationStartInfo) -> None:
            self.invocations += 1

        def on_operation_start(self, info: OperationStartInfo) -> None:
            self.operations += 1

    # What the run wrote and what the plugin heard, without the check and with it.
    seen: dict[bool, tuple[int, int, int, int]] = {}
    for check in (False, True):
        heard = Heard()
        runner = AgentTestRunner(
            asker,
            mode="faithful",
            model_script=[{"text": "42"}],
            plugins=[heard],
            check_determinism=check,
        )
        with warnings.catch_warnings(record=True), redirect_stdout(io.StringIO()):
            warnings.simplefilter("always")
            result = runner.run("the answer?")
        assert result.output == "42" and runner.scripted is not None
        assert runner.scripted.calls == 1  # the dry replays asked the model nothing
        assert [d.what for d in result.replay_warnings] == (["output"] if check else [])
        snapshot = runner.journal.load(result.run_id)
        seen[check] = (
            len(snapshot.entries),
            snapshot.header.revision,
            heard.invocations,
            heard.operations,
        )
    assert seen[True] == seen[False]  # no write, and no hook heard the dry replays


def test_off_by_default_and_on_demand() -> None:
    runner = AgentTestRunner(printer)
    with warnings.catch_warnings(record=True) as caught, redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        result = runner.run(1)
        assert result.replay_warnings == [] and caught == []
        differences = runner.check_replays(result.run_id)
    assert [d.what for d in differences] == ["output"]
    assert [w.category for w in caught] == [ReplaySideEffectWarning]
    assert caught[0].filename == __file__


CONTEXT_DOC = Path(__file__).resolve().parents[2] / "docs" / "context.md"


@pytest.mark.parametrize("how", ["as written", "faithful", "faithful-sticky"])
def test_no_warning_for_any_example_agent_of_the_context_page(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Every ``ctx`` operation's example (docs/context.md) run with the check on: not one
    warning. Their agents are deterministic, so any would be a false positive of the check
    (batches, child contexts, sub-agents, approvals, callbacks, events, memory, models...).
    Run as the page says, and again with every runner made faithful (and sticky)."""
    init = AgentTestRunner.__init__

    def checking(self: AgentTestRunner, *args: Any, **kwargs: Any) -> None:
        kwargs["check_determinism"] = True
        if how != "as written":
            kwargs.update(mode="faithful", sticky=how == "faithful-sticky")
        init(self, *args, **kwargs)

    monkeypatch.setattr(AgentTestRunner, "__init__", checking)
    namespace: dict[str, object] = {"__name__": "context_doc"}
    blocks = re.findall(r"```python\n(.*?)```", CONTEXT_DOC.read_text(), flags=re.DOTALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReplaySideEffectWarning)
        for number, block in enumerate(blocks):
            exec(compile(block, f"{CONTEXT_DOC}:block{number}", "exec"), namespace)
