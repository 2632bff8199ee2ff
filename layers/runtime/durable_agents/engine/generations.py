"""Continue-as-new: a run that loops without end, kept in bounded generations (ADR 0016).

Faithful replay reads and replays a run's whole journal on every invocation, so an agent that
loops forever (a chat agent) would grow its journal, its replay time and its Query pages
without bound. ``ctx.continue_as_new(input)`` ends the current *generation* of the run and
starts the next one with ``input``: same run id (every route, approval, event and the CLI keep
addressing it), a fresh journal.

Layout. Generation 0 is today's layout, unchanged (positions ``00000001``, op ids
``<run_id>:<name>:<n>``): existing journals and the golden ones replay as they did. Generation
``g >= 1`` prefixes the positions of its root scope with ``G<g:06d>:`` and its op ids with
``<run_id>:g<g>/``. Every key derived from a position or an op id (journal entries
``J#<position>|…``, side-effect records ``S#<position>``, approval and callback ids, tool
idempotency keys) is therefore distinct per generation, and ``load`` reads only the keys of
the header's ``generation`` (a key prefix).

The switch is ONE conditional write: a transaction of the old generation's closing entry (at
the ``continue_as_new`` position: what the old generation ended with), the new generation's
opening entry (position ``G<g:06d>:00000000``: its input, where it came from, and the event
cursors it inherits) and the header update (new ``input``, ``generation`` + 1), fenced by the
header revision this invocation read. A duplicate or stale invocation loses on that revision,
on the closing entry's key or on the opening entry's key (each is enough): the run can never
fork, and the new input is recorded once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from durable_agents.core.clock import Clock
from durable_agents.core.models import (
    ACTIVE_STATUSES,
    EffectStatus,
    EntryType,
    OpKind,
    RunChange,
    RunSnapshot,
    RunStatus,
)
from durable_agents.core.serde import encode
from durable_agents.engine.invocation import Invocation, Reason
from durable_agents.engine.operations.event_wait import PublishedStatus, event_floors, latest_status
from durable_agents.engine.outcomes import InvocationOutcome, OutcomeKind, suspended
from durable_agents.engine.pinning import resolve_pinned
from durable_agents.engine.run_starts import validate_input
from durable_agents.errors import (
    DurableError,
    EntryConflictError,
    RunRevisionConflictError,
    RunStateConflictError,
    SuspendExecution,
)
from durable_agents.journal.generation_keys import generation_of, id_prefix, pos_prefix, split_op_id
from durable_agents.journal.store import JournalStore

__all__ = [
    "ContinueAsNew",
    "ContinueAsNewNotAllowedError",
    "generation_of",
    "id_prefix",
    "pos_prefix",
    "run_continue_as_new",
    "split_op_id",
    "switch_generation",
]

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope

OPERATION_NAME = "continue_as_new"
OPENING_NAME = "generation"
_ACTIVE = ACTIVE_STATUSES  # BUDGET_EXCEEDED too: its code runs again (ADR 0030)
# How long a switch waits for a PREPARED tool call to be resolved before it looks again.
PREPARED_RETRY_MS = 5_000


def opening_position(generation: int) -> str:
    """Where a generation's opening record is (counter 0: never an operation's position)."""
    return f"{pos_prefix(generation)}{0:08d}"


class ContinueAsNewNotAllowedError(DurableError):
    """``ctx.continue_as_new`` was called where a generation cannot end.

    Only the run's own (top-level) context can end a generation: not a step, a child
    context or a parallel branch, whose callers would never see them return.

    Attributes:
        where: Where it was called (``a step``, ``a child context``, ``a parallel branch``).
    """

    def __init__(self, where: str):
        self.where = where
        super().__init__(
            f"ctx.continue_as_new was called inside {where}: call it from the agent "
            "function's own context"
        )


class ContinueAsNew(BaseException):
    """Ends the current generation (raised by ``ctx.continue_as_new``; never caught by agents).

    A BaseException, so that ``except Exception`` in agent code cannot swallow it.

    Attributes:
        position: The ``continue_as_new`` operation's position in the ending generation.
        op_id: Its operation id.
        input_json: The next generation's input, encoded like a run input.
    """

    def __init__(self, position: str, op_id: str, input_json: str):
        self.position = position
        self.op_id = op_id
        self.input_json = input_json
        super().__init__(f"continue as new at {op_id}")


def run_continue_as_new(ctx: OperationScope, value: Any, scope_prefix: str) -> NoReturn:
    """Validates and encodes the next input, then ends the generation (see the module).

    Raises:
        ContinueAsNew: Always, once the input is valid and the call is at the top level.
        ContinueAsNewNotAllowedError: Inside a step, a child context or a parallel branch.
        InputValidationError: If ``value`` does not match the agent's input type.
        PayloadError: If the input cannot be recorded (for example it holds a secret).
        SuspendExecution: If the journal as read already holds this switch (a load that
            raced it): the next invocation reads the new generation.
    """
    inv = ctx.invocation
    if inv.in_step:
        raise ContinueAsNewNotAllowedError("a step")
    if inv.branches:
        raise ContinueAsNewNotAllowedError("a parallel branch")
    if scope_prefix != pos_prefix(inv.header.generation):
        raise ContinueAsNewNotAllowedError("a child context")
    definition = resolve_pinned(inv.registry, inv.header)
    input_json = encode(validate_input(definition, value), definition.input_type)
    position, op_id, record = ctx.next_operation(OpKind.CONTINUE, OPERATION_NAME)
    if record is not None:
        raise SuspendExecution(Reason.CONTINUE, detail=f"{op_id}: continued as new; reload")
    inv.live = True
    raise ContinueAsNew(position, op_id, input_json)


def switch_generation(
    store: JournalStore, clock: Clock, inv: Invocation, signal: ContinueAsNew
) -> InvocationOutcome:
    """Records the switch to the next generation in one conditional transaction.

    Refused (the run waits, then the agent reaches ``continue_as_new`` again) while a tool
    call of this generation is PREPARED and not resolved: its outcome must land in the
    generation that made it, whose journal is the one its replay reads.

    Returns:
        CONTINUE (the next invocation runs the new generation), CONTINUE to reload when the
        header or the journal changed since it was read, SUSPENDED while a tool call is
        PREPARED, or CONTENDED when the run left the active statuses meanwhile.

    Raises:
        RunNotFoundError: If the run is gone.
        PayloadError: If the input cannot be recorded.
    """
    header = inv.header
    run_id = inv.run_id
    now = clock.now_ms()
    # What this generation holds now, this invocation's own writes included (its records are
    # the journal as it was read): the tool calls still PREPARED, where the latest status is.
    current = store.load_generation(run_id, header.generation)
    prepared = [e.stale_at_ms for e in current.effects if e.status is EffectStatus.PREPARED]
    if prepared:
        wake = max(min(prepared), now) + PREPARED_RETRY_MS
        detail = f"{signal.op_id}: waits for {len(prepared)} PREPARED tool call(s)"
        return suspended(
            store,
            clock,
            run_id,
            SuspendExecution(Reason.TIMER, wake_at_ms=wake, detail=detail),
            inv,
        )
    following = header.generation + 1
    closing = inv.entry(
        signal.position,
        signal.op_id,
        OpKind.CONTINUE,
        OPERATION_NAME,
        EntryType.SUCCEEDED,
        # A generation's closing record keeps its own input: the history of every generation.
        value=header.input,
        meta={"next_generation": following},
    )
    opening = inv.entry(
        opening_position(following),
        f"{id_prefix(run_id, following)}{OPENING_NAME}:0",
        OpKind.GENERATION,
        OPENING_NAME,
        EntryType.SUCCEEDED,
        value=signal.input_json,
        meta={
            "generation": following,
            "continued_from": signal.op_id,
            # Events sent to the run and not consumed stay for the new generation: it takes
            # them from where this one stopped (durable_agents.engine.operations.event_wait).
            "event_floors": event_floors(inv, header.event_names),
            # Where ``GET /runs/{id}/status-value`` finds the latest ``ctx.set_status`` value
            # until the new generation publishes one (None: never published).
            "status_generation": _status_generation(current),
        },
    )
    change = RunChange(
        expected=_ACTIVE,
        status=RunStatus.RUNNING,
        updated_at_ms=now,
        input=signal.input_json,
        generation=following,
        wake_at_ms=None,
        waiting_on=None,
        expected_revision=header.revision,
    )
    inv.hooks.before_claim(signal.op_id)
    try:
        inv.store.commit(run_id, [closing, opening], change)
    except (RunRevisionConflictError, EntryConflictError) as exc:
        # Someone changed the run since it was read (an event, a cancel request, or this
        # very switch by a duplicate): decide again on a fresh read.
        return InvocationOutcome(
            run_id, OutcomeKind.CONTINUE, list(inv.executed), detail=f"reload: {exc}"
        )
    except RunStateConflictError as exc:
        return InvocationOutcome(run_id, OutcomeKind.CONTENDED, list(inv.executed), detail=str(exc))
    inv.hooks.after_record(signal.op_id)
    inv.header = change.apply(header)
    inv.executed.append(signal.op_id)
    return InvocationOutcome(
        run_id,
        OutcomeKind.CONTINUE,
        list(inv.executed),
        detail=f"continued as new: generation {following}",
    )


def _status_generation(snapshot: RunSnapshot) -> int | None:
    """The generation holding the run's latest published status, as of ``snapshot``."""
    if latest_status(snapshot).op_id is not None:
        return snapshot.header.generation
    return _inherited_status(snapshot)


def _inherited_status(snapshot: RunSnapshot) -> int | None:
    for entry in snapshot.entries:
        if entry.kind is OpKind.GENERATION and entry.type is EntryType.SUCCEEDED:
            where = entry.meta.get("status_generation")
            return None if where is None else int(where)
    return None


def published_status(store: JournalStore, snapshot: RunSnapshot) -> PublishedStatus:
    """The run's latest ``ctx.set_status`` value, from an earlier generation if need be.

    A generation that has not published one yet shows its predecessors' latest (its opening
    entry says which generation holds it): at most one more load.

    Raises:
        RunNotFoundError: If the run is gone.
    """
    found = latest_status(snapshot)
    if found.op_id is not None or not snapshot.header.generation:
        return found
    where = _inherited_status(snapshot)
    if where is None:
        return found
    return latest_status(store.load_generation(snapshot.header.run_id, where))
