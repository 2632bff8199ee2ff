"""Retention: a finished run, and everything it wrote, expires (ADR 0012).

A run's retention is set when it starts (``@agent(retention=…)``, else the deployment's
``RETENTION_DAYS``, else 30 days) and kept on its header (``retention_s``). The write that
moves the run to a final status (``RunStatus.terminal``) also sets its expiry, in the same
conditional write: ``expires_at`` = that write's time + the retention. A run that has not
finished never expires (a 7-day approval survives), and a finished run never changes again,
so an expiry once set is never wrong.

Every other item of the run (journal entries, side-effect records, waits, the idempotency key,
spilled payloads) gets the same expiry from the reconciler: the finishing write also lists the
run as *due for stamping*, and ``stamp_expiring_runs`` stamps each listed run's items in small
idempotent writes, then lists it again ``LATE_WRITE_GRACE_MS`` later for a second pass that
catches writes landing after the finish (a zombie invocation's entry), then drops it. A sweep
that dies midway leaves the run listed: the next one finishes the job (items already stamped
are skipped). The stream cache needs nothing: its chunks expire 24 hours after they are
written, before any retention ends (at least one day).

A finished run may still be written to, long after both passes: a wait or a call in review it
left open (a quorum batch's approvals it no longer needed, a terminated run's tool call) is
closed or decided later, and the reconciler expires a leftover whose deadline passes. The
journal's write path carries the expiry itself (ADR 0012, amendment): every item a write puts
for a run known to be finished gets the run's ``ttl``, a record rewritten whole keeps it, and
the write lists the run for one more stamping pass ``LATE_WRITE_GRACE_MS`` after it
(``late_stamp_due``), which tags what it may have spilled to S3. Whether such a write happens
at all is the deciders' rule: a person's approval decision and a callback's completion or
heartbeat on a finished run are refused (``waits.records``), a review decision is recorded.

>>> from datetime import timedelta
>>> retention_seconds(timedelta(days=7))
604800
>>> retention_seconds(timedelta(hours=1))
Traceback (most recent call last):
...
ValueError: a retention must be at least one day, not 1:00:00
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from durable_agents.core.models import EffectChange, Entry, WaitChange

DAY_S = 24 * 3600
DEFAULT_RETENTION_S = 30 * DAY_S
RETENTION_ENV = "RETENTION_DAYS"
# Writes that land after a run finished do so within a lease or a Lambda timeout (minutes):
# the second stamping pass comes well after any of them.
LATE_WRITE_GRACE_MS = 3600 * 1000
# A store that read a run unfinished trusts that for half the grace (its own monotonic clock):
# a write that soon after the read lands before the run's second stamping pass, even if the
# run finished in between, so it needs no second read of the header to carry the expiry.
UNFINISHED_TRUSTED_S = LATE_WRITE_GRACE_MS / 2 / 1000
# S3 lifecycle cannot read DynamoDB TTL: payloads are tagged with the smallest of these (days)
# that covers the run's life plus its retention; template.yaml has one expiration rule each.
RETENTION_CLASSES_DAYS = (1, 7, 14, 30, 60, 90, 180, 365, 730, 1825, 3650)
RETENTION_TAG = "retention-days"


def retention_seconds(retention: timedelta | float | None) -> int | None:
    """A retention (a timedelta, or seconds) in whole seconds; None stays None.

    Raises:
        ValueError: If it is under one day (the stream cache keeps chunks for one) or over
            the longest retention class (ten years).
    """
    if retention is None:
        return None
    span = retention if isinstance(retention, timedelta) else timedelta(seconds=retention)
    if span < timedelta(days=1):
        raise ValueError(f"a retention must be at least one day, not {span}")
    if span > timedelta(days=RETENTION_CLASSES_DAYS[-1]):
        raise ValueError(f"a retention must be at most {RETENTION_CLASSES_DAYS[-1]} days")
    return int(span.total_seconds())


def default_retention_s() -> int:
    """The deployment's retention (``RETENTION_DAYS``, the template's ``RetentionDays``).

    Raises:
        ValueError: If the variable is set and is not a whole number of days in range.
    """
    raw = os.environ.get(RETENTION_ENV)
    if not raw:
        return DEFAULT_RETENTION_S
    seconds = retention_seconds(timedelta(days=int(raw)))
    assert seconds is not None
    return seconds


def retention_class_days(created_at_ms: int, expires_at_ms: int) -> int:
    """The S3 retention class of a run's payloads: S3 counts from the object's creation.

    A payload is written at or after the run's start, so expiring it ``class`` days after its
    creation keeps it at least until the run's items expire.
    """
    needed_days = -(-(expires_at_ms - created_at_ms) // (DAY_S * 1000))
    for days in RETENTION_CLASSES_DAYS:
        if days >= needed_days:
            return days
    return RETENTION_CLASSES_DAYS[-1]


def written_at_ms(
    entries: Sequence[Entry], effect: EffectChange | None, waits: Sequence[WaitChange]
) -> int | None:
    """The time a write was made at, by its writer's clock (None if it writes nothing)."""
    times = [entry.recorded_at_ms for entry in entries]
    if effect is not None:
        times.append(effect.record.updated_at_ms)
    times += [wait.record.updated_at_ms for wait in waits]
    return max(times, default=None)


def late_stamp_due(current_due_ms: int | None, written_ms: int | None) -> int | None:
    """When a finished run written to at ``written_ms`` is stamped again; None: no change.

    One pass ``LATE_WRITE_GRACE_MS`` after the write covers it and anything landing with it,
    so the run's due time moves there unless it is due later already (then that pass does).

    >>> late_stamp_due(None, 5_000)
    3605000
    >>> late_stamp_due(9_000_000, 5_000) is None
    True
    """
    if written_ms is None:
        return None
    due = written_ms + LATE_WRITE_GRACE_MS
    return due if current_due_ms is None or current_due_ms < due else None
