"""Stop requests in the fault suite: cancel, terminate and time limits at every boundary.

The simulator of ``sim.py`` (faults, warm sticky containers, the reconciler, people) drives
the *stopper* agent instead of the reference one. The stopper holds open waits of every kind
that it is not blocked on while it works (a callback handle it awaits only at the end, the
approval a quorum batch left pending), uses every operation kind on the way (a model call, an
idempotent tool, a step, a timer, an approval, an event wait without a timeout, a sub-agent),
and loops into a second generation with ``continue_as_new``. Its cleanup after
``RunCancelledError`` re-raises, returns, swallows the error and carries on, or ends its
generation with ``continue_as_new``, as a plan says.

A stop is asked for at one boundary: at a hook point (before the claim, before or after the
execution, after the record) of one operation of one generation, or between invocations at
the n-th reconciler tick. A cancel and a terminate are asked as the Api asks
(``request_stop``); a time limit passes by the clock jumping past the run's
``execution_timeout``.

What must hold (``check``):

1. **Nothing new runs after the stop**: no invocation that starts after the request was
   accepted starts an operation of the run's code, other than the cleanup the agent runs
   after it was told (an operation already under way when the request landed, a step's
   attempt or a tool call between PREPARE and COMMIT, finishes through its own protocol).
2. **Told once per run**: at most one ``cancel`` entry and one recorded cleanup across all
   generations; a CANCELLED run has exactly one cleanup, and its header records where the
   agent was told.
3. **It ends**: the run (and its sub-agent) reaches a final status within the bound: the
   stop's own (CANCELLED, TERMINATED, TIMED_OUT) or, for a stop that lost the race to the
   run's end, SUCCEEDED with nothing run after the stop.
4. No invocation raises an unexpected error; no position holds two results.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from durable_agents import AgentRegistry, CompletionPolicy, DurableContext, agent
from durable_agents.core.models import EntryType, OpKind, RunStatus
from durable_agents.engine.cancellation import request_stop
from durable_agents.engine.events import EventPublishError, step_ready
from durable_agents.engine.inbox import RunNotAcceptingEventsError, send_event
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.errors import InfrastructureError, RunCancelledError
from durable_agents.llm.types import ContentBlock, LlmRequest, LlmResponse, Message, ModelConfig
from durable_agents.tools import ToolCall, ToolRegistry, tool
from tests.reliability import sim, world
from tests.reliability.faults import FaultPlan, op_name

RUN_ID = sim.RUN_ID
LIMIT = timedelta(hours=6)
"""The run's execution timeout: a time-limit stop jumps the clock past it."""
MODEL = ModelConfig(name="stop-model", version="1", provider="stop", model_id="stop-1")
CLEANUP_MODES = ("reraise", "return", "swallow", "continue_as_new")
STOP_MODES = ("cancel", "terminate", "timeout")
# The stopper's own operations, in program order (a stop point names one of them).
OPERATIONS = (
    "held", "quorum", "plan", "charge", "work", "pause", "approve", "go", "audit",
    "continue_as_new",
)  # fmt: skip
POINTS = ("before_claim", "before_execute", "after_execute", "after_record")


@dataclass
class Ledger:
    """What the stopper's code started, and in which invocation (the world's view)."""

    started: list[tuple[str, int, int]] = field(default_factory=list)
    """(operation, generation, invocation sequence) of every execution of a body."""
    current: list[int] = field(default_factory=lambda: [0])
    """The sequences of the invocations running now (a concurrent duplicate nests)."""

    def note(self, name: str, generation: int) -> None:
        self.started.append((name, generation, self.current[-1]))


LEDGER = Ledger()


class _Model(world.SimModel):
    """The stopper's model: a deterministic answer, each call noted in the ledger."""

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        text = request.messages[-1].content[0].text or ""
        name, _, generation = text.partition("@")
        LEDGER.note(name, int(generation or 0))
        return LlmResponse(content=[ContentBlock.of_text(f"re: {text}")], stop_reason="end_turn")


tools = ToolRegistry()


@tool(name="charge", idempotent=True, stale_after_seconds=world.STALE_AFTER_SECONDS,
      reviewers=[world.REVIEWER], registry=tools)  # fmt: skip
