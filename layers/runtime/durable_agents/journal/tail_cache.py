"""What a process knows of each run's journal, and where the part that can still change begins.

A warm container keeps each run's journal as it last read it and, on the next load, reads only
the header and the part of the partition that can still change (ADR 0015,
docs/adr/0015-tail-journal-reads.md). That part is found from the journal itself:

* A **top-level position with a result** (``J#<p>|~``, SUCCEEDED or FAILED) is *settled*: its
  result was written once and is what every replay returns, and nothing written under it
  afterwards changes a decision (late attempt entries of a zombie, entries of branches a
  batch abandoned — ADR 0005). A side-effect record is written only on the way to its call's
  result: the write that records the result moves the record to its last status in the same
  transaction, and a call with a result is replayed from it, never recovered again.
* Top-level operations run in program order, and every operation that another writer may
  finish later (a wait, an approval, a callback handle, a sub-agent, a batch's branches)
  records an entry at or under its position before any later top-level position is written.

So nothing that matters can be written below the first top-level position without a result,
``X``: the tail is every item from ``J#X`` (and ``S#X`` for side-effect records) — or from
inside ``X``, past the run of its children that have their result (``_narrow``: a batch's
finished branches, a child context's earlier operations). When every top-level position has
its result, the tail begins after the last one's result ``J#L|~`` and at ``S#L|`` (after
every record under ``L``). Migration entries (``~m…``) sort after every
operation, so they are always in the tail.

Entries and side-effect records below those bounds are taken from the cache. The cache is a
cache, never the truth: every load reads the header first, or finds it unchanged through the
header echo the tail read returns (``header_echo``, ADR 0019), and every write stays
conditional, so a missed item can only show up as a conflict (after which the run is read
whole again).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from durable_agents.core.ids import format_position
from durable_agents.core.migration_records import MIGRATION_POSITION_PREFIX
from durable_agents.core.models import Entry, RunHeader, SideEffectRecord
from durable_agents.journal.prefix_view import PrefixView

DEFAULT_MAX_RUNS = 256
"""How many runs a process keeps the journal of (least recently loaded dropped first)."""
DEFAULT_MAX_ITEMS = 200_000
"""How many entries and records a process keeps over all runs (the same bound, in runs)."""

ENTRIES_END = "J$"
"""Sorts after every entry key (``J#…``) and before every side-effect key (``S#…``)."""
EFFECTS_END = "S$"
"""Sorts after every side-effect key."""


@dataclass(frozen=True, slots=True)
class TailBounds:
    """Where the part of a run's partition that can still change begins.

    Attributes:
        entries_from: The lowest entry key the tail reads (inclusive).
        effects_from: The lowest side-effect key the tail reads (inclusive).
    """

    entries_from: str
    effects_from: str


READ_UNIT_BYTES = 4096
"""A strongly consistent read costs one read unit per 4 KB read (rounded up per request)."""


def read_units(size: int) -> int:
    """The read units a strongly consistent request reading ``size`` bytes consumes."""
    return max(1, -(-size // READ_UNIT_BYTES))


START = TailBounds("J#", "S#")
"""A run without entries: everything is tail."""


def top_level(position: str) -> str:
    """The top-level position a position is under (itself when it is top-level)."""
    head, _, _ = position.partition("/")
    return head


def tail_bounds(
    entries: Sequence[Entry],
    effects: Sequence[SideEffectRecord] = (),
    previous: TailBounds = START,
) -> TailBounds:
    """The bounds of the next tail read, from the entries and records the last read returned.

    ``entries`` and ``effects`` are the tail the last load read (or, after a full load,
    everything), in key order; everything below them (and below ``previous``) is settled (see
    the module docstring), so the first top-level position without a result is among them. A
    position with only a side-effect record (a call prepared, not yet recorded) has no result
    either. ``previous`` is returned when they hold no operation at all (a run that has
    recorded nothing yet).
    """
    results: set[str] = set()
    scopes: set[str] = set()  # positions something else is under
    tops: set[str] = set()
    positions = [e.position for e in entries] + [r.position for r in effects]
    begun = previous.entries_from.removeprefix("J#")
    if begun and "|" not in begun:
        # The last tail began inside an open operation (or at it): it and its enclosing
        # scopes are still open unless this tail holds their results, even when nothing at
        # or under them was read this time (their finished children are below the tail).
        positions.append(begun)
    for position in positions:
        if position.startswith(MIGRATION_POSITION_PREFIX):
            continue  # never an operation; always in the tail (it sorts last)
        parts = position.split("/")
        tops.add(parts[0])
        for depth in range(1, len(parts)):
            scopes.add("/".join(parts[:depth]))
    for entry in entries:
        if entry.type.is_result:
            results.add(entry.position)
    if not tops:
        return previous
    ordered = sorted(tops)
    for top in ordered:
        if top not in results:
            start = _narrow(top, scopes, results, previous.entries_from.removeprefix("J#"))
            return TailBounds(f"J#{start}", f"S#{start}")
    last = ordered[-1]
    # After the last result (``~~`` sorts after ``~``, before the next position), and after
    # every side-effect record under that position: nothing settled is read again.
    return TailBounds(f"J#{last}|~~", f"S#{last}|")


def _narrow(scope: str, scopes: set[str], results: set[str], previous: str) -> str:
    """Where the tail begins inside an open scope: at its first child without a result.

    A scope's children are numbered from 1 and sort before the scope's own entries; those
    with a result are settled like top-level positions, so the tail can skip a run of them
    from the first child (or from where the previous tail began, everything below which was
    settled then): a batch's finished branches, a child context's earlier operations. Only
    that run is skipped — a branch with no entry yet may sit between two that have one.
    The first child without a result is narrowed the same way if something is under it.
    (An operation with child scopes never has a side-effect record of its own: only tool
    calls do, and they have no children.)
    """
    if scope not in scopes:
        return scope  # nothing under it: the tail begins at the operation itself
    index = 1
    if previous.startswith(scope + "/"):
        segment = previous[len(scope) + 1 :].split("/", 1)[0].split("|", 1)[0]
        if not segment.isdigit():
            return scope
        index = int(segment)
    while format_position(f"{scope}/", index) in results:
        index += 1
    return _narrow(format_position(f"{scope}/", index), scopes, results, previous)


@dataclass(frozen=True, slots=True)
class KnownRun:
    """One run's journal as this process last read it (immutable: replaced on every load).

    The sequences are ``PrefixView``s of lists the next load appends to when it only adds
    items after them (``dynamodb_loads``, ADR 0018): a load in the common case costs what it
    read, not what the run holds. They never change once a ``KnownRun`` holds them.

    Attributes:
        created_at_ms: The run's creation time (a run id reused after expiry is another run).
        keys: The entries' sort keys, ascending (``entries[i].sort_key == keys[i]``).
        entries: The entries, in key order.
        effect_keys: The side-effect records' sort keys, ascending.
        effects: The side-effect records, in key order.
        bounds: Where the next tail read begins.
        header_bytes: The header item's size (DynamoDB's item-size rules).
        entry_bytes: ``entry_bytes[i]``: the size of the entry items ``entries[:i]``.
        effect_bytes: ``effect_bytes[i]``: the size of the record items ``effects[:i]``.
        header: The run header as this process last read it (None: not kept).
        echo: ``header``'s echo token when the read that returned it also found the echo item
            holding it (``header_echo``): the next load may then trust ``header`` while the
            echo still holds that token. None: the next load reads the header.
    """

    created_at_ms: int
    keys: Sequence[str]
    entries: Sequence[Entry]
    effect_keys: Sequence[str]
    effects: Sequence[SideEffectRecord]
    bounds: TailBounds
    header_bytes: int
    entry_bytes: Sequence[int]
    effect_bytes: Sequence[int]
    header: RunHeader | None = None
    echo: str | None = None

    def tail_pays(self, echo_reads: bool = True) -> bool:
        """Whether a tail read is estimated to cost fewer read units than a whole read.

        A whole read is one Query of everything (one read unit per 4 KB, rounded up once);
        a tail read is one or two Queries, each rounded up on its own, and the header's
        GetItem unless the header echo is trusted (``echo``). The tail is estimated as large
        as the part of it this process holds now. Without a trusted echo, a journal under
        about 8 KB is read whole: one request, as cheap or cheaper; with one, the tail is
        read whenever it costs no more (one request either way, and less to decode).
        ``echo_reads``: whether the reader trusts echoes at all.
        """
        below = self.entries_below(self.bounds.entries_from)
        effects_below = self.effects_below(self.bounds.effects_from)
        entries_total, effects_total = self.entry_bytes[-1], self.effect_bytes[-1]
        whole = read_units(self.header_bytes + entries_total + effects_total)
        tail_entries = entries_total - self.entry_bytes[below]
        tail_effects = effects_total - self.effect_bytes[effects_below]
        trusted = echo_reads and self.echo is not None
        header = 0 if trusted else read_units(self.header_bytes)
        if effects_below == 0:
            tail = header + read_units(tail_entries + tail_effects)
        else:
            tail = header + read_units(tail_entries) + read_units(tail_effects)
        return tail <= whole if trusted else tail < whole

    def entries_below(self, key: str) -> int:
        """How many of the entries sort below ``key``."""
        return _below(self.keys, key)

    def effects_below(self, key: str) -> int:
        """How many of the side-effect records sort below ``key``."""
        return _below(self.effect_keys, key)


def _below(keys: Sequence[str], key: str) -> int:
    # A view bisects its list in C; ``bisect`` on the view would index it in Python.
    return keys.bisect_left(key) if isinstance(keys, PrefixView) else bisect.bisect_left(keys, key)


@dataclass(slots=True)
class _Seen:
    """What this process read or wrote of one run (for ``JournalRead.unseen``)."""

    created_at_ms: int
    entry_keys: set[str] = field(default_factory=set)
    effects: dict[str, SideEffectRecord] = field(default_factory=dict)


class KnownRuns:
    """The runs' journals a process read lately (bounded by runs and items, thread-safe).

    Args:
        max_runs: How many runs to keep.
        max_items: How many entries and records to keep over all runs (the run loaded last
            is kept whatever its size).
    """

    def __init__(self, max_runs: int = DEFAULT_MAX_RUNS, max_items: int = DEFAULT_MAX_ITEMS):
        self._max = max_runs
        self._max_items = max_items
        self._items = 0
        self._runs: OrderedDict[str, KnownRun] = OrderedDict()
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()

    def peek(self, run_id: str) -> KnownRun | None:
        """What this process keeps of the run (of whichever creation time)."""
        with self._lock:
            return self._runs.get(run_id)

    def get(self, run_id: str, created_at_ms: int) -> KnownRun | None:
        """The run as last read, if it is this very run (same creation time)."""
        with self._lock:
            known = self._runs.get(run_id)
            if known is None or known.created_at_ms != created_at_ms:
                return None
            self._runs.move_to_end(run_id)
            return known

    def put(
        self,
        run_id: str,
        known: KnownRun,
        read_keys: Sequence[str] | None = None,
        read_effects: Sequence[SideEffectRecord] | None = None,
    ) -> int:
        """Keeps ``known`` as the run's journal; returns how many of its items were unseen.

        An item is unseen when this process had neither read nor written it (a record: not
        in this state) before; afterwards every item of ``known`` counts as seen.
        ``read_keys`` and ``read_effects`` are the entry keys and records the load read (None:
        all of ``known``'s); the rest of ``known`` came from the state it replaces, all seen.
        """
        entry_keys = known.keys if read_keys is None else read_keys
        effects = known.effects if read_effects is None else read_effects
        with self._lock:
            seen = self._seen.get(run_id)
            if seen is None or seen.created_at_ms != known.created_at_ms:
                seen = self._seen[run_id] = _Seen(known.created_at_ms)
            seen_keys = seen.entry_keys
            unseen = sum(1 for key in entry_keys if key not in seen_keys)
            seen_keys.update(entry_keys)
            for record in effects:
                key = record.sort_key
                if seen.effects.get(key) != record:
                    unseen += 1
                    seen.effects[key] = record
            replaced = self._runs.get(run_id)
            if replaced is not None:
                self._items -= _size(replaced)
            self._runs[run_id] = known
            self._items += _size(known)
            self._runs.move_to_end(run_id)
            while len(self._runs) > 1 and (
                len(self._runs) > self._max or self._items > self._max_items
            ):
                dropped, state = self._runs.popitem(last=False)
                self._items -= _size(state)
                self._seen.pop(dropped, None)
            return unseen

    def wrote(
        self,
        run_id: str,
        entries: Sequence[Entry],
        effect: SideEffectRecord | None,
    ) -> None:
        """Notes items this process wrote (acknowledged): they will not count as unseen.

        Only for ``JournalRead.unseen``: a snapshot's items always come from reads.
        """
        with self._lock:
            known = self._runs.get(run_id)
            seen = self._seen.get(run_id)
            if known is None or seen is None:
                return  # never read here: its next load is a full one anyway
            seen.entry_keys.update(entry.sort_key for entry in entries)
            if effect is not None:
                seen.effects[effect.sort_key] = effect

    def header_changed(self, run_id: str) -> None:
        """Notes that this process changed the run's header: the next load reads it first.

        The header kept is the one before the change, and the echo now holds a token it does
        not have: trying the tail alone would only find that out (a wasted Query).
        """
        with self._lock:
            known = self._runs.get(run_id)
            if known is not None and known.echo is not None:
                self._runs[run_id] = replace(known, echo=None)

    def forget(self, run_id: str) -> None:
        """Drops a run: its next load reads the whole partition."""
        with self._lock:
            state = self._runs.pop(run_id, None)
            if state is not None:
                self._items -= _size(state)
            self._seen.pop(run_id, None)


def _size(state: KnownRun) -> int:
    return len(state.keys) + len(state.effect_keys)
