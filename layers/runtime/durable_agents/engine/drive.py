"""Driving the agent's code through one invocation, and turning how it stopped into an outcome.

``Runtime._execute_loaded`` (and ``parked_turn.go_on``, for a parked agent) decide what runs
(which definition, which invocation, sticky or not); this module runs it: ``drive`` calls the
agent function, ``drive_sticky`` starts it on a new agent carrier and ``drive_parked`` runs it
on its carrier (starting it, or going on from where it parked), parking it again when it may
stay (``durable_agents.engine.sticky.parking``, ADR 0017). Both record how the agent ended the same
way:
``returned`` for a value, ``ended`` for what it raised.
"""

from __future__ import annotations

from typing import Any

from durable_agents.agent import AgentDefinition
from durable_agents.core.clock import Clock
from durable_agents.core.models import RunHeader, RunSnapshot, RunStatus
from durable_agents.core.observability import ReplayAwareLogger
from durable_agents.core.serde import decode, encode, error_info
from durable_agents.engine import generations
from durable_agents.engine.context import DurableContext
from durable_agents.engine.invocation import Invocation
from durable_agents.engine.outcomes import (
    InvocationOutcome,
    finish,
    parked_outcome,
    pause,
    suspended,
)
from durable_agents.engine.sticky.carriers import PARKED
from durable_agents.engine.sticky.parking import ParkedRun, StickyRuns, WriteTally
from durable_agents.errors import SuspendExecution
from durable_agents.journal.store import JournalStore

# goes on up): the next generation, a suspension, an exception.
_ENDINGS = (generations.ContinueAsNew, SuspendExecution, Exception)


def decode_input(definition: AgentDefinition[Any, Any], input_json: str) -> Any:
    """The run's input as the agent's input type."""
    return decode(input_json, definition.input_type)


def root_context(inv: Invocation, logger: Any) -> DurableContext:
    """The top-level context of ``inv``'s run, in its current generation."""
    run_id, generation = inv.run_id, inv.header.generation
    return DurableContext(
        inv,
        id_prefix=generations.id_prefix(run_id, generation),
        pos_prefix=generations.pos_prefix(generation),
        logger=ReplayAwareLogger(inv, logger, run_id),
    )


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
    except _ENDINGS as ending:  # it raised or suspended: it is not parked any more
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


def drive(
    store: JournalStore,
    clock: Clock,
    definition: AgentDefinition[Any, Any],
    header: RunHeader,
    inv: Invocation,
    ctx: DurableContext,
) -> InvocationOutcome:
    """Runs the agent until it returns, raises or suspends, and records how it ended.

    A divergence the replay found (``inv.fault``) pauses the run whatever the code did next.

    Returns:
        The invocation's outcome, already recorded in the journal.
    """
    try:
        value = definition.fn(ctx, decode_input(definition, header.input))
    except _ENDINGS as ending:
        return ended(store, clock, inv, ending)
    return returned(store, clock, definition, inv, ctx, value)


def returned(
    store: JournalStore,
    clock: Clock,
    definition: AgentDefinition[Any, Any],
    inv: Invocation,
    ctx: DurableContext,
    value: Any,
) -> InvocationOutcome:
    """Records the run's end after the agent function returned ``value``.

    Returns:
        SUCCEEDED with the encoded value, or what ``ended`` makes of a scope left open or a
        value that does not encode; PAUSED if the replay found a divergence the agent caught.
    """
    try:
        ctx.check_scope_end()
        output = encode(value, definition.output_type)
    except _ENDINGS as ending:
        return ended(store, clock, inv, ending)
    if inv.fault is not None:  # the agent caught the divergence error and carried on
        return pause(store, clock, inv.header, error_info(inv.fault), inv.executed)
    return finish(store, clock, inv, RunStatus.SUCCEEDED, result=output)


def ended(
    store: JournalStore, clock: Clock, inv: Invocation, ending: BaseException
) -> InvocationOutcome:
    """Records what follows the agent's code stopping by ``ending`` (one of ``_ENDINGS``).

    Returns:
        The next generation's start (``continue_as_new``), PAUSED if the replay found a
        divergence, how the run waits (``SuspendExecution``), or FAILED (any other exception).
    """
    if isinstance(ending, generations.ContinueAsNew):  # the next generation (ADR 0016)
        if inv.stop is not None and inv.stop.observed:
            # A stop belongs to the run, not to a generation: an agent told of a cancel that
            # ends its generation (its cleanup done) ends the run, CANCELLED.
            return finish(store, clock, inv, RunStatus.CANCELLED)
        # Never with a fault: the operation raises a recorded divergence before this.
        return generations.switch_generation(store, clock, inv, ending)
    if inv.fault is not None:
        return pause(store, clock, inv.header, error_info(inv.fault), inv.executed)
    if isinstance(ending, SuspendExecution):
        return suspended(store, clock, inv.run_id, ending, inv)
    return finish(store, clock, inv, RunStatus.FAILED, error=error_info(ending))
