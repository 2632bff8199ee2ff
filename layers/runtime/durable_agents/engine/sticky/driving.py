"""Driving an agent on its carrier: started there, parked there, and going on from where it parked.

``drive_sticky`` starts the agent function on a new carrier (the run replays on it, and its
agent may park); ``drive_parked`` runs it on its carrier's turn. How the agent ended is recorded
by ``durable_agents.engine.drive`` (``returned`` / ``ended``), as for an unparked run (ADR 0017).
"""

from __future__ import annotations

from typing import Any

from durable_agents.agent import AgentDefinition
from durable_agents.core.clock import Clock
from durable_agents.core.models import RunHeader, RunSnapshot
from durable_agents.core.serde import error_info
from durable_agents.engine.drive import AGENT_ENDINGS, decode_input, ended, returned, root_context
from durable_agents.engine.invocation import Invocation
from durable_agents.engine.outcomes import InvocationOutcome, parked_outcome, pause
from durable_agents.engine.sticky.carriers import PARKED
from durable_agents.engine.sticky.parking import ParkedRun, StickyRuns, WriteTally
from durable_agents.journal.store import JournalStore


def drive_sticky(
    store: JournalStore,
    clock: Clock,
    sticky: StickyRuns,
    logger: Any,
    definition: AgentDefinition[Any, Any],
    snapshot: RunSnapshot,
    fresh: Invocation,
    tally: WriteTally,
    stale: ParkedRun | None,
) -> InvocationOutcome:
    """``drive`` on a new agent carrier: the run replays on it, and its agent may park.

    ``stale`` is the run's parked agent that did not go on (``parked_turn.go_on`` said no):
    it is let go first.

    Raises:
        BaseException: Whatever ``drive`` raises.
    """
    sticky.discard(stale)
    ctx = root_context(fresh, logger)
    header = snapshot.header
    agent = sticky.new_agent(
        fresh.run_id, lambda: definition.fn(ctx, decode_input(definition, header.input))
    )
    parked = ParkedRun(agent, fresh, ctx, tally, definition, logger=logger)
    return drive_parked(store, clock, sticky, parked, header)


def drive_parked(
    store: JournalStore,
    clock: Clock,
    sticky: StickyRuns,
    parked: ParkedRun,
    header: RunHeader,
) -> InvocationOutcome:
    """``drive`` on ``parked``'s carrier: its agent starts, or goes on from where it parked.

    The agent stays parked if its budget ran out and nothing else is to be told. A parked
    agent's turn, one per step, runs here without ``drive``'s frame: the carrier's three ways
    to stop (parked, returned, raised) are told apart here, and the last two go to the same
    ``returned`` and ``ended`` as ``drive``'s.

    Raises:
        BaseException: Whatever ``drive`` raises.
    """
    inv, agent = parked.invocation, parked.thread
    inv.park = agent.park
    try:  # the same call as ``drive``'s, on the agent's own stack (or on from where it parked)
        value = agent.advance()
    except AGENT_ENDINGS as ending:  # it raised or suspended: it is not parked any more
        return ended(store, clock, inv, ending)
    if value is not PARKED:
        return returned(store, clock, parked.definition, inv, parked.context, value)
    # At its budget's end, before its next operation.
    if inv.fault is not None:  # a divergence the replay found: the run pauses
        sticky.discard(parked)
        return pause(store, clock, inv.header, error_info(inv.fault), inv.executed)
    outcome = parked_outcome(inv.run_id, inv, agent.parked_at)
    if inv.notifications:  # the next invocation derives them again: it replays
        sticky.discard(parked)
    else:  # its tally: the next invocation's freshness check
        sticky.keep(inv.run_id, parked)
    return outcome
