"""The runtime: start runs and execute one invocation of a run (what the StepRunner does).

How an invocation ends (the outcome and the run-header change recording it) is in
``durable_agents.engine.outcomes``; its types are importable from here as well.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from durable_agents.agent import AgentDefinition, AgentRegistry, default_registry
from durable_agents.core.clock import Clock, SystemClock
from durable_agents.core.credentials import CredentialProvider
from durable_agents.core.ids import check_run_id
from durable_agents.core.log_context import (
    close_log_context,
    current_agent,
    note_run,
    open_log_context,
)
from durable_agents.core.models import (
    Entry,
    RunHeader,
    RunSnapshot,
    RunStatus,
)
from durable_agents.core.serde import decode
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.engine import reruns
from durable_agents.engine.cancellation import prepare, settle_leftovers, stop_run
from durable_agents.engine.drive import drive, root_context
from durable_agents.engine.events import (
    CollectingPublisher,
    EventPublisher,
    OutgoingEvent,
    step_ready,
)
from durable_agents.engine.flow import admission as flow_admission
from durable_agents.engine.flow.budgets import Budgets
from durable_agents.engine.follow_ups import publish_follow_up, redrive
from durable_agents.engine.invocation import NO_HOOKS, Invocation, InvocationHooks
from durable_agents.engine.memory_store import MemoryStore
from durable_agents.engine.outcomes import (
    InvocationOutcome,
    OutcomeKind,
    version_unavailable,
)
from durable_agents.engine.pinning import resolve_pinned, resume_available
from durable_agents.engine.plugin_calls import InvocationSpan, PluginSet, QuietSpan
from durable_agents.engine.run_events import republish
from durable_agents.engine.run_starts import InputValidationError, new_header, new_run_id
from durable_agents.engine.runtime_parts import RuntimeParts
from durable_agents.engine.sticky.driving import drive_sticky
from durable_agents.engine.sticky.parked_turn import AGENT_BUDGET, Limits, go_on
from durable_agents.engine.sticky.parking import ParkedRun, StickyRuns, WriteTally
from durable_agents.engine.wait_scheduler import WaitScheduler
from durable_agents.errors import (
    AgentNotFoundError,
    IdempotencyConflictError,
    VersionUnavailableError,
)
from durable_agents.flow_control import Budget
from durable_agents.journal.store import JournalStore
from durable_agents.llm.types import LlmProvider, StreamSink
from durable_agents.plugins import Plugin, RunStartInfo

# importing them from here.
__all__ = [
    "DEFAULT_LEASE_MS",
    "LEASE_MARGIN_MS",
    "InputValidationError",
    "InvocationOutcome",
    "OutcomeKind",
    "Runtime",
    "new_run_id",
]

LEASE_MARGIN_MS = 5_000
DEFAULT_LEASE_MS = 15 * 60 * 1000 + LEASE_MARGIN_MS  # the Lambda maximum, plus clock skew


_QUEUED = RunStatus.QUEUED


def _claim_lease_ms(remaining_ms: int | None) -> int:
    """The lease of an invocation's claims: the Lambda's remaining time, plus the margin."""
    return (DEFAULT_LEASE_MS if remaining_ms is None else max(remaining_ms, 0)) + LEASE_MARGIN_MS


class Runtime(RuntimeParts):
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
        memory: The long-term memory store behind ``ctx.memory`` (optional).
        plugins: Instrumentation hooks (``durable_agents.plugins``), called in order; one that
            raises is logged and never changes a run.
        sticky: Where agents park between invocations (``durable_agents.engine.sticky.parking``):
            the next
            invocation of a run in this process then goes on without replaying. None (the
            default) replays every invocation.

    Attributes:
        invocation_services: The parts above every invocation holds (clock, credentials,
            providers, stream sink, registry, wait scheduler, memory), by attribute name: made
            again whenever one of them is set (``durable_agents.engine.runtime_parts``).
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
        memory: MemoryStore | None = None,
        plugins: Sequence[Plugin] = (),
        sticky: StickyRuns | None = None,
    ):
        self.store = store
        # Parked agents (sticky continuation, ADR 0016); None replays every invocation.
        self.sticky = sticky
        self.plugins = PluginSet(plugins)
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
        self.memory = memory
        self.keep_parts()  # what every invocation holds of the above, as one dict

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
        execution_timeout: float | None = None,
        priority: int | None = None,
        budget: Budget | None = None,
    ) -> tuple[RunHeader, bool]:
        """Starts a run of the latest version of ``agent_name`` and publishes ``Step Ready``.

        The run belongs to ``tenant`` for good; an idempotency key is only ever matched
        against the same tenant's runs. ``execution_timeout`` (seconds) replaces the agent's
        own time limit for this run. ``priority`` (1 highest … 5 lowest, 3 by default) orders
        it in its agent's queue and at rate limits; ``budget`` replaces its agent's budget of
        tokens and money for it and its sub-agents (ADR 0030).

        Returns:
            The run header and whether this call created it (False when the idempotency key
            matched an earlier start with the same input).

        Raises:
            AgentNotFoundError: If no such agent is registered.
            InputValidationError: If the input does not match the agent's input type.
            IdempotencyConflictError: If the key was used with a different input.
            PayloadError: If the input cannot be recorded (for example it holds a secret).
            InvalidNameError: If ``idempotency_key`` is empty, longer than 256 characters or
                not printable (``core.ids.check_idempotency_key``), on every journal alike.
            ValueError: If ``tenant`` is not a valid tenant name, or the timeout not positive.
        """
        header = new_header(
            self.registry,
            self.clock,
            agent_name,
            input_value,
            run_id=check_run_id(run_id) if run_id else self._new_run_id(),
            parent_run_id=parent_run_id,
            idempotency_key=idempotency_key,
            tenant=tenant,
            execution_timeout=execution_timeout,
            priority=priority,
            budget=budget,
        )
        stored, created = self.store.create_run(header)
        tree_budget = (stored.flow or {}).get("budget")
        if tree_budget:  # before its code can spend any of it (made again if this dies here)
            Budgets(self.store.flow_items()).ensure(stored.run_id, tree_budget)
        if created and self.plugins:  # the conditional create decided it: once per run
            start = RunStartInfo(stored.run_id, stored.agent, stored.tenant, parent_run_id)
            self.plugins.emit("on_run_start", start)
        if stored.status is RunStatus.QUEUED:  # its agent's runs wait for a slot (ADR 0030)
            definition = resolve_pinned(self.registry, stored)
            if definition.concurrency is not None:
                flow_admission.enqueue_started(
                    self.store, self.clock, self.publisher, definition, stored
                )
        if stored.status is RunStatus.RUNNING:
            # Also for a repeated start: if the first caller crashed between creating the run
            # and publishing, this publish is what gets the run going. Duplicates are harmless.
            self.publisher.publish([step_ready(stored.run_id, "started")])
        return stored, created

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
        agent_budget: bool = False,
    ) -> InvocationOutcome:
        """Replays the run and executes up to ``budget`` new operations (one by default).

        Args:
            run_id: The run to advance.
            budget: Operations to execute before yielding (None = until it suspends).
            agent_budget: Use the agent's own ``invocation_budget`` instead of ``budget``
                (what the StepRunner does).
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
        # The invocation's start: its time budget, a parked run's stop checks and the Lambda's
        # own deadline (without the lease's clock-skew margin, a step's to use) count from it.
        started_ms = self.clock.now_ms()
        known = DEFAULT_LEASE_MS - LEASE_MARGIN_MS if remaining_ms is None else remaining_ms
        deadline_ms = started_ms + max(known, 0)
        limits = AGENT_BUDGET if agent_budget else (budget, None)
        # Every line written meanwhile names the run, its agent and its operation (reset after).
        log_context = open_log_context(run_id)
        try:
            if not self.plugins.plugins:  # nobody listens: no span to open, report or close
                span: InvocationSpan = QuietSpan(deadline_ms)
                outcome = self._execute(
                    span, run_id, limits, started_ms, remaining_ms, hooks, publish, target
                )
            else:
                with self.plugins.invocation(run_id, target, self.clock, deadline_ms) as span:
                    outcome = self._execute(
                        span, run_id, limits, started_ms, remaining_ms, hooks, publish, target
                    )
                    span.outcome = outcome
            # The caller's line about the invocation names the agent (the StepRunner's result,
            # local mode's terminal): known here, from the header this invocation read.
            agent = current_agent()
            return replace(outcome, agent=agent) if agent and not outcome.agent else outcome
        finally:
            close_log_context(log_context)

    def _execute(
        self,
        span: InvocationSpan,
        run_id: str,
        budget: Limits,
        started_ms: int,
        remaining_ms: int | None,
        hooks: InvocationHooks | None,
        publish: bool,
        target: str | None,
    ) -> InvocationOutcome:
        """``execute``, within its plugins' span (``started_ms``: when the invocation began)."""
        snapshot = self.store.load(run_id)
        # Plugins hear the invocation's start now, with what this read showed (whether the run
        # had recorded anything: ``is_first_invocation``), not what a warm container remembers.
        span.read(snapshot)
        if snapshot.header.rerun is not None:
            # A rerun whose copy a crash cut short is completed before anything replays.
            snapshot = reruns.complete_copy(self.store, self.clock, snapshot)
        # Taken at once, so that every way out of this invocation leaves no parked agent of
        # the run behind but the one it parks itself (``parked_turn.go_on`` or
        # ``agent_drive.drive_sticky`` consumes it).
        parked = [] if self.sticky is None else [self.sticky.take(run_id)]
        try:
            if parked and target is None:  # a parked agent goes on if nothing is to decide
                invocation_hooks = self.hooks if hooks is None else hooks
                outcome = go_on(
                    self, span, snapshot, parked, budget, started_ms,
                    _claim_lease_ms(remaining_ms), invocation_hooks, publish,
                )  # fmt: skip
                if outcome is not None:
                    return outcome
            outcome = self._execute_loaded(
                span, snapshot, parked, budget, remaining_ms, hooks, publish, target
            )
            if target is None:  # left RUNNING (suspended, paused, ended): its slot goes on
                self._release(snapshot.header, outcome)
            return outcome
        finally:
            if self.sticky is not None:
                for unused in parked:
                    self.sticky.discard(unused)

    def _execute_loaded(
        self,
        span: InvocationSpan,
        snapshot: RunSnapshot,
        parked: list[ParkedRun | None],
        limits: Limits,
        remaining_ms: int | None,
        hooks: InvocationHooks | None,
        publish: bool,
        target: str | None,
    ) -> InvocationOutcome:
        run_id = snapshot.header.run_id
        note_run(agent=snapshot.header.agent, tenant=snapshot.header.tenant)
        span.agent = snapshot.header.agent
        snapshot, stop, end = prepare(self.store, self.clock, self.publisher, snapshot)
        if end is not None:  # terminated, or past its time limit: no agent code runs
            outcome = stop_run(self.store, self.clock, self.publisher, snapshot, end)
            if publish:
                self._publish_follow_up(outcome, snapshot.header, [], [])
            return outcome
        header = snapshot.header
        if header.status.terminal or header.status is RunStatus.PAUSED:
            if publish:
                # Delivered again to a settled run: the publish after its last commit may have
                # failed, or its process died before it. What that commit must tell others is
                # derived from the journal and sent again (consumers dedupe on event_id).
                republish(self.store, self.publisher, header)
                settle_leftovers(self.store, self.clock, self.publisher, snapshot)
            return InvocationOutcome(run_id, OutcomeKind.NOOP, detail=f"run is {header.status}")
        # A parked agent that could go on did (``parked_turn.go_on``): here the run replays.
        try:
            definition = resolve_pinned(self.registry, header)
        except VersionUnavailableError as exc:
            outcome = version_unavailable(self.store, self.clock, header, exc)
            if publish and outcome.kind is OutcomeKind.CONTINUE:
                self.publisher.publish([step_ready(run_id, "continue")])
            return outcome
        if header.status is RunStatus.VERSION_UNAVAILABLE:
            # Its version is deployed (again): back to RUNNING, fenced by what was read, then
            # on with this same invocation.
            resumed = resume_available(self.store, self.clock, header)
            if resumed is None:
                return InvocationOutcome(run_id, OutcomeKind.NOOP, detail="run changed meanwhile")
            snapshot = RunSnapshot(resumed, snapshot.entries, snapshot.effects)
        if target is None and (definition.concurrency is not None or header.status is _QUEUED):
            # Its agent's concurrency limit (ADR 0030): a slot, or its turn in the queue.
            waiting = self._admit(definition, snapshot.header)
            if isinstance(waiting, InvocationOutcome):
                return waiting
            snapshot = RunSnapshot(waiting, snapshot.entries, snapshot.effects)
        elif snapshot.header.status is _QUEUED:  # a branch of a queued run: its turn comes
            return InvocationOutcome(run_id, OutcomeKind.NOOP, detail="run is QUEUED")

        if limits is AGENT_BUDGET:
            budget, budget_ends_at_ms = definition.invocation_budget.limits(self.clock.now_ms())
        else:
            budget, budget_ends_at_ms = limits
        # Sticky only for a whole-run invocation with a budget (one for a branch or without
        # a budget never parks) and no cancel under way.
        limited = budget is not None or budget_ends_at_ms is not None
        sticky = self.sticky is not None and target is None and limited
        sticky = sticky and stop is None and header.status is RunStatus.RUNNING
        # A run that holds a concurrency slot does not park: its next invocation renews the
        # slot's lease, and the one it leaves RUNNING by frees it (flow.admission).
        sticky = sticky and definition.concurrency is None
        tally = WriteTally(self.store, snapshot) if sticky else None
        inv = Invocation(
            tally or self.store,
            snapshot,
            budget=budget,
            lease_ms=_claim_lease_ms(remaining_ms),
            hooks=self.hooks if hooks is None else hooks,
            target=target,
            observer=span.observer(),
            deadline_ms=span.deadline_ms,
            **self.invocation_services,
        )
        inv.stop = stop
        inv.budget_ends_at_ms = budget_ends_at_ms
        if tally is not None:
            assert self.sticky is not None  # a tally is only kept for sticky continuation
            outcome = drive_sticky(
                self.store, self.clock, self.sticky, self.logger,
                definition, snapshot, inv, tally, parked.pop(),
            )  # fmt: skip
        else:
            ctx = root_context(inv, self.logger)
            outcome = drive(self.store, self.clock, definition, header, inv, ctx)
        if outcome.kind is OutcomeKind.CANCELLED:  # what cleanup left open is closed too
            settle_leftovers(self.store, self.clock, self.publisher, self.store.load(run_id))
        if publish:
            self._publish_follow_up(outcome, header, inv.pending_events, inv.notifications)
        return outcome

    def _release(self, header: RunHeader, outcome: InvocationOutcome) -> None:
        """Frees the run's concurrency slot if the invocation left it not running (ADR 0030)."""
        try:
            version = header.versions.get("workflow_version", "")
            definition = self.registry.pinned(header.agent, version)
        except (AgentNotFoundError, VersionUnavailableError):
            return  # its code is not deployed here: it ran nothing, and holds what it held
        if definition.concurrency is not None:
            flow_admission.release(
                self.store, self.clock, self.publisher, definition, header.run_id, outcome
            )

    def _admit(
        self, definition: AgentDefinition[Any, Any], header: RunHeader
    ) -> InvocationOutcome | RunHeader:
        """How the run waits for a slot, or its header to go on with (ADR 0030)."""
        if definition.concurrency is None:  # queued under a limit this version no longer has
            return flow_admission.unqueue(self.store, self.clock, header)
        # A cancel not yet told to the agent: a queued run goes to the front of the line.
        request = header.cancel_requested
        stopping = (
            request is not None and request.get("mode") == "cancel" and not request.get("told")
        )
        waiting = flow_admission.admit(
            self.store, self.clock, self.publisher, definition, header, stopping=stopping
        )
        return header if waiting is None else waiting

    def _publish_follow_up(
        self,
        outcome: InvocationOutcome,
        header: RunHeader,
        pending: list[OutgoingEvent],
        notifications: list[tuple[OutgoingEvent, Entry]],
    ) -> None:
        publish_follow_up(
            self.store, self.clock, self.publisher, outcome, header, pending, notifications
        )

    # -- operator actions --------------------------------------------------------------------

    def redrive(self, run_id: str) -> RunHeader:
        """Resumes a PAUSED run (after a fix is deployed) or nudges a stalled active one.

        Returns:
            The run header after the change.

        Raises:
            RunNotFoundError: If there is no such run.
            RunStateConflictError: If the run has already finished.
        """
        return redrive(self.store, self.clock, self.publisher, run_id)

    def rerun(
        self,
        run_id: str,
        from_: str = reruns.FAILED,
        *,
        version: str | None = None,
        input_value: Any = reruns.SAME_INPUT,
        repeat_effects: bool = False,
        idempotency_key: str | None = None,
        dry_run: bool = False,
        bulk: str | None = None,
    ) -> tuple[reruns.RerunPlan, RunHeader | None, bool]:
        """Re-runs a finished run from one of its operations (``durable_agents.engine.reruns``).

        The rerun belongs to the original's tenant and agent; it runs ``version`` (the deployed
        one by default) on the original's input or ``input_value``. The same request twice
        makes one rerun (its idempotency key is derived from the request unless given).

        Args:
            run_id: The finished run to re-run.
            from_: ``start``, ``failed`` or an operation as its timeline shows it.
            version: The agent version to run (None: the latest deployed).
            input_value: The replacement input (``SAME_INPUT``: the original's).
            repeat_effects: Run every side effect again instead of reusing the chain's.
            idempotency_key: The rerun's key (None: derived from this request).
            dry_run: Only plan: nothing is written, no run created.
            bulk: The mark of the bulk request making this rerun (kept on the rerun: bulk
                requests never re-run it in turn). Not part of the derived key: the same
                run and options name the same rerun whoever asks.

        Returns:
            The plan, the rerun's header (None for a dry run) and whether this call created it.

        Raises:
            RunNotFoundError: If there is no such run.
            RerunRefusedError: If it cannot be re-run now (see ``reruns``).
            UnknownOperationError: If ``from_`` names no operation of the run.
            VersionNotDeployedError: If ``version`` is not deployed.
            AgentNotFoundError: If the run's agent is no longer deployed.
            InputValidationError: If the input does not match the version's input type.
            IdempotencyConflictError: If the key was used for another rerun.
        """
        plan = reruns.plan(self.store, run_id, from_, repeat_effects=repeat_effects)
        original = plan.original
        same_input = input_value is reruns.SAME_INPUT
        value = decode(original.input) if same_input else input_value
        key = idempotency_key or reruns.rerun_key(
            run_id,
            {
                "from": from_,
                "version": version,
                "input": None if same_input else value,
                "same_input": same_input,
                "repeat_effects": repeat_effects,
            },
        )
        header = new_header(
            self.registry,
            self.clock,
            original.agent,
            value,
            run_id=self._new_run_id(),
            parent_run_id=None,
            idempotency_key=key,
            tenant=original.tenant,
            execution_timeout=None,
            version=version,
        )
        if dry_run:
            return plan, None, False
        header = reruns.rerun_header(plan, header, repeat_effects=repeat_effects, bulk=bulk)
        stored, created = self.store.create_run(header)
        if stored.rerun is None or stored.rerun.get("of") != run_id:
            raise IdempotencyConflictError(key, stored.run_id)
        # The copy, then the first Step Ready: also for a repeated request, whose first
        # attempt may have died between creating the run and either.
        if created or not reruns.copy_complete(self.store.load(stored.run_id)):
            reruns.copy_entries(self.store, stored, plan.copied)
        events = [reruns.started_event(stored)]
        if stored.status is RunStatus.RUNNING:
            events.append(step_ready(stored.run_id, "rerun"))
        self.publisher.publish(events)
        if stored.status is RunStatus.QUEUED:  # a rerun waits for a slot too (ADR 0030)
            definition = resolve_pinned(self.registry, stored)
            if definition.concurrency is not None:
                flow_admission.enqueue_started(
                    self.store, self.clock, self.publisher, definition, stored
                )
        return plan, stored, created
