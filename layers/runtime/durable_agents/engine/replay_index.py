"""A run's journal grouped by position, and kept grouped across a warm container's invocations.

Replay looks each operation up by its position (``OpRecord``). Grouping the journal costs a
pass over every entry, and in faithful mode (one operation per invocation) that pass ran once
per invocation: quadratic in the run's length. ``WarmRecords`` keeps the grouping of the runs a
process executed lately and, when the next load of a run is the journal it grouped plus entries
after it (the usual case: the last invocation appended them), folds only those.

It is a cache of what the journal says, never a source of truth: every invocation still loads
the journal (consistent read), and the cached grouping is used only when the loaded entries
*start with the very objects* that were grouped (the stores hand out the same immutable
``Entry`` for an item they already decoded). Anything else — an entry inserted in the middle by
a parallel branch, a migration's rewritten results, another process's store — regroups from
scratch. Records are copied on write: an ``OpRecord`` an invocation was given never changes
under it, even while another thread folds newer entries of the same run.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from durable_agents.core.migration_records import migrated_view
from durable_agents.core.models import Entry, EntryType, OpKind, SideEffectRecord

FINGERPRINT_KEY = "fp"
"""The ``meta`` key of an operation's input fingerprint (``durable_agents.engine.fingerprints``)."""

NOT_DECODED: Any = object()
"""``OpRecord.decoded`` before (or instead of) a cached decoded result."""

# Results cached decoded: values no agent can change in place, so one decoded object can be
# handed to every replay. Anything else is decoded afresh each time (agent code may mutate it).
_IMMUTABLE = frozenset({int, float, str, bool, type(None)})


@dataclass(slots=True)
class OpRecord:
    """Everything the journal holds about one operation (one position).

    Treat a record as read-only once it is in a grouping: ``WarmRecords`` shares it between
    invocations. Only ``decoded`` and ``replays_as`` are set later, each to the same value
    by whoever sets it.
    """

    # What a replayed operation reads comes first: the object's first cache line.
    kind: OpKind
    name: str
    op_id: str
    result: Entry | None = None
    fingerprint: str | None = None
    """The input fingerprint the first entry carrying one recorded (None if none does)."""
    decoded: Any = NOT_DECODED
    """``(hint, serdes, value)``: the result as last decoded, kept if the value is immutable."""
    last_started: Entry | None = None
    last_failed: Entry | None = None
    scheduled: Entry | None = None
    notified: Entry | None = None
    attempts: int = 0
    entries: list[Entry] = field(default_factory=list)
    effect: SideEffectRecord | None = None
    replays_as: str | None = field(default=None, compare=False, repr=False)
    """``name`` once a step without arguments replayed this record having checked everything
    (kind, name, fingerprint, a result, ``check_name``): a step asking for it again with an
    equal name needs no check but that one (``durable_agents.engine.replay_fast_path``). None
    until then."""

    def add(self, entry: Entry) -> None:
        """Folds one entry into the record."""
        self.entries.append(entry)
        attempt = entry.attempt
        self.attempts = max(self.attempts, attempt)
        kind = entry.type
        if kind is EntryType.SUCCEEDED or kind is EntryType.FAILED:
            self.result = entry
        elif kind is EntryType.STARTED:
            if self.last_started is None or attempt > self.last_started.attempt:
                self.last_started = entry
        elif kind is EntryType.ATTEMPT_FAILED:
            if self.last_failed is None or attempt > self.last_failed.attempt:
                self.last_failed = entry
        elif kind is EntryType.SCHEDULED:
            self.scheduled = entry
        elif kind is EntryType.NOTIFIED:
            self.notified = entry
        if self.fingerprint is None and entry.meta:
            value = entry.meta.get(FINGERPRINT_KEY)
            if isinstance(value, str):
                # Interned: the many records of one input (no arguments, say) share one string,
                # and replay compares it with its own by identity first.
                self.fingerprint = sys.intern(value)

    def replayed(self, hint: Any, serdes: Any, decode: Callable[[Entry, Any, Any], Any]) -> Any:
        """The recorded result as ``decode(result, hint, serdes)`` gives it, decoded once.

        The decoded value is kept (for this hint and serializer) only if it is immutable: a
        dict or list is decoded afresh for every replay, since agent code may change it.

        Raises:
            Exception: Whatever ``decode`` raises (a recorded error, rebuilt).
        """
        cached = self.decoded
        if cached is not NOT_DECODED and cached[0] is hint and cached[1] is serdes:
            return cached[2]
        value = decode(self.result, hint, serdes)  # type: ignore[arg-type]
        if type(value) in _IMMUTABLE:
            self.decoded = (hint, serdes, value)
        return value


def _fold(records: dict[str, OpRecord], entries: Sequence[Entry], fresh: set[str] | None) -> None:
    """Folds ``entries`` into ``records``, copying every shared record it changes.

    ``fresh`` holds the positions whose records this grouping created or copied already; None
    when ``records`` starts empty (every record in it is this grouping's own).
    """
    get = records.get
    for entry in entries:
        position = entry.position
        record = get(position)
        if record is None:
            record = records[position] = OpRecord(entry.kind, entry.name, entry.op_id)
            if fresh is not None:
                fresh.add(position)
        elif fresh is not None and position not in fresh:
            record = records[position] = dataclasses.replace(
                record, entries=list(record.entries), decoded=NOT_DECODED, replays_as=None
            )
            fresh.add(position)
        record.add(entry)


