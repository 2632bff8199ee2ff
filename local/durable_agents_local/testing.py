"""A test harness for agents: the real runtime on a real journal, with a skip-clock.

Two modes:

* ``continuous`` — operations run back to back in one invocation, suspending only on waits;
  the skip-clock jumps over every wait and retry delay. Fast: for users' unit tests.
* ``faithful`` — one operation per invocation, replaying from the journal each time, exactly
  as the StepRunner does on AWS. The contract and golden tests use it.

Crashes are injected at a chosen operation (before it runs, after it ran but before its result
was recorded, or after the record); the harness then behaves like the platform: the claim's
lease expires and the run is invoked again.

Example:
    >>> from durable_agents import AgentRegistry, agent
    >>> from durable_agents_local.testing import AgentTestRunner, Crash
    >>> @agent(name="doubler", version="1", registry=AgentRegistry())
    ... def doubler(ctx, n: int) -> int:
    ...     doubled = ctx.step(lambda: n * 2, name="double")
    ...     ctx.wait(3600, name="nap")
    ...     return ctx.step(lambda: doubled + 1, name="add-one")
    >>> result = AgentTestRunner(doubler, mode="faithful").run(20, crash=Crash("add-one"))
    >>> result.status, result.output, result.crashes
    ('SUCCEEDED', 41, 1)
    >>> result.operation("add-one").attempts
    2
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from durable_agents.admin.reconciler import expire_wait
from durable_agents.agent import AgentDefinition, AgentRegistry, default_registry
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import (
    RunStatus,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.serde import decode
from durable_agents.engine.cancellation import request_stop
from durable_agents.engine.events import STEP_READY, CollectingPublisher
from durable_agents.engine.inbox import send_event
from durable_agents.engine.memory_store import InMemoryMemoryStore, MemoryStore
from durable_agents.engine.operations.approval import record_decision
from durable_agents.engine.operations.callback import complete_callback, heartbeat
from durable_agents.engine.runtime import InvocationOutcome, OutcomeKind, Runtime
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.llm.types import LlmProvider
from durable_agents.plugins import Plugin
from durable_agents.prompts import PromptRegistry
from durable_agents_local.replay_check import (
    ReplayDifference,
    ReplaySideEffectWarning,
    check_replays,
)
from durable_agents_local.testing_views import (
    Crash,
    CrashPoint,
    OperationView,
    SimulatedCrash,
    TestResult,
    _CrashHooks,
    operation_views,
)

__all__ = [
    "AgentTestRunner",
    "Crash",
    "CrashPoint",
    "ModelScript",
    "OperationView",
    "ReplayDifference",
    "ReplaySideEffectWarning",
    "SimulatedCrash",
    "TestResult",
]

_SETTLED = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
    RunStatus.TERMINATED,
    RunStatus.TIMED_OUT,
    RunStatus.PAUSED,
    RunStatus.VERSION_UNAVAILABLE,
)
# Read once per invocation the harness drives: module sets, not ``OutcomeKind.X`` reads (on
# Python 3.11 each goes through ``EnumType``'s ``__getattr__`` hook).
_WAITING = frozenset({OutcomeKind.SUSPENDED, OutcomeKind.CONTENDED})
_SETTLED_OUTCOMES = frozenset(
    {
        OutcomeKind.SUCCEEDED,
        OutcomeKind.FAILED,
        OutcomeKind.CANCELLED,
        OutcomeKind.TERMINATED,
        OutcomeKind.TIMED_OUT,
        OutcomeKind.PAUSED,
        OutcomeKind.VERSION_UNAVAILABLE,
    }
)

ModelScript = ScriptedProvider | Sequence[Any] | Mapping[str, Any] | str | Path
"""What ``AgentTestRunner(model_script=...)`` accepts."""


def _scripted(script: ModelScript | None) -> ScriptedProvider | None:
    """The scripted provider a test asked for (see ``AgentTestRunner``'s ``model_script``).

    Raises:
        ConfigurationError: If the script is invalid or its file cannot be read.
    """
    if script is None or isinstance(script, ScriptedProvider):
        return script
    if isinstance(script, str | Path):
        return ScriptedProvider.from_file(script)
    return ScriptedProvider.from_data(script if isinstance(script, Mapping) else list(script))


class AgentTestRunner:
    """Runs one agent in-process on a real journal with a skip-clock.

    Args:
        agent_definition: The agent (what ``@agent`` returned).
        journal: The backend (a fresh ``InMemoryJournal`` by default; pass a
            ``DynamoDBJournal`` on moto to test the DynamoDB path).
        mode: ``continuous`` or ``faithful`` (see the module docstring).
        clock: The skip-clock (a new one by default).
        lease_seconds: The claim lease a crashed invocation leaves behind.
        max_invocations: A safety bound against agents that never finish.
        agents: Sub-agents the agent calls with ``ctx.invoke`` (driven like the main run).
        model_script: What answers ``ModelConfig(provider="scripted")`` calls: a list of
            turns, a script file's parsed JSON (``{"scripts": [...]}``), the path of a script
            file, or a ``ScriptedProvider`` (``durable_agents.llm.scripted``); then
            ``runner.scripted`` counts the calls.
        providers: More model providers by name (a stub ``bedrock``, say).
        memory: The store behind ``ctx.memory`` (a fresh ``InMemoryMemoryStore`` by default).
        plugins: Instrumentation hooks (``durable_agents.plugins``) for the runtime.
        prompts: The prompts and model configurations the agents pin (``ctx.prompt``,
            ``ctx.model_config``): the default registry's (where ``register_prompt`` puts
            them) unless given.
        sticky: Park the agent between faithful invocations, as a warm StepRunner container
            does with ``STICKY_RUNS`` (docs/invocations.md).
        check_determinism: After each drive of the run (``run``, ``resume``, ``decide``, …),
            replay its journal twice more, dry (no operation executes, nothing is written),
            and warn (``ReplaySideEffectWarning``) of what the agent's code outside
            operations did differently: output, log lines, the operations it asked for, the
            value it returned. Each finding is also in ``TestResult.replay_warnings``. Off by
            default: it costs two replays of the journal per drive
            (``durable_agents_local.replay_check``).

    Example:
        >>> from durable_agents import AgentRegistry, agent
        >>> from durable_agents.llm import LlmRequest, Message, ModelConfig
        >>> MODEL = ModelConfig(name="m", version="1", provider="scripted", model_id="s")
        >>> @agent(name="answerer", version="1", registry=AgentRegistry())
        ... def answerer(ctx, question: str) -> str:
        ...     request = LlmRequest(messages=[Message.user(question)])
        ...     return ctx.llm("answer", request, config=MODEL).text
        >>> runner = AgentTestRunner(answerer, model_script=[{"text": "42"}])
        >>> runner.run("the answer?").output, runner.scripted.calls
        ('42', 1)
    """

    __test__ = False

    def __init__(
        self,
        agent_definition: AgentDefinition[Any, Any],
        *,
        journal: JournalStore | None = None,
        mode: Literal["continuous", "faithful"] = "continuous",
        clock: SkipClock | None = None,
        lease_seconds: float = 60.0,
        max_invocations: int = 100_000,
        agents: Sequence[AgentDefinition[Any, Any]] = (),
        model_script: ScriptedProvider
        | Sequence[Any]
        | Mapping[str, Any]
        | str
        | Path
        | None = None,
        providers: Mapping[str, LlmProvider] | None = None,
        memory: MemoryStore | None = None,
        plugins: Sequence[Plugin] = (),
        prompts: PromptRegistry | None = None,
        sticky: bool = False,
        check_determinism: bool = False,
    ):
        if mode not in ("continuous", "faithful"):
            raise ValueError("mode is 'continuous' or 'faithful'")
        if sticky and mode != "faithful":
            raise ValueError("sticky continuation is a faithful-mode option")
        self.agent = agent_definition
        self.journal = journal or InMemoryJournal()
        self.clock = clock or SkipClock()
        self.mode = mode
        self.check_determinism = check_determinism
        self.lease_ms = int(lease_seconds * 1000)
        self.max_invocations = max_invocations
        self.registry = AgentRegistry()
        # The runner's registry holds only these agents, but the prompts they pin live where
        # they were registered: without them no run of such an agent could start.
        self.registry.prompts = prompts if prompts is not None else default_registry.prompts
        self.registry.add(agent_definition)
        for sub_agent in agents:  # sub-agents the agent invokes
            self.registry.add(sub_agent)
        self.publisher = CollectingPublisher()
        self.memory: MemoryStore = memory if memory is not None else InMemoryMemoryStore()
        self.scripted = _scripted(model_script)
        models = dict(providers or {})
        if self.scripted is not None:
            models["scripted"] = self.scripted
        self.runtime = Runtime(
            self.journal,
            registry=self.registry,
            publisher=self.publisher,
            clock=self.clock,
            providers=models or None,
            memory=self.memory,
            plugins=plugins,
            sticky=StickyRuns() if sticky else None,
        )

    def run(
        self,
        input_value: Any,
        *,
        crash: Crash | Sequence[Crash] | None = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> TestResult:
        """Starts a run and drives it until it finishes, pauses or waits on something external.

        Raises:
            RuntimeError: If the run needs more than ``max_invocations`` invocations.
        """
        header, _ = self.runtime.start_run(
            self.agent.name, input_value, run_id=run_id, idempotency_key=idempotency_key
        )
        return self.resume(header.run_id, crash=crash)

    def resume(self, run_id: str, *, crash: Crash | Sequence[Crash] | None = None) -> TestResult:
        """Drives an existing run on (for example after an external event arrived).

        Raises:
            RuntimeError: If the run needs more than ``max_invocations`` invocations.
        """
        crashes = [crash] if isinstance(crash, Crash) else list(crash or [])
        hooks = _CrashHooks(crashes)
        faithful = self.mode == "faithful"
        budget = 1 if faithful else None
        outcomes: list[InvocationOutcome] = []
        crashed = 0
        # Invocations to make, as EventBridge would deliver the published Step Ready events:
        # (run id, parent branch target or None). Sub-agent runs are driven too.
        queue: deque[tuple[str, str | None]] = deque([(run_id, None)])
        publisher = self.publisher
        seen = len(publisher.events)
        timers: list[tuple[int, str]] = []
        execute, lease_ms = self.runtime.execute, self.lease_ms  # once, not per invocation
        for _ in range(self.max_invocations):
            if not queue:
                if self.journal.get_run(run_id).status in _SETTLED or not timers:
                    break  # finished, paused, or waiting for something outside
                due = min(t for t, _ in timers)
                self.clock.advance_to(due)
                queue.extend((rid, None) for t, rid in timers if t <= due)
                timers = [(t, rid) for t, rid in timers if t > due]
                continue
            current, target = queue.popleft()
            try:
                outcome = execute(
                    current,
                    budget=budget,
                    remaining_ms=lease_ms,
                    hooks=hooks,
                    target=target,
                    # Faithful: as the StepRunner does (one operation unless the agent says).
                    agent_budget=faithful,
                )
            except SimulatedCrash:
                # The platform's view of a dead process: its lease runs out, the event is
                # delivered again.
                crashed += current == run_id
                self.clock.advance(self.lease_ms + 10_000)
                queue.append((current, target))
                continue
            if current == run_id:
                outcomes.append(outcome)
            for event in publisher.events[seen:]:
                if event.detail_type == STEP_READY:
                    queue.append((event.detail["run_id"], event.detail.get("target")))
            seen = len(publisher.events)
            if outcome.kind in _WAITING:
                # An event's timeout passes only by ``advance`` (as approvals' deadlines do).
                if outcome.wake_at_ms is not None and not self._event_deadline(current):
                    timers.append((outcome.wake_at_ms, current))
            elif current == run_id and outcome.kind in _SETTLED_OUTCOMES:
                break
        else:
            raise RuntimeError(f"run {run_id} did not settle in {self.max_invocations} invocations")
        result = self.inspect(
            run_id, outcomes=outcomes, crashes=hooks.fired, crashed_invocations=crashed
        )
        if self.check_determinism:
            result.replay_warnings = self.check_replays(run_id)
        return result

    def check_replays(self, run_id: str) -> list[ReplayDifference]:
        """Replays the run twice, dry, and warns of what its code did differently each time.

        What ``check_determinism=True`` does after every drive; callable on its own, for any
        run of this runner (``durable_agents_local.replay_check``).

        Returns:
            The differences found (each also warned as ``ReplaySideEffectWarning``).

        Raises:
            RunNotFoundError: If there is no such run.
        """
        return check_replays(
            self.journal,
            run_id,
            registry=self.registry,
            providers=self.runtime.providers,
            memory=self.memory,
            now_ms=self.clock.now_ms(),
        )

    def _event_deadline(self, run_id: str) -> bool:
        header = self.journal.get_run(run_id)
        waiting = header.waiting_on or {}
        return waiting.get("kind") == "event" and waiting.get("until_ms") == header.wake_at_ms

    def pending_waits(self, run_id: str, kind: str) -> list[WaitRecord]:
        """The run's pending approvals (``kind="approval"``) or callbacks (``"callback"``)."""
        return [w for w in self.journal.list_waits(kind, WaitStatus.PENDING) if w.run_id == run_id]

    def decide(
        self, run_id: str, *, approved: bool, decided_by: str = "user:test", comment: str = ""
    ) -> TestResult:
        """Decides the run's one pending approval as a person would, then drives the run on.

        Raises:
            ValueError: If the run has no pending approval, or several.
        """
        pending = self.pending_waits(run_id, "approval")
        if len(pending) != 1:
            raise ValueError(f"run {run_id} has {len(pending)} pending approvals, not one")
        record_decision(
            self.journal,
            self.clock,
            pending[0],
            approved=approved,
            decided_by=decided_by,
            comment=comment,
            via="test",
        )
        return self.resume(run_id)

    def complete_callback(
        self,
        run_id: str,
        name: str,
        *,
        result: Any = None,
        error_type: str | None = None,
        error_message: str = "",
    ) -> TestResult:
        """Completes the run's pending callback called ``name``, then drives the run on.

        Raises:
            ValueError: If the run has no pending callback with that name.
        """
        matching = [w for w in self.pending_waits(run_id, "callback") if w.name == name]
        if not matching:
            raise ValueError(f"run {run_id} has no pending callback {name!r}")
        complete_callback(
            self.journal,
            self.clock,
            matching[0],
            result=result,
            error_type=error_type,
            error_message=error_message,
        )
        return self.resume(run_id)

    def send_event(
        self, run_id: str, name: str, payload: Any = None, *, event_id: str | None = None
    ) -> TestResult:
        """Sends an event as ``POST /runs/{id}/events/{name}`` does, then drives the run on."""
        send_event(self.journal, self.clock, run_id, name, payload, event_id)
        return self.resume(run_id)

    def heartbeat(self, run_id: str, name: str) -> WaitRecord:
        """Sends a heartbeat for the run's pending callback ``name`` (as the external system).

        Raises:
            ValueError: If the run has no pending callback with that name.
        """
        matching = [w for w in self.pending_waits(run_id, "callback") if w.name == name]
        if not matching:
            raise ValueError(f"run {run_id} has no pending callback {name!r}")
        return heartbeat(self.journal, self.clock, matching[0])

    def cancel(
        self, run_id: str, *, reason: str = "test", by: str = "user:test", terminate: bool = False
    ) -> TestResult:
        """Asks the run to stop (cancel, or ``terminate``) as the Api would, then drives it on.

        Raises:
            RunStateConflictError: If the run has already ended.
            RunNotCancellableError: If a cancel is asked of a paused run.
        """
        mode = "terminate" if terminate else "cancel"
        request_stop(
            self.journal, self.clock, self.publisher, run_id, mode=mode, reason=reason, by=by
        )
        return self.resume(run_id)

    def advance(self, duration: float | timedelta, run_id: str) -> TestResult:
        """Moves the skip-clock forward, fires what fell due, and drives the run on.

        Approval and callback deadlines and callback heartbeat timeouts that passed expire as
        the reconciler would expire them on AWS (their schedule fired), with no manual sweep;
        then the run is driven on (timers that fell due fire as usual).

        Raises:
            RuntimeError: If the run needs more than ``max_invocations`` invocations.
        """
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        self.clock.advance(int(seconds * 1000))
        for kind in ("approval", "callback"):
            for record in self.journal.list_waits(kind, WaitStatus.PENDING):
                expire_wait(self.runtime, record.wait_id)
        return self.resume(run_id)

    def inspect(
        self,
        run_id: str,
        *,
        outcomes: list[InvocationOutcome] | None = None,
        crashes: int = 0,
        crashed_invocations: int = 0,
    ) -> TestResult:
        """Reads a run's journal into a ``TestResult``."""
        snapshot = self.journal.load(run_id)
        header = snapshot.header
        output = None
        if header.status is RunStatus.SUCCEEDED:
            output = decode(header.result, self.agent.output_type)
        return TestResult(
            run_id=run_id,
            status=header.status.value,
            output=output,
            error=header.error,
            header=header,
            operations=operation_views(snapshot),
            invocations=len(outcomes or []) + crashed_invocations,
            crashes=crashes,
            outcomes=outcomes or [],
            events=list(self.publisher.events),
        )
