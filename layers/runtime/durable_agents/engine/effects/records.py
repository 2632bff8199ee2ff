"""The side-effect record's bookkeeping: keys, protocol outcomes, and what ``note`` counts.

Everything recovery decides from (who released a call, how many executions really failed, how
often a holder died, which attempt a person's ``retry`` belongs to, which compensation is in
flight) is stored in the record's ``note`` and changes only with the record's own conditional
writes. Keeping it on the record — never only in a holder's memory — is what makes a grant or a
claim count exactly once across crashes. The keys:

``released_by_attempt``, ``executed``
    The holder of that attempt released the call itself (an unclear outcome, a lookup that
    waits, a crash-budget pause, a review decision), and whether it had executed.
``failures``
    Executions that ran and whose failure was observed (an exception other than
    ``ToolRejectedError``): what ``Tool.max_attempts`` counts.
``nothing_sent``
    Every attempt so far was released before calling the tool (its credentials could not be
    minted): the call certainly did not happen. Dropped by any release that executed and by
    the claim after a holder that died (it may have sent).
``interrupted``, ``crash_budget_base``
    Claims taken over from a holder that died without releasing the call, and their count at
    the last crash-budget pause (``durable_agents.engine.crash_budget``).
``retry_granted``, ``retry_attempt``
    A person decided ``retry``; the next claim consumes the grant by recording its own attempt.
    Only that attempt executes without a lookup or a review.
``unclear``, ``unclear_traceback``
    Why the last look at the call left its outcome unknown (the exception an execution or a
    lookup raised, or why it chose to wait), and that exception's traceback (scrubbed and
    bounded, ``durable_agents.core.tracebacks``): what a reviewer reads to decide. Shown while
    the call is unsettled (``unclear_outcome``); kept, as history, once it settles.
``rerun_original``
    For a rerun's call parked because an earlier run of its chain made the same tool call
    with another request (or has not settled it): that call (run, operation, status, request,
    result), for the reviewer to compare (``durable_agents.engine.reruns``).
``reused_from``
    A rerun's call that reused an earlier run's result instead of executing: which one.
``frozen_reviewers``, ``reviewers_unknown``
    Who may decide the call in review, frozen when it was parked (its tool's ``reviewers``;
    empty: ``REVIEW_OPERATORS``), so that a redeploy meanwhile changes nothing; and why nobody's
    reviewers were known then (the parking process did not have the tool). A review record
    without ``frozen_reviewers`` was parked before they were frozen (``review.reviewers_of``).
``compensations``, ``compensating``, ``repeat_compensation``
    The highest compensation number handed out; the compensation claimed and not yet recorded
    (``{"attempt", "number"}``); and, after an ``abandon`` decision on an interrupted one, the
    number to compensate again under (same compensation key).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from durable_agents.core.models import EffectStatus, Entry, SideEffectRecord

# paused for its crash budget waits for a person's redrive, not for the next sweep.
NEVER_MS = 9_999_999_999_999
_DECISION_KEYS = (
    "decision",
    "decided_by",
    "decided_at",
    "comment",
    "via",
    "reviewers",
    "reviewers_from",
)
FROZEN_REVIEWERS = "frozen_reviewers"
NOTHING_SENT = "nothing_sent"
REVIEWERS_UNKNOWN = "reviewers_unknown"
UNCLEAR = "unclear"
RERUN_ORIGINAL = "rerun_original"
REUSED_FROM = "reused_from"
UNCLEAR_TRACEBACK = "unclear_traceback"
_UNSETTLED = frozenset({EffectStatus.PREPARED, EffectStatus.NEEDS_REVIEW})


def idempotency_key(operation_id: str) -> str:
    """The key sent to providers: the operation id itself, or its hash if it is too long.

    Derived only from the run and the position, so it is the same on every attempt, after every
    crash and in every recovery — never from anything a model produced.
    """
    if len(operation_id) <= 200:
        return operation_id
    return "da-" + hashlib.sha256(operation_id.encode()).hexdigest()


def compensation_key(record: SideEffectRecord, number: int) -> str:
    """The key of the ``number``-th compensation of a call: stable when it is repeated."""
    return f"{record.idempotency_key}:compensate:{number}"


def operation_name(operation_id: str) -> str:
    """The operation name inside an operation id (``<run_id>:<name>:<n>``)."""
    return operation_id.rsplit("/", 1)[-1].rsplit(":", 2)[-2]


@dataclass(frozen=True, slots=True)
class Settled:
    """How one protocol step ended.

    Attributes:
        how: ``executed``, ``found`` (lookup), ``rejected``, ``gave_up``, ``abandoned``,
            ``retry_later`` (unclear; look again at ``due_ms``), ``review`` (a person decides),
            ``paused`` (the crash budget is spent: the run waits for a redrive), ``held``
            (another holder is compensating until ``due_ms``), ``lost_race`` (another holder
            changed the record first).
        entry: The recorded result entry, if the call is settled.
        due_ms: For ``retry_later`` and ``held``: when to look again.
        record: The record as last written.
    """

    how: str
    entry: Entry | None = None
    due_ms: int | None = None
    record: SideEffectRecord | None = None


def released(record: SideEffectRecord) -> bool:
    """Whether the last holder released the call itself (rather than dying while holding it)."""
    return (record.note or {}).get("released_by_attempt") == record.attempt


def failures(record: SideEffectRecord) -> int:
    """Executions that ran and whose failure was observed (what ``max_attempts`` counts)."""
    return int((record.note or {}).get("failures", 0))


def interrupted_since_redrive(record: SideEffectRecord) -> int:
    """Holders that died holding the call, since the last crash-budget pause."""
    note = record.note or {}
    return int(note.get("interrupted", 0)) - int(note.get("crash_budget_base", 0))


def claim_note(record: SideEffectRecord) -> dict[str, Any]:
    """The note of the next attempt's claim: counts a dead holder, consumes a retry grant."""
    note = dict(record.note or {})
    if not released(record):
        note["interrupted"] = int(note.get("interrupted", 0)) + 1
        note.pop(NOTHING_SENT, None)  # the dead holder may have called the tool
    if note.pop("retry_granted", False):
        # The grant belongs to this claim's attempt and to no later one: a crash after it
        # executes leaves an unclear outcome that goes through lookup or review again.
        note["retry_attempt"] = record.attempt + 1
    return note


