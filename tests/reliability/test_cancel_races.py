"""A cancel, a terminate or a time limit racing every operation kind of the reference agent.

For each operation of ``test_boundaries.OPERATIONS`` and each hook point it has, a request to
stop the run is recorded exactly there — between the invocation's read of the run and its
write, so the invocation in flight does not know of it — and the simulator drives everything
on (the StepRunner, the reconciler's sweeps, the people). Terminate, and the run's execution
timeout passing (the clock jumps past it there), are raced once per operation. Then, whatever
happened:

* the run ended — CANCELLED (TERMINATED, TIMED_OUT) or, if the stop came after its last
  operation was recorded, SUCCEEDED — and never both: a SUCCEEDED run holds no sign that its
  agent was told, a CANCELLED one does; every sub-agent run it started ended too (no stuck
  run);
* no tool call was prepared, and no operation started at a new position, after the agent was
  told (the reference agent chooses no cleanup) or after the run was terminated or timed out;
* no tool call happened twice, and none is left PREPARED once the reconciler had its turn;
* no result was recorded twice at a position.
"""

from __future__ import annotations

import heapq
from typing import Any

import pytest

from durable_agents.core.models import EffectStatus, OpKind, RunStatus
from durable_agents.engine.cancellation import request_stop
from durable_agents.errors import RunCancelledError
from tests.reliability import sim, world
from tests.reliability.faults import FaultPlan, op_name
from tests.reliability.test_boundaries import EXECUTED, HOOK_POINTS, OPERATIONS, RECORDED

pytestmark = pytest.mark.reliability

AFTERWARDS_MS = 60 * 60_000  # the reconciler's turn once the run ended
LIMIT_MS = 30 * 24 * 3600_000  # longer than any schedule: only the race's jump passes it


class _StopHooks(sim.SimHooks):
    """``SimHooks`` that records the stop request at one hook point of one operation, once."""

    def _at(self, point: str, op_id: str) -> None:
        race: _Race | None = getattr(self.sim, "race", None)
        if race is not None and not race.sent and (op_name(op_id), point) == race.at:
            race.sent = True
            s = self.sim
            if race.mode == "timeout":
                s.clock.advance(LIMIT_MS)  # the run's time limit passes right here
            else:
                request_stop(
                    s.inner, s.clock, s.bus, sim.RUN_ID, mode=race.mode, reason="race",
                    by="user:ops",
                )  # fmt: skip
        super()._at(point, op_id)


class _Race:
    def __init__(self, op: str, point: str, mode: str):
        self.at = (op, point)
        self.mode = mode
        self.sent = False


def _cases() -> list[Any]:
    cases = []
    for kind, op in OPERATIONS.items():
        if kind in EXECUTED:
            points: tuple[str, ...] = HOOK_POINTS
        elif kind == "memory-write":
            points = ("before_claim", "after_execute", "after_record")
        elif kind in RECORDED:
            points = ("before_claim", "after_record")
        else:
            points = ("before_claim",)
        for point in points:
            cases.append(pytest.param(op, point, "cancel", id=f"cancel-{kind}-{point}"))
        # Terminate and the time limit: once per operation (no agent code runs after either).
        cases.append(pytest.param(op, points[0], "terminate", id=f"terminate-{kind}"))
        cases.append(pytest.param(op, points[0], "timeout", id=f"timeout-{kind}"))
    return cases


def _drive_on(simulator: sim.Simulator, duration_ms: int) -> None:
    """Goes on delivering events and sweeping once the run ended (its children, its calls)."""
    clock = simulator.clock
    deadline = clock.now_ms() + duration_ms
    next_tick = clock.now_ms() + sim.TICK_MS
    queue = simulator._queue
    while clock.now_ms() < deadline:
        if queue and queue[0][0] <= next_tick:
            at, _, item = heapq.heappop(queue)
            clock.advance_to(max(at, clock.now_ms()))
            simulator._handle(item)
        else:
            clock.advance_to(next_tick)
            next_tick += sim.TICK_MS
            simulator._tick()


