"""Instrumentation hooks (``durable_agents.plugins``), on both backends and in both harness modes.

Plugins hear what each invocation did: its start and end, every operation it took up (executed,
or only replayed: ``replayed=True``), every attempt. A plugin can never change a run: a hook that
raises is logged and ignored, whatever it raises.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, agent
from durable_agents.engine.invocation import Reason
from durable_agents.errors import SuspendExecution
from durable_agents.journal.store import JournalStore
from durable_agents.plugins import (
    AttemptEndInfo,
    AttemptStartInfo,
    InvocationEndInfo,
    InvocationStartInfo,
    OperationEndInfo,
    OperationStartInfo,
    Plugin,
)
from durable_agents.tools import ToolCall, ToolRegistry, ToolResult, tool
from durable_agents_local.testing import AgentTestRunner, Crash, TestResult

MODES = ["continuous", "faithful"]
HOOKS = (
    "on_invocation_start",
    "on_invocation_end",
    "on_operation_start",
    "on_operation_end",
    "on_operation_attempt_start",
    "on_operation_attempt_end",
)


@dataclass
class Recorder(Plugin):
    """Keeps every hook call, in order."""

    calls: list[tuple[str, Any]] = field(default_factory=list)

    def on_invocation_start(self, info: InvocationStartInfo) -> None:
        self.calls.append(("on_invocation_start", info))

    def on_invocation_end(self, info: InvocationEndInfo) -> None:
        self.calls.append(("on_invocation_end", info))

    def on_operation_start(self, info: OperationStartInfo) -> None:
        self.calls.append(("on_operation_start", info))

    def on_operation_end(self, info: OperationEndInfo) -> None:
        self.calls.append(("on_operation_end", info))

    def on_operation_attempt_start(self, info: AttemptStartInfo) -> None:
        self.calls.append(("on_operation_attempt_start", info))

    def on_operation_attempt_end(self, info: AttemptEndInfo) -> None:
        self.calls.append(("on_operation_attempt_end", info))

    def of(self, hook: str) -> list[Any]:
        return [info for name, info in self.calls if name == hook]

    def ends(self, name: str) -> list[OperationEndInfo]:
        return [i for i in self.of("on_operation_end") if i.name == name]

    def attempts(self, name: str) -> list[tuple[str, int, str | None, str | None]]:
        out: list[tuple[str, int, str | None, str | None]] = []
        for hook, info in self.calls:
            if hook == "on_operation_attempt_start" and info.name == name:
                out.append(("start", info.attempt, None, None))
            elif hook == "on_operation_attempt_end" and info.name == name:
                out.append(("end", info.attempt, info.outcome, info.error_type))
        return out


class Raising(Plugin):
    """Raises in every hook (the exception given, or a RuntimeError)."""

    def __init__(self, exc: BaseException | None = None):
        self.exc = exc
        self.raised = 0

    def _raise(self) -> None:
        self.raised += 1
        raise self.exc if self.exc is not None else RuntimeError("plugin broke")

    def on_invocation_start(self, info: InvocationStartInfo) -> None:
        self._raise()

    def on_invocation_end(self, info: InvocationEndInfo) -> None:
        self._raise()

    def on_operation_start(self, info: OperationStartInfo) -> None:
        self._raise()

    def on_operation_end(self, info: OperationEndInfo) -> None:
        self._raise()

    def on_operation_attempt_start(self, info: AttemptStartInfo) -> None:
        self._raise()

    def on_operation_attempt_end(self, info: AttemptEndInfo) -> None:
        self._raise()


class Payment(BaseModel):
    cents: int


class Receipt(BaseModel):
    payment_id: str


def make_agent(name: str, *, fail: bool = False) -> Any:
    """Every kind of hook: a retried step, a wait, a child scope, a tool, an optional failure."""
    tools = ToolRegistry()
    charged: list[str] = []

    @tool(name="charge", registry=tools, idempotent=True)
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        charged.append(call.idempotency_key)
        return ToolResult(Receipt(payment_id=f"p{len(charged)}"), external_id=f"p{len(charged)}")

    failures = {"flaky": 1}

    def flaky() -> str:
        if failures["flaky"]:
            failures["flaky"] -= 1
            raise ConnectionError("reset")
        return "ok"

    def broken() -> str:
        raise KeyError("missing")

    @agent(name=name, version="1", registry=AgentRegistry())
    def instrumented(ctx: DurableContext, cents: int) -> dict[str, Any]:
        first = ctx.step(lambda: "a", name="a")
        second = ctx.step(flaky, name="flaky", retry=RetryPolicy(max_attempts=2))
        ctx.wait(10, name="nap")
        nested = ctx.run_in_child_context(
            lambda child: child.step(lambda: "inner", name="inner"), name="scope"
        )
        receipt = ctx.tool(charge, {"cents": cents})
        if fail:
            ctx.step(broken, name="broken", retry=RetryPolicy(max_attempts=1))
        return {"r": [first, second, nested], "receipt": receipt.payment_id}

    return instrumented


def run(
    journal: JournalStore, mode: str, plugins: list[Any], *, fail: bool = False, crash: Any = None
) -> TestResult:
    defn = make_agent("instrumented", fail=fail)
    test_runner = AgentTestRunner(defn, journal=journal, mode=mode, plugins=plugins)  # type: ignore[arg-type]
    return test_runner.run(250, crash=crash)


def journal_shape(result: TestResult) -> list[tuple[str, str, int]]:
    return [(e.op_id, e.type.value, e.attempt) for op in result.operations for e in op.entries]


@pytest.mark.parametrize("mode", MODES)
def test_each_operation_is_reported_executed_once_and_replayed_after(
    journal: JournalStore, mode: str
) -> None:
    recorder = Recorder()
    result = run(journal, mode, [recorder])
    assert result.status == "SUCCEEDED", result.error

    starts, ends = recorder.of("on_invocation_start"), recorder.of("on_invocation_end")
    assert len(starts) == len(ends) == result.invocations
    assert {i.run_id for i in starts + ends} == {result.run_id}
    assert ends[-1].outcome == "succeeded" and ends[-1].error_type is None
    assert [i.deadline_ms > i.started_at_ms for i in starts] == [True] * len(starts)
    executed = {op for end in ends for op in end.executed}
    assert executed == {i.op_id for i in recorder.of("on_operation_attempt_start")}

    for name, kind in [("a", "step"), ("flaky", "step"), ("nap", "wait"), ("scope", "child"),
                       ("inner", "step"), ("charge", "tool")]:  # fmt: skip
        ops = recorder.ends(name)
        done = [e for e in ops if not e.replayed and e.outcome != "pending"]
        assert [(e.kind, e.outcome) for e in done] == [(kind, "succeeded")], (name, ops)
        # Before it was done it can only have been pending; after, only replayed.
        index = ops.index(done[0])
        assert all(e.outcome == "pending" and not e.replayed for e in ops[:index])
        assert all(e.replayed and e.outcome == "succeeded" for e in ops[index + 1 :])
        assert all(e.duration_ms is None for e in ops[index + 1 :])  # replayed: nothing ran
    # Every operation start has its end, in the same invocation.
    assert len(recorder.of("on_operation_start")) == len(recorder.of("on_operation_end"))
    # The nested step ends before its scope does.
    names = [i.name for i in recorder.of("on_operation_end") if not i.replayed]
    assert names.index("inner") < names.index("scope")

    assert recorder.attempts("flaky") == [
        ("start", 1, None, None),
        ("end", 1, "failed", "ConnectionError"),
        ("start", 2, None, None),
        ("end", 2, "succeeded", None),
    ]
    retry = next(i for i in recorder.of("on_operation_attempt_end") if i.outcome == "failed")
    assert retry.next_attempt_at_ms is not None
    assert recorder.attempts("charge") == [("start", 1, None, None), ("end", 1, "succeeded", None)]
    assert recorder.attempts("nap") == []  # a timer has no attempts
    flaky_end = next(e for e in recorder.ends("flaky") if not e.replayed and e.outcome != "pending")
    assert flaky_end.attempts == 2


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_operation_and_run_are_reported(journal: JournalStore, mode: str) -> None:
    recorder = Recorder()
    result = run(journal, mode, [recorder], fail=True)
    assert result.status == "FAILED"
    (broken,) = [e for e in recorder.ends("broken") if e.outcome != "pending"]
    assert (broken.outcome, broken.error_type, broken.attempts) == ("failed", "KeyError", 1)
    assert recorder.attempts("broken") == [
        ("start", 1, None, None),
        ("end", 1, "failed", "KeyError"),
    ]
    assert recorder.of("on_invocation_end")[-1].outcome == "failed"


@pytest.mark.parametrize("exc", [None, SuspendExecution(Reason.TIMER, wake_at_ms=1)])
@pytest.mark.parametrize("fail", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_a_plugin_raising_in_every_hook_changes_nothing(
    journal: JournalStore,
    mode: str,
    fail: bool,
    exc: BaseException | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    baseline = run(journal, mode, [], fail=fail)  # the same run without plugins
    raising, recorder = Raising(exc), Recorder()
    with caplog.at_level(logging.ERROR, logger="durable_agents.plugins"):
        result = run(journal, mode, [raising, recorder], fail=fail)
    assert (result.status, result.output, result.invocations, result.crashes) == (
        baseline.status,
        baseline.output,
        baseline.invocations,
        baseline.crashes,
    )
    assert (result.error or None) == (baseline.error or None)
    assert journal_shape(result) == [
        (op.replace(baseline.run_id, result.run_id), t, a) for op, t, a in journal_shape(baseline)
    ]
    # Every hook raised, every raise was logged with its traceback — and the plugin after
    # the raising one still heard everything.
    assert {hook for hook, _ in recorder.calls} == set(HOOKS)
    assert raising.raised == len(recorder.calls)
    logged = [r for r in caplog.records if r.name == "durable_agents.plugins"]
    assert len(logged) == raising.raised
    assert all(r.exc_info is not None and "Raising" in r.getMessage() for r in logged)


@pytest.mark.parametrize("mode", MODES)
def test_several_plugins_hear_the_same_story(journal: JournalStore, mode: str) -> None:
    first, second = Recorder(), Recorder()
    run(journal, mode, [first, Raising(), second])
    assert first.calls == second.calls and first.calls


@dataclass
class NoReplays(Recorder):
    """A recorder that does not want to hear of operations only replayed."""

    replayed_operations = False


@pytest.mark.parametrize("mode", MODES)
def test_a_plugin_can_skip_replayed_operations(journal: JournalStore, mode: str) -> None:
    everything, executed_only = Recorder(), NoReplays()
    result = run(journal, mode, [everything, executed_only])
    assert result.status == "SUCCEEDED", result.error
    for hook in ("on_operation_start", "on_operation_end"):
        told = executed_only.of(hook)
        assert not [i for i in told if i.replayed]
        assert told == [i for i in everything.of(hook) if not i.replayed]
    if mode == "faithful":  # replays happened: the other plugin heard of them
        assert [i for i in everything.of("on_operation_end") if i.replayed]
    # Everything else is the same story.
    operations = ("on_operation_start", "on_operation_end")
    rest = [c for c in everything.calls if c[0] not in operations]
    assert [c for c in executed_only.calls if c[0] not in operations] == rest


def test_replayed_operations_build_no_reports_when_no_plugin_wants_them(
    journal: JournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_agents.engine import plugin_calls

    built: list[bool] = []

    def counting(info_type: Any) -> Any:
        def build(*args: Any, **kwargs: Any) -> Any:
            info = info_type(*args, **kwargs)
            built.append(info.replayed)
            return info

        return build

    for name in ("OperationStartInfo", "OperationEndInfo"):
        monkeypatch.setattr(plugin_calls, name, counting(getattr(plugin_calls, name)))
    result = run(journal, "faithful", [NoReplays()])
    assert result.status == "SUCCEEDED", result.error
    assert built and not any(built)  # reports of executed operations only


def test_an_interrupted_attempt_is_reported_when_the_next_one_is_claimed(
    journal: JournalStore,
) -> None:
    recorder = Recorder()
    result = run(journal, "faithful", [recorder], crash=Crash("a", "after_execute"))
    assert result.status == "SUCCEEDED" and result.crashes == 1
    assert recorder.attempts("a") == [
        ("start", 1, None, None),  # then the process died
        ("end", 1, "interrupted", None),
        ("start", 2, None, None),
        ("end", 2, "succeeded", None),
    ]
    # The crashed invocation's end is reported with what escaped it (in the harness: the
    # simulated crash; a real dead process reports nothing).
    crashed = [i for i in recorder.of("on_invocation_end") if i.error_type is not None]
    assert [(i.outcome, i.error_type) for i in crashed] == [(None, "SimulatedCrash")]


@pytest.mark.parametrize("mode", MODES)
def test_a_failure_of_the_instrumentation_itself_changes_nothing(
    journal: JournalStore, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_agents.engine import plugin_calls

    baseline = run(journal, mode, [])

    def broken(*args: Any, **kwargs: Any) -> None:
        raise AttributeError("a bug in the bookkeeping")

    # The bookkeeping between the journal and the hooks, not a plugin, breaks at every turn.
    for method in ("_operation", "_recorded", "_report_end"):
        monkeypatch.setattr(plugin_calls.InvocationObserver, method, broken)
    result = run(journal, mode, [Recorder()])
    assert (result.status, result.output, result.invocations) == (
        baseline.status,
        baseline.output,
        baseline.invocations,
    )