def release_note(record: SideEffectRecord, *, executed: bool, **extra: Any) -> dict[str, Any]:
    """The note of a holder releasing the call (the next claim is then not an interruption)."""
    note = {**(record.note or {}), **extra}
    note["released_by_attempt"] = record.attempt
    note["executed"] = executed
    if executed:
        note.pop(NOTHING_SENT, None)
    if note.get("retry_attempt") == record.attempt and not executed:
        note["retry_granted"] = True  # released before using the grant: keep it
    return note


def failed_note(record: SideEffectRecord, reason: str, story: str | None) -> dict[str, Any]:
    """The note after an execution that ran and failed unclearly (one more failure).

    Args:
        record: The record as read.
        reason: The exception's type and message.
        story: Its recorded traceback (``tracebacks.recorded_traceback``), if any.
    """
    note = release_note(record, executed=True, failures=failures(record) + 1)
    return with_unclear(note, reason, story)


def with_unclear(note: dict[str, Any], reason: str, story: str | None) -> dict[str, Any]:
    """``note`` saying why the outcome is unknown now (an earlier look's story is replaced)."""
    out = {**note, UNCLEAR: reason}
    out.pop(UNCLEAR_TRACEBACK, None)
    if story is not None:
        out[UNCLEAR_TRACEBACK] = story
    return out


def why(note: Any) -> str:
    """A record's note in one line for a person: why it was parked, or why it is unclear.

    Args:
        note: A record's ``note`` (a mapping; any other value is shown as its text).

    Returns:
        The review's reason, else the last unclear look's, else ``""``.
    """
    if not isinstance(note, Mapping):
        return "" if note is None else str(note)
    for key in ("reason", UNCLEAR):
        if isinstance(note.get(key), str):
            return str(note[key])
    return ""


def unclear_outcome(record: SideEffectRecord) -> dict[str, Any] | None:
    """Why an unsettled call's outcome is unknown: ``{"reason", "traceback"}``, or None.

    None once the call has settled (its earlier unclear looks stay in ``note`` as history),
    and for a call nobody has found unclear (a holder died silently: no exception to tell).
    """
    note = record.note or {}
    reason = note.get(UNCLEAR)
    if record.status not in _UNSETTLED or not isinstance(reason, str):
        return None
    story = note.get(UNCLEAR_TRACEBACK)
    return {"reason": reason, "traceback": story if isinstance(story, str) else None}


def review_note(
    record: SideEffectRecord,
    reason: str,
    reviewers: Sequence[str],
    *,
    unknown: str | None = None,
) -> dict[str, Any]:
    """The note of a call going (back) to review: an earlier decision becomes history.

    Args:
        record: The record as read.
        reason: Why a person has to decide.
        reviewers: Who may decide, frozen now: the tool's declared ``reviewers`` in the code
            parking the call (empty: only ``REVIEW_OPERATORS``).
        unknown: Why no reviewers could be read (the parking process lacks the tool), if so.
    """
    note = dict(record.note or {})
    earlier = {key: note.pop(key) for key in _DECISION_KEYS if key in note}
    if earlier:
        note["earlier_decisions"] = [*note.get("earlier_decisions", []), earlier]
    note["reason"] = reason
    note[FROZEN_REVIEWERS] = list(reviewers)
    note.pop(REVIEWERS_UNKNOWN, None)
    if unknown is not None:
        note[REVIEWERS_UNKNOWN] = unknown
    return note


def frozen_reviewers(record: SideEffectRecord) -> tuple[str, ...] | None:
    """The reviewer patterns frozen into ``record`` when it was parked for review.

    Returns:
        The patterns (empty: the tool declared none, so ``REVIEW_OPERATORS`` decide), or None
        for a record parked before reviewers were frozen (or whose list is not one).
    """
    value = (record.note or {}).get(FROZEN_REVIEWERS)
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        return None
    return tuple(value)


def decided_note(record: SideEffectRecord, decision: str, **fields: Any) -> dict[str, Any]:
    """The note after a person's decision (``committed``, ``retry`` or ``abandon``).

    A compensation that was interrupted before the review is settled by the decision: after
    ``abandon`` it is compensated again under the same number (so the same compensation key);
    after anything else it is moot.
    """
    note = {**(record.note or {}), "decision": decision, **fields}
    pending = note.pop("compensating", None)
    if decision == "abandon" and pending is not None:
        note["repeat_compensation"] = pending["number"]
    if decision == "retry":
        # Released by the decision, nothing executed since: the next claim takes the grant and
        # is not counted as an interruption.
        note.update(retry_granted=True, released_by_attempt=record.attempt, executed=False)
    return note


def grant_retry(record: SideEffectRecord, note: dict[str, Any], now_ms: int) -> SideEffectRecord:
    """The record after a ``retry`` decision: PREPARED, its lease over, one attempt granted."""
    return record.replace(
        status=EffectStatus.PREPARED,
        updated_at_ms=now_ms,
        note=note,
        lease_expires_at_ms=now_ms,
        stale_at_ms=now_ms,
    )
