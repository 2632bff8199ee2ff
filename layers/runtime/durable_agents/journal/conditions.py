"""What a commit checks and makes, and how a listing pages: one copy for the embedded journals.

The in-memory journal (``journal.memory``) and the SQLite journal (``journal.sqlite``) hold
the same records and answer the same questions; only where they keep them differs. The rules
that decide a conditional write (the header's status and revision, a side-effect record's
status and attempt, a wait's status and last change), the header a commit leaves behind (a
finished run's expiry, a late write's stamping pass) and the listings' keys and key cursors
live here, so that both journals raise the same errors and hand out the same pages.

A listing's cursor is ``<listing>|<key>``: the key of the last record a page returned, named
by its listing so that one listing refuses another's cursor (as DynamoDB's index keys do).

>>> position("changed", "changed|0000000001000#run-a")
'0000000001000#run-a'
>>> position("expiring", "changed|0000000001000#run-a")
Traceback (most recent call last):
...
durable_agents.errors.InvalidCursorError: the cursor continues another listing
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from durable_agents.core.models import (
    EffectChange,
    Entry,
    RunChange,
    RunHeader,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
)
from durable_agents.errors import (
    EffectConflictError,
    InvalidCursorError,
    RunNotFoundError,
    RunRevisionConflictError,
    RunStateConflictError,
    WaitConflictError,
)
from durable_agents.journal.retention import late_stamp_due, written_at_ms
from durable_agents.journal.store import Page, finished

T = TypeVar("T")


def check_header(run_id: str, header: RunHeader | None, change: RunChange) -> RunHeader:
    """The stored header, if ``change`` may be applied to it.

    Raises:
        RunNotFoundError: If there is no such run (``header`` is None).
        RunStateConflictError: If the header's status is not in ``change.expected``.
        RunRevisionConflictError: If the change names a revision the header has moved past.
    """
    if header is None:
        raise RunNotFoundError(run_id)
    if header.status not in change.expected:
        raise RunStateConflictError(run_id, sorted(change.expected), header.status)
    if change.expected_revision is not None and header.revision != change.expected_revision:
        raise RunRevisionConflictError(
            run_id, change.expected_revision, header.revision, header.status
        )
    return header


def check_effect(effect: EffectChange, current: SideEffectRecord | None) -> None:
    """Whether a side-effect record may be written over ``current`` (None: there is none).

    Raises:
        EffectConflictError: If the record exists (a create), or is missing or not in the
            expected status and attempt (an update).
    """
    if effect.expected_status is None:
        if current is not None:
            raise EffectConflictError(effect.record.operation_id, current)
    elif (
        current is None
        or current.status not in effect.expected_status
        or (effect.expected_attempt is not None and current.attempt != effect.expected_attempt)
    ):
        raise EffectConflictError(effect.record.operation_id, current)


def check_distinct_waits(waits: Sequence[WaitChange]) -> None:
    """A transaction writes each wait record at most once.

    Raises:
        ValueError: If two of ``waits`` write the same record.
    """
    if len({w.record.wait_id for w in waits}) != len(waits):
        raise ValueError("one transaction cannot write a wait record twice")


def check_wait(wait: WaitChange, current: WaitRecord | None) -> None:
    """Whether a wait record may be written over ``current`` (None: there is none).

    Raises:
        WaitConflictError: If the record exists (a create), or is missing, not in the
            expected status or changed since it was read (an update).
    """
    if wait.expected is None:
        if current is not None:
            raise WaitConflictError(wait.record.wait_id, current)
        return
    if (
        current is None
        or current.status not in wait.expected
        or (
            wait.expected_updated_at_ms is not None
            and current.updated_at_ms != wait.expected_updated_at_ms
        )
    ):
        raise WaitConflictError(wait.record.wait_id, current)


def header_after(
    header: RunHeader,
    change: RunChange | None,
    entries: Sequence[Entry],
    effect: EffectChange | None,
    waits: Sequence[WaitChange],
) -> RunHeader | None:
    """The header a checked commit leaves behind; None when it stays as it is.

    A change that finishes the run also sets its expiry and first stamping pass
    (``store.finished``). A write for a run already finished (a late decision, a leftover's
    expiry) lists the run for one more stamping pass after it (``retention.late_stamp_due``),
    as the DynamoDB journal does so that the pass tags what the write spilled.
    """
    if change is not None:
        changed = change.apply(header)
        return finished(changed) if change.status.terminal else changed
    if header.expires_at_ms is None:
        return None
    due = late_stamp_due(header.stamp_due_at_ms, written_at_ms(entries, effect, waits))
    return None if due is None else header.replace(stamp_due_at_ms=due)


# The listings' keys: a zero-padded time (13 digits, milliseconds) then the record's id, so
# that string order is time order (the DynamoDB indexes' sort keys).


def changed_key(header: RunHeader) -> str:
    """A run's key in ``changed_runs_page`` (least recently changed first)."""
    return f"{header.updated_at_ms:013d}#{header.run_id}"


