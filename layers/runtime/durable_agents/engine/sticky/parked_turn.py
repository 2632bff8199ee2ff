"""A parked agent's turn: the invocation that goes on with the agent this process parked.

``Runtime._execute`` asks this module first for every whole-run invocation of a sticky
runtime (ADR 0017). It applies when the journal shows exactly what this process left
(``ParkedRun.matches``). The header is then the one this process's last write of the run left:
every header change adds one to its revision. So what the general path
(``Runtime._execute_loaded``) would decide from it is decided already: the pins resolve to the
code the agent runs, and the parked run was kept only for a RUNNING run nobody had asked to
stop. This path checks again only what the header shows cheaply (RUNNING, no stop request)
and what time changes (the run's time limit, the agent's time budget). When anything else
holds, ``go_on`` returns None, and the general path replays the run as before. That happens
for a changed journal (or another run with the same id, or another generation), a stop
request, a passed time limit, a budget without limits, or an agent parked by another thread.

The agent goes on with what a new invocation would hold: the runtime's parts as they are now
(``Invocation.renew``; the operations read them from the invocation after their budget, where
the agent parks) and the runtime's journal store under its tally. What the agent's stack took
when it started cannot be renewed in place, so a change of it replays: the registry (its
code), the logger (its contexts' loggers), and plugins given to a runtime that had none (no
observer took up the operation it parked in).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from durable_agents.core.log_context import note_run
from durable_agents.core.models import RunSnapshot, RunStatus
from durable_agents.engine.cancellation import nothing_to_stop, settle_leftovers
from durable_agents.engine.follow_ups import publish_follow_up
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.outcomes import InvocationOutcome, OutcomeKind
from durable_agents.engine.plugin_calls import InvocationSpan
from durable_agents.engine.sticky.driving import drive_parked
from durable_agents.engine.sticky.parking import ParkedRun

if TYPE_CHECKING:
    import logging

    from durable_agents.core.clock import Clock
    from durable_agents.engine.events import EventPublisher
    from durable_agents.engine.ports import InvocationServices
    from durable_agents.engine.sticky.parking import StickyRuns
    from durable_agents.journal.store import JournalStore


class TurnHost(Protocol):
    """What a parked turn needs of the runtime that goes on with it (``Runtime`` is one)."""

    store: JournalStore
    clock: Clock
    publisher: EventPublisher
    logger: logging.Logger
    sticky: StickyRuns | None
    invocation_services: InvocationServices


__all__ = ["AGENT_BUDGET", "Limits", "go_on"]

Limits = tuple[int | None, int | None]
"""An invocation's operation count and the time after which no operation starts."""
AGENT_BUDGET: Limits = (-1, -1)
"""The limits that say: the agent's own ``invocation_budget`` decides both."""


def go_on(
    runtime: TurnHost,
    span: InvocationSpan,
    snapshot: RunSnapshot,
    parked: list[ParkedRun | None],
    limits: Limits,
    started_ms: int,
    lease_ms: int,
    hooks: InvocationHooks,
    publish: bool,
) -> InvocationOutcome | None:
    """Continues the run's parked agent for this invocation, if nothing else must be decided.

    Args:
        runtime: The runtime that parked the agent.
        span: The invocation's plugin span.
        snapshot: The run as this invocation read it.
        parked: The run's parked agent (taken by the caller), which this consumes if it goes on.
        limits: The invocation's limits, or ``AGENT_BUDGET``.
        started_ms: When the invocation began (its stop checks and time budget count from it).
        lease_ms: The claim lease of the invocation's operations (its margin included).
        hooks: The invocation's crash hooks.
        publish: Whether to publish the follow-up events.

    Returns:
        What the invocation did, or None if the general path must decide (nothing was done).

    Raises:
        BaseException: Whatever the agent's operation or the follow-up publish raises.
    """
    header = snapshot.header
    going_on = parked[0]
    if going_on is None or going_on.definition is None or header.status is not RunStatus.RUNNING:
        return None
    # The tally's own check (``ParkedRun.matches``), called directly: this runs per step.
    if not going_on.tally.matches(snapshot) or not going_on.thread.resumable():
        return None
    if not nothing_to_stop(header, started_ms):  # the general path stops it or tells the agent
        return None
    # What a new invocation would be given, the parked agent is given (``renew``); what its
    # stack took when it started, only a replay can give it anew.
    inv, services = going_on.invocation, runtime.invocation_services
    handed = None if services is going_on.services else services  # None: no part was set
    if handed is not None and handed["registry"] is not inv.registry:
        return None  # its code is the registry's: a replay runs the new registry's
    if going_on.logger is not runtime.logger:
        return None  # its contexts' loggers were made with the old one
    observer, previous = span.observer(), inv.observer
    if observer is not None and previous is None:
        # Plugins given meanwhile: none took up the operation it parked in (a replay does).
        return None
    definition = going_on.definition
    if limits is AGENT_BUDGET:
        limits = definition.invocation_budget.limits(started_ms)
    budget, budget_ends_at_ms = limits
    if budget is None and budget_ends_at_ms is None:  # without a budget nothing parks
        return None
    note_run(agent=header.agent, tenant=header.tenant)
    span.agent = header.agent
    if observer is not None and previous is not None:  # plugins hear it as after a replay
        observer.take_up_parked(previous)
    going_on.services = services
    # Its store is its tally still: matched, it counts on from this read, passing the writes
    # on to the runtime's store as it is now (another client of the journal, say).
    sticky, store, clock, tally = runtime.sticky, runtime.store, runtime.clock, going_on.tally
    if tally.inner is not store:
        tally.inner = store
    inv.renew(tally, header, budget, lease_ms, hooks, observer, span.deadline_ms, handed)
    inv.budget_ends_at_ms = budget_ends_at_ms
    assert sticky is not None  # only a sticky runtime parks agents
    # Consumed only now: until here, the caller lets it go on any way out (its store refused).
    parked.pop()
    sticky.resumed += 1
    outcome = drive_parked(store, clock, sticky, going_on, header)  # parks it again, or lets go
    if outcome.kind is OutcomeKind.CANCELLED:  # what cleanup left open is closed too
        settle_leftovers(store, clock, runtime.publisher, store.load(header.run_id))
    if publish:
        publish_follow_up(
            store, clock, runtime.publisher, outcome, header, inv.pending_events, inv.notifications
        )
    return outcome
