"""A speed trick: a finished step replayed without ``run_step`` (``DurableContext.step``).

A faithful invocation spends its time replaying the run's recorded steps. In the common case
(a finished step at the next position, nothing else going on: no fault, no cancel, not live,
not inside a step; no plugin that hears replays, no custom serializer) ``replayed_step``
returns the recorded result itself. It decides what ``OperationScope.replayed_record`` and
``run_step`` decide, with fewer calls and lookups:

* from a scope's ``PLAN_FROM``-th operation on, the records at all its positions are looked up
  at once (``records_by_counter``, a list by counter), so a replay indexes a list instead of
  formatting a position and looking it up;
* a record that a step without arguments replayed once remembers the name it was checked
  under (``OpRecord.replays_as``), so the next replay compares that one field;
* the return annotation is read without a ``getattr`` call, and the decoded-value cache
  (``OpRecord.replayed``) is read in place.

In every other case it takes nothing and returns ``NOT_REPLAYED``: ``step`` then checks the
name and calls ``run_step``, which replays (``replayed_record``), diverges or goes live as it
always did. It reads and advances ``OperationScope``'s ``_counter`` and ``_plan``; no other
module does besides ``context_scope``.

Kept because it pays (CONTRIBUTING.md, "Speed tricks must pay"): on Python 3.13, without it a
warm replayed step costs 1.7-1.9x (1.05 against 1.79 µs at 1,000 steps, 1.05 against
1.96 µs at 10,000) and a faithful run of 1,000 steps 1.3-1.6x as much CPU (1.5x by
instructions). Being a call away from ``step`` rather than inlined in it costs a replayed step
about 7% of its instructions. Figures and commands: docs/benchmarks.md, "Speed tricks on
Python 3.13".
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, Any

from durable_agents.core.ids import POSITIONS, check_name, format_position, name_of
from durable_agents.core.models import OpKind
from durable_agents.core.serde import replay_value
from durable_agents.engine.fingerprints import NO_ARGS, NO_ARGS_VALUE, Fingerprint
from durable_agents.engine.operations.step import return_hint
from durable_agents.engine.replay_index import NOT_DECODED, OpRecord

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope

NOT_REPLAYED: Any = object()
"""What ``replayed_step`` returns when the step is not replay's common case."""

PLAN_FROM = 8
"""The operation of a scope from which its positions' records are looked up at once."""


def replayed_step(
    scope: OperationScope,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    name: str | None,
    result_type: Any,
) -> Any:
    """The recorded result of step ``name`` at the scope's next position, if replay's common case.

    Called by ``DurableContext.step`` only while the invocation replays quietly
    (``replaying_quietly``) and without a custom serializer. If the record at the next position
    is a finished step of this name (checked by ``check_name`` once) and input, the position is
    taken and its result returned (or its recorded error raised), as ``run_step`` would.
    Otherwise nothing is taken and ``NOT_REPLAYED`` is returned.

    Raises:
        Exception: The step's recorded error, rebuilt.
        InvalidNameError: If ``name`` is recorded here but is not a valid name.
    """
    op_name = name_of(fn) if name is None else name
    if type(op_name) is not str:
        return NOT_REPLAYED  # check_name refuses it on the way to run_step
    counter = scope._counter + 1
    plan = scope._plan
    if plan is None:
        record = record_at(scope, counter)
    else:
        try:
            record = plan[counter]
        except IndexError:  # past the plan: the frontier, or a gap in the positions
            record = record_at(scope, counter)
    if record is None or not (
        (record.replays_as == op_name and not args) or replays_step(record, op_name, args)
    ):
        return NOT_REPLAYED
    scope._counter = counter
    if result_type is not None:
        hint = result_type
    else:  # as getattr(fn, "__annotations__", None), without a call
        try:
            hint = return_hint(fn) if fn.__annotations__ else None
        except AttributeError:
            hint = None
    cached = record.decoded  # OpRecord.replayed's first test, in place
    if cached is not NOT_DECODED and cached[0] is hint and cached[1] is None:
        return cached[2]
    return record.replayed(hint, None, replay_value)


def replays_step(record: OpRecord, name: str, args: tuple[Any, ...]) -> bool:
    """Whether a step ``name`` with ``args`` replays ``record`` by returning its result.

    Exactly ``OperationScope.replayed_record``'s test of the record (a result, the kind, the
    name, the fingerprint), then ``check_name``. A record that passes it for a step without
    arguments remembers the name (``OpRecord.replays_as``): the next such step compares that
    alone.

    Raises:
        InvalidNameError: If ``name`` is not a valid operation name.
    """
    if record.result is None or record.kind is not OpKind.STEP or record.name != name:
        return False
    recorded = record.fingerprint
    no_args = recorded is None or recorded is NO_ARGS_VALUE or NO_ARGS.value == recorded
    if args and not (recorded is None or Fingerprint.of_args(args).value == recorded):
        return False
    if not (args or no_args):
        return False
    check_name(name)
    if no_args:
        record.replays_as = name
    return True


def record_at(scope: OperationScope, counter: int) -> OpRecord | None:
    """The journal's record at the scope's ``counter``-th position, if it has one.

    Where the scope's plan has no answer (it has none yet, or the counter is past it). When a
    scope replays its ``PLAN_FROM``-th operation this way, the records at all its positions up
    to the first without one are looked up at once (``records_by_counter``) and kept as its
    plan. A scope of a few operations (a batch branch) never pays for that. The records do not
    change while the invocation is not live, and only such an invocation replays this way.
    """
    records = scope._inv.records
    prefix = scope._pos_prefix
    if counter == PLAN_FROM and scope._plan is None:
        scope._plan = records_by_counter(records, prefix)
    if not prefix and counter < len(POSITIONS):  # format_position, inlined
        return records.get(POSITIONS[counter])
    return records.get(format_position(prefix, counter))


def records_by_counter(records: dict[str, OpRecord], prefix: str) -> list[OpRecord | None]:
    """``records.get`` of positions ``prefix`` + 1, 2, …, k by counter (index 0 is None).

    Every item is exactly what looking its position up gives; k only bounds the work: a
    binary search for the scope's last recorded position (a scope's positions are taken in
    order, so the ones recorded are 1 to k but for gaps, which only end the list early or
    leave a None in it). Looked up in C while the position table lasts (it only grows).
    """
    get = records.get
    table = len(POSITIONS)
    found, absent = 0, min(len(records), table - 1) + 1  # recorded at found, not at absent
    while absent - found > 1:
        middle = (found + absent) // 2
        if get(prefix + POSITIONS[middle]) is None:
            absent = middle
        else:
            found = middle
    positions: Any = islice(POSITIONS, 1, found + 1)
    if prefix:
        positions = map(prefix.__add__, positions)
    plan: list[OpRecord | None] = [None, *map(get, positions)]
    if found == table - 1:  # the table ran out before the records did
        while (record := get(format_position(prefix, len(plan)))) is not None:
            plan.append(record)
    return plan