def charge(request: world.Order, call: ToolCall) -> dict[str, Any]:
    """An idempotent payment: noted in the ledger (its generation is in the order)."""
    LEDGER.note("charge", int(request.order.rsplit("-", 1)[-1]))
    return {"charged": request.order}


agents = AgentRegistry()


@agent(name="stop-auditor", version="1", registry=agents)
def stop_auditor(ctx: DurableContext, value: dict[str, Any]) -> str:
    """The sub-agent: a step and a timer, so that a stop finds it under way."""
    ctx.step(lambda: "looked", name="look")
    ctx.wait(120, name="think")
    return "audited"


def _note(name: str, generation: int) -> Any:
    def body() -> str:
        LEDGER.note(name, generation)
        return name

    return body


def _slow(ctx: DurableContext) -> str:
    ctx.wait_for_approval("slow", request={}, approvers=[world.APPROVER], timeout=24 * 3600)
    return "slow"


def _quick(ctx: DurableContext) -> str:
    return str(ctx.step(lambda: "quick", name="quick"))


@agent(name="stopper", version="1", registry=agents, execution_timeout=LIMIT)
def stopper(ctx: DurableContext, value: dict[str, Any]) -> str:
    """Open waits it is not blocked on, every kind of operation, two generations."""
    turn, cleanup = int(value["turn"]), str(value["cleanup"])
    try:
        held = ctx.create_callback("held", timeout=48 * 3600)
        # A quorum: the approval branch starts first, the step branch meets the policy.
        ctx.parallel([_slow, _quick], completion=CompletionPolicy(min_successful=1), name="quorum")
        ctx.llm("plan", LlmRequest(messages=[Message.user(f"plan@{turn}")]), config=MODEL)
        ctx.tool(charge, world.Order(order=f"{sim.ORDER}-{turn}"))
        ctx.step(_note("work", turn), name="work")
        ctx.wait(60, name="pause")
        ctx.wait_for_approval("approve", request={"turn": turn}, approvers=[world.APPROVER])
        ctx.wait_for_event("go")  # no timeout: only the event or a stop ends it
        ctx.invoke(stop_auditor, {"turn": turn}, name="audit")
        held.result()
        if turn == 0:
            ctx.continue_as_new({"turn": 1, "cleanup": cleanup})
        return "done"
    except RunCancelledError:
        ctx.step(_note("cleanup", turn), name="cleanup")
        if cleanup == "reraise":
            raise
        if cleanup == "continue_as_new":
            ctx.continue_as_new({"turn": turn + 1, "cleanup": cleanup})
        if cleanup == "swallow" and turn == 0:
            ctx.continue_as_new({"turn": 1, "cleanup": cleanup})  # as if nothing happened
        return "cleaned up"


@dataclass(frozen=True)
class StopPlan:
    """A fault plan, and the stop it gets.

    Attributes:
        faults: The faults (``FaultPlan``: rates, window, budget, sticky containers…).
        mode: ``cancel``, ``terminate`` or ``timeout``.
        operation: The operation at whose hook ``point`` the stop is asked for, or ``tick``
            (between invocations, at the ``tick``-th reconciler tick).
        point: The hook point (``POINTS``), unused for ``tick``.
        generation: Which generation's ``operation`` (0 or 1).
        tick: The tick, for ``operation == "tick"``.
        cleanup: What the agent's cleanup does (``CLEANUP_MODES``).
    """

    faults: FaultPlan
    mode: str
    operation: str
    point: str
    generation: int
    tick: int
    cleanup: str

    def describe(self) -> str:
        """A one-line reproduction."""
        return (
            f"StopPlan(faults={self.faults.describe()}, mode={self.mode!r}, "
            f"operation={self.operation!r}, point={self.point!r}, "
            f"generation={self.generation}, tick={self.tick}, cleanup={self.cleanup!r})"
        )


@dataclass
class StopResult:
    """How a stop schedule ended (see ``check``)."""

    plan: StopPlan
    status: str
    child_statuses: list[str]
    accepted_after: int | None
    started: list[tuple[str, int, int]]
    cancel_entries: int
    cleanups: int
    told: Any
    duplicates: list[str]
    escaped: list[str]
    settled: bool
    sim_ms: int
    faults: Counter[str]