def _jumped_wait(header: Any) -> bool:
    """Whether the run failed because a wait of its own timed out (the clock jumped past it)."""
    return header.error is not None and header.error.type in (
        "CallbackTimeoutError",
        "ApprovalTimeoutError",
    )


def _told_at(entries: list[Any]) -> int | None:
    """When the agent was told (a ``cancel`` entry, or an operation closed with the error)."""
    times = [
        e.recorded_at_ms
        for e in entries
        if e.kind is OpKind.CANCEL
        or (e.error is not None and e.error.type == RunCancelledError.__qualname__)
    ]
    return min(times) if times else None


@pytest.mark.parametrize(("op", "point", "mode"), _cases())
def test_a_stop_racing_an_operation(
    op: str, point: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim, "SimHooks", _StopHooks)
    simulator = sim.Simulator(FaultPlan(seed=0))
    limit_s = LIMIT_MS / 1000
    start = simulator.runtime.start_run
    simulator.runtime.start_run = (  # type: ignore[method-assign]
        lambda *a, **kw: start(*a, execution_timeout=limit_s, **kw)
    )
    race = _Race(op, point, mode)
    simulator.race = race  # type: ignore[attr-defined]
    result = simulator.run()
    assert race.sent, f"{op} never reached {point}: the case tests nothing"
    _drive_on(simulator, AFTERWARDS_MS)
    store = simulator.inner
    problems: list[str] = []
    if result.escaped or simulator.escaped:
        problems.append(f"an invocation raised an unexpected error: {simulator.escaped[:3]}")
    header = store.get_run(sim.RUN_ID)
    snapshot = store.load(sim.RUN_ID)
    stopped = {"cancel": RunStatus.CANCELLED, "terminate": RunStatus.TERMINATED}.get(
        mode, RunStatus.TIMED_OUT
    )
    told = _told_at(snapshot.entries)
    if header.status is RunStatus.SUCCEEDED:
        if told is not None:
            problems.append("SUCCEEDED although its agent was told it is cancelled")
    elif mode == "timeout" and header.status is RunStatus.FAILED and _jumped_wait(header):
        pass  # the jump also expired a wait the invocation in flight then saw time out
    elif header.status is not stopped:
        problems.append(f"ended {header.status.value}, not {stopped.value} or SUCCEEDED")
    # Terminate: nothing new after the run ended; cancel: nothing new after the agent was told.
    ended_at_once = header.status in (RunStatus.TERMINATED, RunStatus.TIMED_OUT)
    cutoff = header.updated_at_ms if ended_at_once else told
    if cutoff is not None:
        started_before = {e.position for e in snapshot.entries if e.recorded_at_ms <= cutoff}
        late = sorted(
            {e.name for e in snapshot.entries if e.position not in started_before}
            - {e.name for e in snapshot.entries if e.kind is OpKind.CANCEL}
        )
        if late:
            problems.append(f"operations started after the stop was decided: {late}")
        prepared = [f.tool for f in snapshot.effects if f.prepared_at_ms > cutoff]
        if prepared:
            problems.append(f"tool calls prepared after the stop was decided: {prepared}")
    for tool_name, count in world.WORLD.effects().items():
        if count > 1:
            problems.append(f"{tool_name} happened {count} times")
    for run in store.list_runs(limit=100).runs:
        if not run.status.terminal and run.status is not RunStatus.PAUSED:
            problems.append(f"run {run.run_id} is stuck {run.status.value}")
        for effect in store.load(run.run_id).effects:
            if effect.status is EffectStatus.PREPARED:
                problems.append(f"{effect.operation_id} left PREPARED")
    if result.duplicates:
        problems.append(f"results recorded twice: {result.duplicates}")
    assert not problems, f"{mode} at {op}/{point}: {problems}; status {header.status.value}"
