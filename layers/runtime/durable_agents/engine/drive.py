"""Driving the agent's code through one invocation, and turning how it stopped into an outcome.

The runtime decides what runs (which definition, which invocation); this module runs it:
``drive`` calls the agent function, and ``returned`` / ``ended`` record how the agent ended (a
value, or what it raised). Sticky continuation drives the same function on an agent carrier
(``durable_agents.engine.sticky.driving``) and records its endings with the same two.
"""

from __future__ import annotations

from typing import Any

from durable_agents.agent import AgentDefinition
from durable_agents.core.clock import Clock
from durable_agents.core.models import RunHeader, RunStatus
from durable_agents.core.observability import ReplayAwareLogger
from durable_agents.core.serde import decode, encode, error_info
from durable_agents.engine import generations
from durable_agents.engine.context import DurableContext
from durable_agents.engine.flow.budget_pause import budget_paused
from durable_agents.engine.invocation import Invocation, Reason
from durable_agents.engine.outcomes import (
    InvocationOutcome,
    finish,
    pause,
    suspended,
)
from durable_agents.errors import SuspendExecution
from durable_agents.journal.store import JournalStore

# goes on up): the next generation, a suspension, an exception.
# How an agent function can stop, other than by returning (driven plainly or on a carrier).
AGENT_ENDINGS = (generations.ContinueAsNew, SuspendExecution, Exception)


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
    except AGENT_ENDINGS as ending:
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
    except AGENT_ENDINGS as ending:
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
        if ending.reason == Reason.BUDGET:  # its tree's budget is spent (ADR 0030)
            return budget_paused(store, clock, inv, ending)
        return suspended(store, clock, inv.run_id, ending, inv)
    return finish(store, clock, inv, RunStatus.FAILED, error=error_info(ending))