class _StopHooks(sim.SimHooks):
    def _at(self, point: str, op_id: str) -> None:
        stopping = self.sim
        assert isinstance(stopping, StopSimulator)
        plan = stopping.stop_plan
        if (
            self.run_id == RUN_ID
            and plan.operation == op_name(op_id)
            and plan.point == point
            and _generation(op_id) == plan.generation
        ):
            stopping.stop()
        super()._at(point, op_id)


def _generation(op_id: str) -> int:
    """The generation of an operation id (``<run_id>:g<g>/…`` past generation 0)."""
    found = re.match(r"[^:]+:g(\d+)/", op_id)
    return int(found.group(1)) if found else 0


class StopSimulator(sim.Simulator):
    """``sim.Simulator`` driving the stopper, with one stop asked for at the plan's boundary."""

    def __init__(self, plan: StopPlan):
        self.stop_plan = plan
        LEDGER.started.clear()
        LEDGER.current[:] = [0]
        self.sequence = 0
        self.accepted_after: int | None = None
        self.ticks = 0
        super().__init__(plan.faults)

    def _runtime(self, sticky: StickyRuns | None) -> Runtime:
        return Runtime(
            self.store,
            registry=agents,
            publisher=self.bus,
            clock=self.clock,
            providers={"stop": _Model()},
            wait_scheduler=sim._Scheduler(self),
            memory=world.WORLD.memory,
            sticky=sticky,
        )

    def stop(self) -> None:
        """Asks for the plan's stop, once (as the Api does, which retries its own errors)."""
        if self.accepted_after is not None:
            return
        header = self.inner.get_run(RUN_ID)
        if header.status.terminal:
            return
        mode = self.stop_plan.mode
        if mode == "timeout":
            self.clock.advance(int(LIMIT.total_seconds() * 1000) + 1)
        else:
            try:
                request_stop(
                    self.inner, self.clock, _Quiet(self.bus), RUN_ID,
                    mode=mode, reason="the plan's stop", by="user:ops",
                )  # fmt: skip
            except Exception as exc:
                self.escaped.append(f"stop: {type(exc).__name__}: {exc}")
                return
        # Invocations with a larger sequence start after the request was accepted.
        self.accepted_after = self.sequence

    def invoke(self, run_id: str, target: str | None, attempt: int) -> None:
        self.sequence += 1
        LEDGER.current.append(self.sequence)
        try:
            super().invoke(run_id, target, attempt)
        finally:
            LEDGER.current.pop()

    def hooks(self, run_id: str, target: str | None) -> sim.SimHooks:
        return _StopHooks(self, run_id, target)

    def _tick(self) -> None:
        self.ticks += 1
        if self.stop_plan.operation == "tick" and self.ticks == self.stop_plan.tick:
            self.stop()
        self._guarded(
            "sweep", lambda: sim.sweep(self.runtime, stall_after_ms=sim.STALL_AFTER_MS, tools=tools)
        )
        self._people()
        header = self.inner.get_run(RUN_ID)
        waiting = header.waiting_on or {}
        if waiting.get("kind") == "event":  # the event the stopper waits for, sent by the Api
            self._guarded("event", self._send_event)
            self._guarded("publish", lambda: self.bus.publish([step_ready(RUN_ID, "event")]))

    def _send_event(self) -> None:
        # The header read above may predate the stop this tick recorded: the inbox then
        # refuses the event (the Api answers 409 to its sender), which is not an error.
        with contextlib.suppress(RunNotAcceptingEventsError):
            send_event(self.inner, self.clock, RUN_ID, "go", {})

    def _start(self) -> None:
        self.started_ms = self.clock.now_ms()
        for _ in range(self.plan.max_faults + 10):
            try:
                self.runtime.start_run(
                    "stopper", {"turn": 0, "cleanup": self.stop_plan.cleanup},
                    run_id=RUN_ID, idempotency_key="k-stop",
                )  # fmt: skip
                return
            except (InfrastructureError, EventPublishError):
                self.clock.advance(1_000)
        raise AssertionError("the run could not be started after the faults stopped")

    def _settled(self) -> bool:
        runs = self.inner.list_runs(limit=100).runs
        return all(h.status.terminal for h in runs) or (
            bool(self._in_review()) and not self.plan.reviewer
        )

    def result(self) -> StopResult:
        header = self.inner.get_run(RUN_ID)
        cancel_entries = cleanups = 0
        duplicates: list[str] = []
        for generation in range(header.generation + 1):
            seen: set[str] = set()
            for entry in self.inner.load_generation(RUN_ID, generation).entries:
                if entry.kind is OpKind.CANCEL:
                    cancel_entries += 1
                if not entry.type.is_result:
                    continue
                key = f"{entry.position}:{entry.name}"
                if key in seen:
                    duplicates.append(key)
                seen.add(key)
                if entry.name == "cleanup" and entry.type is EntryType.SUCCEEDED:
                    cleanups += 1
        children = [h for h in self.inner.list_runs(limit=100).runs if h.run_id != RUN_ID]
        told = (header.cancel_requested or {}).get("told")
        return StopResult(
            plan=self.stop_plan,
            status=header.status.value,
            child_statuses=[c.status.value for c in children],
            accepted_after=self.accepted_after,
            started=list(LEDGER.started),
            cancel_entries=cancel_entries,
            cleanups=cleanups,
            told=told,
            duplicates=duplicates,
            escaped=list(self.escaped),
            settled=self._settled(),
            sim_ms=self.clock.now_ms() - self.started_ms,
            faults=Counter(self.injector.counts),
        )


