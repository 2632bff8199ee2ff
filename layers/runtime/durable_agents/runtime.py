"""The runtime: start runs and execute one invocation of a run (what the StepRunner does)."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter, ValidationError

from durable_agents.agent import AgentDefinition, AgentRegistry, default_registry
from durable_agents.clock import Clock, SystemClock
from durable_agents.context import DurableContext
from durable_agents.credentials import CredentialProvider
from durable_agents.errors import (
    AgentNotFoundError,
    DurableError,
    EntryConflictError,
    RunRevisionConflictError,
    RunStateConflictError,
    SuspendExecution,
    VersionNotDeployedError,
)
from durable_agents.events import (
    RUN_FINISHED,
    CollectingPublisher,
    EventPublisher,
    OutgoingEvent,
    step_ready,
)
from durable_agents.ids import check_run_id
from durable_agents.invocation import NO_HOOKS, Invocation, InvocationHooks, Reason
from durable_agents.journal.store import JournalStore, input_hash
from durable_agents.llm.types import LlmProvider, StreamSink
from durable_agents.models import EffectStatus, Entry, ErrorInfo, RunChange, RunHeader, RunStatus
from durable_agents.observability import ReplayAwareLogger
from durable_agents.serde import decode, encode, error_info
from durable_agents.tenancy import DEFAULT_TENANT, check_tenant
from durable_agents.waits.schedules import WaitScheduler

_ACTIVE = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED})
LEASE_MARGIN_MS = 5_000
DEFAULT_LEASE_MS = 15 * 60 * 1000 + LEASE_MARGIN_MS  # the Lambda maximum, plus clock skew


class InputValidationError(DurableError):
    """The run input does not match the agent's declared input type."""

    def __init__(self, agent: str, errors: list[dict[str, Any]]):
        self.agent = agent
        self.errors = errors
        super().__init__(f"input does not match agent {agent!r}: {errors}")


