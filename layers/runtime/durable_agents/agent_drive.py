"""Driving the agent's code through one invocation, and turning how it stopped into an outcome.

``Runtime._execute_loaded`` (and ``parked_turn.go_on``, for a parked agent) decide what runs
(which definition, which invocation, sticky or not); this module runs it: ``drive`` calls the
agent (or advances a parked one) and records how it ended, ``drive_sticky`` starts it on a new
agent carrier and ``drive_parked`` runs it on its carrier, parking it again when it may stay
(``durable_agents.sticky``, ADR 0017).
"""

from __future__ import annotations

from typing import Any

from durable_agents import generations
from durable_agents.agent import AgentDefinition
from durable_agents.agent_carriers import PARKED
from durable_agents.clock import Clock
from durable_agents.context import DurableContext
from durable_agents.errors import SuspendExecution
from durable_agents.invocation import Invocation
from durable_agents.journal.store import JournalStore
from durable_agents.models import RunHeader, RunSnapshot, RunStatus
from durable_agents.observability import ReplayAwareLogger
from durable_agents.outcomes import (
    InvocationOutcome,
    OutcomeKind,
    finish,
    parked_outcome,
    pause,
    suspended,
)
from durable_agents.serde import decode, encode, error_info
from durable_agents.sticky import AgentCarrier, ParkedRun, StickyRuns, WriteTally

# Read on every sticky invocation: a module name, not ``OutcomeKind.CONTINUE`` (on Python 3.11
# each read of an enum class's attribute goes through ``EnumType``'s ``__getattr__`` hook).
_CONTINUE = OutcomeKind.CONTINUE


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
    parked = ParkedRun(agent, fresh, ctx, tally, definition)
    return drive_parked(store, clock, sticky, parked, header)


def drive_parked(
    store: JournalStore,
    clock: Clock,
    sticky: StickyRuns,
    parked: ParkedRun,
    header: RunHeader,
) -> InvocationOutcome:
    """``drive`` on ``parked``'s carrier: its agent starts, or goes on from where it parked.

    The agent stays parked if its budget ran out and nothing else is to be told.

    Raises:
        BaseException: Whatever ``drive`` raises.
    """
    inv, agent = parked.invocation, parked.thread
    inv.park = agent.park
    kept = False
    try:
        outcome = drive(store, clock, parked.definition, header, inv, parked.context, agent)
        if agent.parked and outcome.kind is _CONTINUE and not inv.notifications:
            sticky.keep(inv.run_id, parked)  # its tally: the next invocation's freshness check
            kept = True
    finally:
        if agent.parked and not kept:
            sticky.discard(parked)
    return outcome


def drive(
    store: JournalStore,
    clock: Clock,
    definition: AgentDefinition[Any, Any],
    header: RunHeader,
    inv: Invocation,
    ctx: DurableContext,
    agent: AgentCarrier | None = None,
) -> InvocationOutcome:
    """Runs the agent until it returns, raises or suspends, and records how it ended.

    A divergence the replay found (``inv.fault``) pauses the run whatever the code did next.

    Returns:
        The invocation's outcome, already recorded in the journal.
    """
    run_id = header.run_id
    try:
        if agent is None:
            value = definition.fn(ctx, decode_input(definition, header.input))
        else:  # the same call, on the agent's own stack (or on from where it parked)
            value = agent.advance()
            if value is PARKED:  # at its budget's end, before its next operation
                if inv.fault is not None:
                    return pause(store, clock, inv.header, error_info(inv.fault), inv.executed)
                return parked_outcome(run_id, inv, agent.parked_at)
        ctx.check_scope_end()
        output = encode(value, definition.output_type)
    except generations.ContinueAsNew as ending:  # the next generation (ADR 0016)
        # Never with a fault: the operation raises a recorded divergence before this.
        return generations.switch_generation(store, clock, inv, ending)
    except SuspendExecution as signal:
        if inv.fault is not None:
            return pause(store, clock, inv.header, error_info(inv.fault), inv.executed)
        return suspended(store, clock, run_id, signal, inv)
    except Exception as exc:
        if inv.fault is not None:
            return pause(store, clock, inv.header, error_info(inv.fault), inv.executed)
        return finish(store, clock, inv, RunStatus.FAILED, error=error_info(exc))
    if inv.fault is not None:  # the agent caught the divergence error and carried on
        return pause(store, clock, inv.header, error_info(inv.fault), inv.executed)
    return finish(store, clock, inv, RunStatus.SUCCEEDED, result=output)