def _attach(
    records: dict[str, OpRecord], effects: Sequence[SideEffectRecord]
) -> dict[str, OpRecord]:
    """Returns ``records`` with each side-effect record on its operation (copied on write)."""
    if not effects:
        return records
    records = dict(records)
    for effect in effects:
        record = records.get(effect.position)
        if record is None:
            name = effect.operation_id.rsplit("/", 1)[-1].rsplit(":", 2)[-2]
            records[effect.position] = OpRecord(
                OpKind.TOOL, name, effect.operation_id, effect=effect
            )
        elif record.effect is not effect and record.effect != effect:
            records[effect.position] = dataclasses.replace(record, effect=effect)
    return records


def group_entries(
    entries: Sequence[Entry], effects: Sequence[SideEffectRecord] = ()
) -> dict[str, OpRecord]:
    """Groups journal entries and side-effect records by position."""
    records: dict[str, OpRecord] = {}
    _fold(records, entries, None)
    return _attach(records, effects)


@dataclass(slots=True)
class _Grouped:
    """One run's grouped entries (without side-effect records, which change in place).

    The entries themselves are not kept: how many there were and the last one are enough
    to tell whether a later load only added entries after them (``_extends``).
    """

    count: int
    last: Entry | None
    records: dict[str, OpRecord]
    # The effects attached last time and the grouping with them: reused while they are equal.
    effects: list[SideEffectRecord] = field(default_factory=list)
    with_effects: dict[str, OpRecord] = field(default_factory=dict)
    # Grouped through ``migrated_view``: never extended, regrouped on every load.
    migrated: bool = False


def _extends(entries: Sequence[Entry], known: _Grouped) -> bool:
    """Whether ``entries`` are the known ones with more after them (O(1)).

    A live run's entries are only ever added (written once, never deleted), in journal
    order, and the store hands out the very objects it decoded before. If anything was
    inserted before the last known entry, that entry moved to a later index: the object at
    its old index is then another one. So the last known entry, still at its index, means
    every new entry comes after it. (Identity, not equality; an entry decoded afresh only
    makes this answer no, and the run is grouped again from scratch.)
    """
    if len(entries) < known.count:
        return False
    return known.count == 0 or entries[known.count - 1] is known.last


def _grouped(entries: Sequence[Entry], records: dict[str, OpRecord], **kw: Any) -> _Grouped:
    return _Grouped(len(entries), entries[-1] if entries else None, records, **kw)


class WarmRecords:
    """The grouped journals of the runs this process executed lately (bounded, thread-safe).

    Args:
        capacity: How many runs to keep (least recently used dropped first).
    """

    def __init__(self, capacity: int = 256):
        self._capacity = capacity
        self._runs: OrderedDict[str, _Grouped] = OrderedDict()
        self._lock = threading.Lock()
        self.folded = 0
        """Entries folded since the process started (a cold grouping folds every entry)."""

    def records(
        self, run_id: str, entries: Sequence[Entry], effects: Sequence[SideEffectRecord]
    ) -> dict[str, OpRecord]:
        """Returns the journal grouped by position, folding only what is new since last time.

        A migrated run is seen through its migrations (``migrated_view``: their entries out,
        the results they transformed in) and is grouped from scratch each time.

        The dict returned is the caller's own; the records in it are shared and read-only.
        """
        # Under the lock throughout: the cached grouping is extended in place (a copy per
        # load was O(journal)), and a concurrent load of the same run must not see it half
        # done. Every record it shares with dicts handed out earlier is copied before it
        # changes (``_fold``'s ``fresh``), and only copies of the dict are handed out.
        with self._lock:
            known = self._runs.get(run_id)
            if known is None or known.migrated or not _extends(entries, known):
                known, new = None, entries
            else:
                new = entries[known.count :]
            if _has_migration(new):  # (every entry when nothing is known: ``new`` is all)
                records: dict[str, OpRecord] = {}
                _fold(records, migrated_view(entries), None)
                known, new = _grouped(entries, records, migrated=True), entries
            elif known is None:
                records = {}
                _fold(records, entries, None)
                known = _grouped(entries, records)
            elif new:
                _fold(known.records, new, set())
                known.count, known.last = len(entries), entries[-1]
                known.with_effects = {}  # it was grouped without the new entries
            if known.with_effects and _same_effects(effects, known.effects):
                grouped = known.with_effects
            else:
                grouped = _attach(known.records, effects)
                known.effects, known.with_effects = list(effects), grouped
            self.folded += len(new)
            self._runs[run_id] = known
            self._runs.move_to_end(run_id)
            while len(self._runs) > self._capacity:
                self._runs.popitem(last=False)
            return dict(grouped)

    def forget(self, run_id: str) -> None:
        """Drops one run's grouping (the next load of it groups from scratch)."""
        with self._lock:
            self._runs.pop(run_id, None)


_KIND = operator.attrgetter("kind")
_IS_MIGRATION = functools.partial(operator.is_, OpKind.MIGRATION)


def _has_migration(entries: Sequence[Entry]) -> bool:
    # All in C: a generator here was a measurable part of a run's first grouping.
    return any(map(_IS_MIGRATION, map(_KIND, entries)))


def _same_effects(a: Sequence[SideEffectRecord], b: Sequence[SideEffectRecord]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


WARM_RECORDS = WarmRecords()
"""The process's cache (a Lambda container keeps it between invocations)."""