class OutcomeKind(StrEnum):
    """How an invocation ended."""

    CONTINUE = "continue"
    """More work is ready; a ``Step Ready`` event was published."""
    SUSPENDED = "suspended"
    """The run waits for a timer or an external event."""
    CONTENDED = "contended"
    """Another invocation holds the frontier; nothing was published."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PAUSED = "paused"
    """Stopped for a person (replay diverged, pinned version missing)."""
    NOOP = "noop"
    """The run was already finished or paused."""


@dataclass(frozen=True, slots=True)
class InvocationOutcome:
    """What one invocation did.

    Attributes:
        run_id: The run.
        kind: How the invocation ended.
        executed: Operation ids executed (not replayed) by this invocation.
        wake_at_ms: For SUSPENDED/CONTENDED: when the run should be looked at again.
        detail: A human-readable reason.
        targets: For CONTINUE: the parallel branches to advance in separate invocations
            (empty = one untargeted invocation).
        external: For SUSPENDED: the run waits on something outside (a person, a callback,
            a child run, its branches) rather than only a timer.
    """

    run_id: str
    kind: OutcomeKind
    executed: list[str] = field(default_factory=list)
    wake_at_ms: int | None = None
    detail: str = ""
    targets: tuple[str, ...] = ()
    external: bool = False


def new_run_id() -> str:
    """Returns a fresh run id (``run-`` and 16 hex digits)."""
    return f"run-{secrets.token_hex(8)}"


class Runtime:
    """Starts runs and executes invocations against a journal.

    Args:
        store: The journal backend.
        registry: Where agents are registered (the default registry if omitted).
        publisher: Where events go (kept in memory if omitted).
        clock: The time source (the wall clock if omitted).
        logger: The base logger for agents' replay-aware loggers.
        run_id_factory: Makes run ids (``run-<16 hex>`` by default).
        hooks: Crash-injection points used by ``execute`` when it is given none (tests and
            ``durable-agents local --crash-at``); the default does nothing.
        providers: Model providers by name (``ModelConfig.provider``), for ``ctx.llm``.
        stream_sink: The stream cache streamed model text goes to (optional).
        wait_scheduler: Schedules precise deadlines of approvals and callbacks (optional; the
            reconciler's sweep expires them anyway).
    """

    def __init__(
        self,
        store: JournalStore,
        *,
        registry: AgentRegistry | None = None,
        publisher: EventPublisher | None = None,
        clock: Clock | None = None,
        logger: Any = None,
        run_id_factory: Callable[[], str] = new_run_id,
        credentials: CredentialProvider | None = None,
        hooks: InvocationHooks = NO_HOOKS,
        providers: dict[str, LlmProvider] | None = None,
        stream_sink: StreamSink | None = None,
        wait_scheduler: WaitScheduler | None = None,
    ):
        self.store = store
        self.registry = registry or default_registry
        self.publisher: EventPublisher = publisher or CollectingPublisher()
        self.clock: Clock = clock or SystemClock()
        self.logger = logger or logging.getLogger("durable_agents.agent")
        self._new_run_id = run_id_factory
        self.credentials = credentials
        self.hooks = hooks
        self.providers: dict[str, LlmProvider] = dict(providers or {})
        self.stream_sink = stream_sink
        self.wait_scheduler = wait_scheduler

    # -- starting ----------------------------------------------------------------------------

    def start_run(
        self,
        agent_name: str,
        input_value: Any,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        parent_run_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> tuple[RunHeader, bool]:
        """Starts a run of the latest version of ``agent_name`` and publishes ``Step Ready``.

        The run belongs to ``tenant`` for good; an idempotency key is only ever matched
        against the same tenant's runs.

        Returns:
            The run header and whether this call created it (False when the idempotency key
            matched an earlier start with the same input).

        Raises:
            AgentNotFoundError: If no such agent is registered.
            InputValidationError: If the input does not match the agent's input type.
            IdempotencyConflictError: If the key was used with a different input.
            PayloadError: If the input cannot be recorded (for example it holds a secret).
            ValueError: If ``tenant`` is not a valid tenant name.
        """
        check_tenant(tenant)
        definition = self.registry.latest(agent_name)
        value = self._validate_input(definition, input_value)
        input_json = encode(value, definition.input_type)
        now = self.clock.now_ms()
        header = RunHeader(
            run_id=check_run_id(run_id) if run_id else self._new_run_id(),
            agent=definition.name,
            versions=definition.versions.as_dict(),
            status=RunStatus.RUNNING,
            input=input_json,
            created_at_ms=now,
            updated_at_ms=now,
            parent_run_id=parent_run_id,
            idempotency_key=idempotency_key,
            input_hash=input_hash(definition.name, input_json),
            tenant=tenant,
        )
        stored, created = self.store.create_run(header)
        if stored.status is RunStatus.RUNNING:
            # Also for a repeated start: if the first caller crashed between creating the run
            # and publishing, this publish is what gets the run going. Duplicates are harmless.
            self.publisher.publish([step_ready(stored.run_id, "started")])
        return stored, created

    @staticmethod
    def _validate_input(definition: AgentDefinition[Any, Any], value: Any) -> Any:
        if definition.input_type is None:
            return value
        try:
            return TypeAdapter(definition.input_type).validate_python(value)
        except ValidationError as exc:
            errors = [
                {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()
            ]
            raise InputValidationError(definition.name, errors) from exc

    # -- executing ---------------------------------------------------------------------------

    def execute(
        self,
        run_id: str,
        *,
        budget: int | None = 1,
        remaining_ms: int | None = None,
        hooks: InvocationHooks | None = None,
        publish: bool = True,
        target: str | None = None,
    ) -> InvocationOutcome:
        """Replays the run and executes up to ``budget`` new operations (one by default).

        Args:
            run_id: The run to advance.
            budget: Operations to execute before yielding (None = until it suspends).
            remaining_ms: The Lambda's remaining time; bounds the claim lease. ``0`` means
                the invocation is about to end (a lease of only the safety margin), ``None``
                means unknown (the 15-minute Lambda maximum).
            hooks: Crash-injection points for tests (``self.hooks`` when None).
            publish: Whether to publish the follow-up events (the harness may route itself).
            target: Advance only this parallel branch (from a ``Step Ready`` event's
                ``target``); None advances the run wherever it stands.

        Returns:
            What the invocation did.

        Raises:
            RunNotFoundError: If there is no such run.
            EventPublishError: If the follow-up event could not be published (the invocation
                should fail so that it is retried; nothing recorded is lost).
        """
        snapshot = self.store.load(run_id)
        header = snapshot.header
        if header.status.terminal or header.status is RunStatus.PAUSED:
            if publish:
                # Delivered again to a settled run: the publish after its last commit may have
                # failed, or its process died before it. What that commit must tell others is
                # derived from the journal and sent again (consumers dedupe on event_id).
                self._republish(header)
            return InvocationOutcome(run_id, OutcomeKind.NOOP, detail=f"run is {header.status}")
        try:
            definition = self.registry.pinned(header.agent, header.versions["workflow_version"])
        except (AgentNotFoundError, VersionNotDeployedError) as exc:
            return self._pause(header, error_info(exc), [])

        lease_ms = DEFAULT_LEASE_MS if remaining_ms is None else max(remaining_ms, 0)
        inv = Invocation(
            self.store,
            snapshot,
            clock=self.clock,
            budget=budget,
            lease_ms=lease_ms + LEASE_MARGIN_MS,
            hooks=self.hooks if hooks is None else hooks,
            credentials=self.credentials,
            providers=self.providers,
            stream_sink=self.stream_sink,
            target=target,
            registry=self.registry,
            wait_scheduler=self.wait_scheduler,
        )
        ctx = DurableContext(
            inv,
            id_prefix=f"{run_id}:",
            pos_prefix="",
            logger=ReplayAwareLogger(inv, self.logger, run_id),
        )
        outcome = self._drive(definition, header, inv, ctx)
        if publish:
            self._publish_follow_up(outcome, header, inv.pending_events, inv.notifications)
        return outcome

    def _drive(
        self,
        definition: AgentDefinition[Any, Any],
        header: RunHeader,
        inv: Invocation,
        ctx: DurableContext,
    ) -> InvocationOutcome:
        run_id = header.run_id
        try:
            value = definition.fn(ctx, _decode_input(definition, header.input))
            ctx.check_scope_end()
            output = encode(value, definition.output_type)
        except SuspendExecution as signal:
            if inv.fault is not None:
                return self._pause(inv.header, error_info(inv.fault), inv.executed)
            return self._suspended(run_id, signal, inv)
        except Exception as exc:
            if inv.fault is not None:
                return self._pause(inv.header, error_info(inv.fault), inv.executed)
            return self._finish(inv, RunStatus.FAILED, error=error_info(exc))
        if inv.fault is not None:  # the agent caught the divergence error and carried on
            return self._pause(inv.header, error_info(inv.fault), inv.executed)
        return self._finish(inv, RunStatus.SUCCEEDED, result=output)

    def _suspended(
        self, run_id: str, signal: SuspendExecution, inv: Invocation
    ) -> InvocationOutcome:
        if signal.reason in (Reason.TIMER, Reason.EXTERNAL) and not self._mark_suspended(
            inv, signal
        ):
            # The header changed after this invocation read it: what the run waits for must be
            # decided again on a fresh read, by the next invocation.
            return InvocationOutcome(
                run_id, OutcomeKind.CONTINUE, list(inv.executed), detail="run changed; reload"
            )
        kind = {
            Reason.CONTINUE: OutcomeKind.CONTINUE,
            Reason.DISPATCH: OutcomeKind.CONTINUE,
            Reason.TIMER: OutcomeKind.SUSPENDED,
            Reason.EXTERNAL: OutcomeKind.SUSPENDED,
        }.get(signal.reason, OutcomeKind.CONTENDED)
        return InvocationOutcome(
            run_id,
            kind,
            list(inv.executed),
            wake_at_ms=signal.wake_at_ms,
            detail=str(signal),
            targets=signal.targets,
            external=signal.reason == Reason.EXTERNAL,
        )

    def _mark_suspended(self, inv: Invocation, signal: SuspendExecution) -> bool:
        """Makes the header say the run waits, when nothing in this invocation said so.

        Needed when the waiting happens inside parallel branches: a sibling's commit may have
        set the run RUNNING after a branch suspended it. A wait's own commit normally did it
        already (no extra write then).

        Returns:
            False if the header changed since this invocation read it (the write is fenced by
            that revision and was refused): the caller asks for a fresh look instead.
        """
        header = inv.header
        if header.status is RunStatus.SUSPENDED and header.wake_at_ms == signal.wake_at_ms:
            return True
        waiting = header.waiting_on if header.status is RunStatus.SUSPENDED else None
        change = RunChange(
            expected=_ACTIVE,
            status=RunStatus.SUSPENDED,
            updated_at_ms=self.clock.now_ms(),
            wake_at_ms=signal.wake_at_ms,
            waiting_on=waiting or {"kind": "branches", "detail": signal.detail[:200]},
            expected_revision=header.revision,
        )
        try:
            self.store.commit(inv.run_id, [], change)
        except RunRevisionConflictError:
            return False
        except RunStateConflictError:
            return True  # paused or finished meanwhile: that status stands
        inv.header = change.apply(header)
        if signal.wake_at_ms is not None:
            inv.schedule_run_wake(signal.wake_at_ms)
        return True

    def _finish(
        self,
        inv: Invocation,
        status: RunStatus,
        *,
        result: str | None = None,
        error: ErrorInfo | None = None,
    ) -> InvocationOutcome:
        change = RunChange(
            expected=_ACTIVE,
            status=status,
            updated_at_ms=self.clock.now_ms(),
            result=result,
            error=error,
            wake_at_ms=None,
            waiting_on=None,
        )
        try:
            self.store.commit(inv.run_id, [], change)
        except RunStateConflictError as exc:
            # A concurrent invocation finished the run first; it publishes Run Finished.
            return InvocationOutcome(
                inv.run_id, OutcomeKind.CONTENDED, list(inv.executed), detail=str(exc)
            )
        kind = OutcomeKind.SUCCEEDED if status is RunStatus.SUCCEEDED else OutcomeKind.FAILED
        detail = f"{error.type}: {error.message}" if error else ""
        return InvocationOutcome(inv.run_id, kind, list(inv.executed), detail=detail)

    def _pause(self, header: RunHeader, error: ErrorInfo, executed: list[str]) -> InvocationOutcome:
        change = RunChange(
            expected=_ACTIVE,
            status=RunStatus.PAUSED,
            updated_at_ms=self.clock.now_ms(),
            error=error,
            wake_at_ms=None,
            waiting_on={"kind": "person", "reason": error.type},
        )
        try:
            self.store.commit(header.run_id, [], change)
        except RunStateConflictError as exc:
            return InvocationOutcome(
                header.run_id, OutcomeKind.CONTENDED, executed, detail=str(exc)
            )
        return InvocationOutcome(
            header.run_id, OutcomeKind.PAUSED, executed, detail=f"{error.type}: {error.message}"
        )

    def _publish_follow_up(
        self,
        outcome: InvocationOutcome,
        header: RunHeader,
        pending: list[OutgoingEvent],
        notifications: list[tuple[OutgoingEvent, Entry]],
    ) -> None:
        events: list[OutgoingEvent] = list(pending)
        if outcome.kind is OutcomeKind.CONTINUE:
            if outcome.targets:  # parallel branches: one invocation each
                events += [step_ready(outcome.run_id, "branch", t) for t in outcome.targets]
            else:
                events.append(step_ready(outcome.run_id, "continue"))
        elif outcome.kind is OutcomeKind.SUSPENDED and outcome.wake_at_ms is not None:
            if outcome.wake_at_ms <= self.clock.now_ms():  # a zero delay: no need to wait
                events.append(step_ready(outcome.run_id, "timer"))
        elif outcome.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.FAILED):
            status = RunStatus(outcome.kind.value.upper())
            events += _finished_events(header.replace(status=status))
        events += [event for event, _ in notifications]
        if events:
            self.publisher.publish(events)
        if notifications:  # delivered: later replays need not tell anyone again
            with contextlib.suppress(EntryConflictError, RunStateConflictError):
                self.store.commit(header.run_id, [entry for _, entry in notifications])

    def _republish(self, header: RunHeader) -> None:
        events = _finished_events(header) if header.status.terminal else []
        waiting = header.waiting_on or {}
        if header.status is RunStatus.PAUSED and waiting.get("kind") == "review":
            from durable_agents.operations.tool import review_requested  # noqa: PLC0415
            from durable_agents.side_effects.review import locate  # noqa: PLC0415

            with contextlib.suppress(DurableError):
                effect = self.store.get_effect(*locate(str(waiting.get("op_id", ""))))
                if effect.status is EffectStatus.NEEDS_REVIEW:
                    events.append(review_requested(effect))
        if events:
            self.publisher.publish(events)

    # -- operator actions --------------------------------------------------------------------

    def redrive(self, run_id: str) -> RunHeader:
        """Resumes a PAUSED run (after a fix is deployed) or nudges a stalled active one.

        Returns:
            The run header after the change.

        Raises:
            RunNotFoundError: If there is no such run.
            RunStateConflictError: If the run has already finished.
        """
        header = self.store.get_run(run_id)
        if header.status.terminal:
            raise RunStateConflictError(run_id, ["RUNNING", "SUSPENDED", "PAUSED"], header.status)
        if header.status is RunStatus.PAUSED:
            change = RunChange(
                expected=frozenset({RunStatus.PAUSED}),
                status=RunStatus.RUNNING,
                updated_at_ms=self.clock.now_ms(),
                error=None,
                waiting_on=None,
            )
            self.store.commit(run_id, [], change)
            header = change.apply(header)
        self.publisher.publish([step_ready(run_id, "redrive")])
        return header


def _finished_events(header: RunHeader) -> list[OutgoingEvent]:
    """``Run Finished``, and for a sub-agent its parent's ``Step Ready``."""
    events = [
        OutgoingEvent(
            RUN_FINISHED,
            {
                "event_id": f"{header.run_id}:finished",
                "run_id": header.run_id,
                "agent": header.agent,
                "status": header.status.value,
                "parent_run_id": header.parent_run_id,
            },
        )
    ]
    if header.parent_run_id:  # a sub-agent finished: wake its parent
        events.append(step_ready(header.parent_run_id, "child-finished"))
    return events


def _decode_input(definition: AgentDefinition[Any, Any], input_json: str) -> Any:
    return decode(input_json, definition.input_type)