def stamp_key(header: RunHeader) -> str:
    """A run's key in ``expiring_runs_page`` (earliest stamping due first)."""
    return f"{header.stamp_due_at_ms or 0:013d}#{header.run_id}"


def wake_key(header: RunHeader) -> str:
    """A run's key in ``due_runs_page`` (earliest timer first)."""
    return f"{header.wake_at_ms or 0:013d}#{header.run_id}"


def stale_key(record: SideEffectRecord) -> str:
    """A side-effect record's key in ``stale_effects_page`` (oldest stale time first)."""
    return f"{record.stale_at_ms:013d}#{record.run_id}#{record.position}"


def review_key(record: SideEffectRecord) -> str:
    """A side-effect record's key in ``reviews_page`` (oldest change first)."""
    return f"{record.updated_at_ms:013d}#{record.run_id}#{record.position}"


def wait_created_key(record: WaitRecord) -> str:
    """A wait's key in ``waits_page`` (oldest first)."""
    return f"{record.created_at_ms:013d}#{record.wait_id}"


def wait_due_key(record: WaitRecord) -> str:
    """A wait's key in ``due_waits_page`` (earliest deadline or heartbeat first)."""
    return f"{record.due_at_ms or 0:013d}#{record.wait_id}"


def sorted_page(
    listing: str, items: list[T], key: Callable[[T], str], limit: int, cursor: str | None
) -> Page[T]:
    """One page in index order, of records held in no order; the cursor is the last key.

    A key cursor (not an offset) stays correct while records enter and leave the listing
    between pages, as they do while the reconciler works through them.

    Raises:
        InvalidCursorError: If ``cursor`` is malformed or another listing's.
    """
    after = None if cursor is None else position(listing, cursor)
    keyed = sorted(((key(item), item) for item in items), key=lambda pair: pair[0])
    if after is not None:
        keyed = [pair for pair in keyed if pair[0] > after]
    return page_of(listing, keyed[:limit], more=len(keyed) > limit)


def page_of(listing: str, keyed: Sequence[tuple[str, T]], *, more: bool) -> Page[T]:
    """The page of ``keyed`` (listing key and record, in key order, at most one page).

    Args:
        listing: The listing's name, which its cursors carry.
        keyed: The page's records with their keys.
        more: Whether the listing holds records after these (then the page has a cursor).
    """
    positions = [f"{listing}|{item_key}" for item_key, _ in keyed]
    return Page([item for _, item in keyed], positions[-1] if more and keyed else None, positions)


_CURSOR = re.compile(r"([^|]+)\|(\d{13}#[^|]+)")


def position(listing: str, cursor: str) -> str:
    """The key a listing's cursor continues after.

    Raises:
        InvalidCursorError: If ``cursor`` is malformed or another listing's.
    """
    match = _CURSOR.fullmatch(cursor)
    if match is None or not cursor.isascii():
        raise InvalidCursorError(cursor, "the cursor is malformed")
    if match.group(1) != listing:
        raise InvalidCursorError(cursor)
    return match.group(2)