class _Quiet:
    """The Api's publish: a lost ``Step Ready`` is the reconciler's to make good (ADR 0011)."""

    def __init__(self, bus: Any):
        self._bus = bus

    def publish(self, events: Any) -> None:
        with contextlib.suppress(InfrastructureError, EventPublishError):
            self._bus.publish(events)


def simulate(plan: StopPlan) -> StopResult:
    """Runs one stop schedule."""
    simulator = StopSimulator(plan)
    simulator.run()
    return simulator.result()


_EXPECTED = {
    "cancel": RunStatus.CANCELLED.value,
    "terminate": RunStatus.TERMINATED.value,
    "timeout": RunStatus.TIMED_OUT.value,
}


def check(result: StopResult) -> list[str]:
    """The violated invariants of one stop schedule (empty when all held)."""
    problems: list[str] = []
    mode = result.plan.mode
    if result.escaped:
        problems.append(f"an invocation raised an unexpected error: {result.escaped[:3]}")
    if result.duplicates:
        problems.append(f"a position holds two results: {result.duplicates[:3]}")
    if not result.settled:
        problems.append(
            f"stuck: the run is {result.status}, its sub-agents {result.child_statuses}, "
            f"{result.sim_ms // 60_000} simulated minutes in"
        )
    accepted = result.accepted_after
    if accepted is not None:
        late = [
            (name, generation)
            for name, generation, sequence in result.started
            if sequence > accepted
            and name != "cleanup"
            # An operation under way when the request landed finishes (its retry included).
            and not any(
                n == name and g == generation and s <= accepted for n, g, s in result.started
            )
        ]
        if late:
            problems.append(f"operations started after the stop was accepted: {late}")
        if result.settled and result.status not in (_EXPECTED[mode], "SUCCEEDED"):
            problems.append(f"a {mode} ended the run {result.status}")
    if result.cancel_entries > 1:
        problems.append(f"the agent was told {result.cancel_entries} times (cancel entries)")
    if result.cleanups > 1:
        problems.append(f"the cleanup ran {result.cleanups} times")
    if result.status == RunStatus.CANCELLED.value:
        if result.cleanups != 1:
            problems.append(f"a CANCELLED run recorded {result.cleanups} cleanups, not one")
        if result.told is None:
            problems.append("a CANCELLED run's header does not say where the agent was told")
    if mode != "cancel" and result.cleanups:
        problems.append(f"a {mode} ran the agent's cleanup")
    return problems


def explain(result: StopResult, problems: list[str]) -> str:
    """The violations, with the plan that reproduces them."""
    return (
        "; ".join(problems)
        + f"\n  reproduce: {result.plan.describe()}\n  started: {result.started}"
        + f"\n  faults: {dict(result.faults)} status={result.status} told={json.dumps(result.told)}"
    )
