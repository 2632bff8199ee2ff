"""Human review of calls whose outcome recovery could not settle (NEEDS_REVIEW).

A person resolves a call once — the decision is a conditional write on the record, with who and
when — as ``committed`` (it did happen: here is the result/external id), ``retry`` (it did not:
execute again with the same request and key, one attempt) or ``abandon`` (give it up; the tool's
``compensate`` runs if it has one, and the agent receives ``ToolAbandonedError``).

Who may decide: the reviewers the tool declared (``@tool(reviewers=[...])``, patterns as for
approvers) *when the call was parked* — frozen into the record then (``frozen_reviewers``), so a
redeploy while the review waits (reviewers changed, the tool renamed or removed, or a deciding
process that does not import it) changes nothing. For a tool that declared none, only the
deployment's review operators (``REVIEW_OPERATORS``) — nobody until they are configured. A
record parked before reviewers were frozen is decided by ``REVIEW_OPERATORS`` only: the
registry of whatever code is deployed at decision time is never consulted. The decision records
who (``decided_by``), when (``decided_at``), how (``via``), the patterns it was checked against
(``reviewers``) and where they came from (``reviewers_from``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter, ValidationError

from durable_agents.core.clock import Clock, iso
from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    Entry,
    EntryType,
    OpKind,
    RunChange,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.core.principals import Principal, may_decide
from durable_agents.core.serde import encode
from durable_agents.engine.effects.records import (
    decided_note,
    frozen_reviewers,
    grant_retry,
    operation_name,
)
from durable_agents.errors import (
    DurableError,
    EffectConflictError,
    EffectNotFoundError,
    PayloadError,
    RunStateConflictError,
)
from durable_agents.journal.generation_keys import locate
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolRegistry


class Decision(StrEnum):
    """What a person decided about a call in review."""

    COMMITTED = "committed"
    RETRY = "retry"
    ABANDON = "abandon"


class ReviewAlreadyDecidedError(DurableError):
    """The call is not (or no longer) waiting for review; carries the current record."""

    def __init__(self, record: SideEffectRecord):
        self.record = record
        decided = (record.note or {}).get("decision")
        detail = (
            f"decided {decided!r} by {(record.note or {}).get('decided_by')}"
            if decided
            else f"status {record.status.value}"
        )
        super().__init__(f"{record.operation_id} is not waiting for review ({detail})")


class NotAReviewerError(DurableError):
    """The caller is authenticated but may not decide this call's review (403)."""

    recorded_fields = ("operation_id", "caller")

    def __init__(self, operation_id: str, caller: str, message: str):
        self.operation_id = operation_id
        self.caller = caller
        super().__init__(message)


class ReviewResultError(DurableError):
    """A ``committed`` decision came without a result, or with one the tool cannot accept."""


@dataclass(frozen=True, slots=True)
class ReviewRequest:
    """A person's decision."""

    decision: Decision
    decided_by: str
    comment: str = ""
    result: Any = None
    external_id: str | None = None
    via: str = ""


FROM_RECORD = "record"
"""``reviewers_from``: the tool's reviewers frozen into the record when it was parked."""
FROM_OPERATORS = "operators"
"""``reviewers_from``: the tool declared no reviewers when parked: ``REVIEW_OPERATORS``."""
FROM_OPERATORS_LEGACY = "operators (record predates frozen reviewers)"
"""``reviewers_from``: a record parked before reviewers were frozen: ``REVIEW_OPERATORS``."""


def reviewers_of(record: SideEffectRecord, operators: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """The patterns that may decide ``record``, and where they come from (``FROM_*``).

    The reviewers frozen into the record when it was parked; ``operators`` if that list is
    empty, or if the record predates frozen reviewers. Never the tool registry of the code
    deployed now: a redeploy during the review must not change who decides.
    """
    frozen = frozen_reviewers(record)
    if frozen:
        return frozen, FROM_RECORD
    # A record without the frozen list was parked by a release that read reviewers at decision
    # time; which reviewers it was parked under is unknown, so only the operators decide.
    return tuple(operators), FROM_OPERATORS if frozen is not None else FROM_OPERATORS_LEGACY


def authorize(
    record: SideEffectRecord, reviewer: Principal, operators: Sequence[str]
) -> tuple[tuple[str, ...], str]:
    """Checks that ``reviewer`` may decide ``record``; returns the patterns and their source.

    Raises:
        NotAReviewerError: If it matches none of them (or there are none).
    """
    allowed, source = reviewers_of(record, operators)
    if may_decide(reviewer, allowed):
        return allowed, source
    if source == FROM_RECORD:
        why = (
            f"it is not among the reviewers of tool {record.tool!r} (as declared when the call "
            "went to review)"
        )
    else:
        if source == FROM_OPERATORS_LEGACY:
            who = "the call was parked before reviewers were frozen into review records"
        else:
            who = f"tool {record.tool!r} declared no reviewers when the call went to review"
        if allowed:
            why = f"{who} and it is not one of REVIEW_OPERATORS"
        else:
            why = f"{who} and no REVIEW_OPERATORS are configured"
    caller = reviewer.display
    raise NotAReviewerError(
        record.operation_id, caller, f"{caller} may not decide {record.operation_id}: {why}"
    )


def resolve(
    store: JournalStore,
    tools: ToolRegistry,
    clock: Clock,
    operation_id: str,
    request: ReviewRequest,
    *,
    reviewer: Principal | None = None,
    operators: Sequence[str] = (),
) -> SideEffectRecord:
    """Records a person's decision once and sets the run going again.

    An edge taking decisions from callers passes ``reviewer`` (the authenticated caller) and
    ``operators``; without ``reviewer`` the decision is not authorized here (trusted code only).
    ``reviewer`` is checked against the reviewers frozen into the record (``reviewers_of``);
    ``tools`` only types a ``committed`` result (a tool missing from it takes the result as is).

    Returns:
        The record after the decision (publish ``Step Ready`` for its run next).

    Raises:
        EffectNotFoundError: If no such call exists.
        NotAReviewerError: If ``reviewer`` may not decide it.
        ReviewAlreadyDecidedError: If it is not in NEEDS_REVIEW (already decided, or never was).
        ReviewResultError: If a ``committed`` decision has no acceptable result.
    """
    run_id, position = locate(operation_id)
    record = store.get_effect(run_id, position)
    if record.operation_id != operation_id:
        raise EffectNotFoundError(operation_id)
    checked = None if reviewer is None else authorize(record, reviewer, operators)
    if record.status is not EffectStatus.NEEDS_REVIEW:
        raise ReviewAlreadyDecidedError(record)
    now = clock.now_ms()
    note = decided_note(
        record,
        request.decision.value,
        decided_by=request.decided_by,
        decided_at=iso(now),
        comment=request.comment,
        **({"via": request.via} if request.via else {}),
        **(
            {"reviewers": list(checked[0]), "reviewers_from": checked[1]}
            if checked is not None
            else {}
        ),
    )
    entries: list[Entry] = []
    if request.decision is Decision.COMMITTED:
        payload = _result_payload(tools, record, request.result)
        decided = record.replace(
            status=EffectStatus.COMMITTED,
            updated_at_ms=now,
            note=note,
            result=payload,
            external_id=request.external_id,
        )
        entries.append(
            Entry(
                run_id=run_id,
                position=position,
                op_id=operation_id,
                kind=OpKind.TOOL,
                name=operation_name(operation_id),
                type=EntryType.SUCCEEDED,
                attempt=record.attempt,
                value=payload,
                recorded_at_ms=now,
                meta={
                    "via": "review",
                    "decided_by": request.decided_by,
                    **({"decided_via": request.via} if request.via else {}),
                    "external_id": request.external_id,
                },
            )
        )
    elif request.decision is Decision.RETRY:
        # Back to PREPARED with the lease already expired: the next claim takes the grant for
        # its own attempt and executes it again with the stored request and key — once. If
        # that attempt's outcome is unclear too, the call comes back here.
        decided = grant_retry(record, note, now)
    else:
        decided = record.replace(status=EffectStatus.ABANDONED, updated_at_ms=now, note=note)
    resume = RunChange(
        expected=frozenset({RunStatus.PAUSED}),
        status=RunStatus.RUNNING,
        updated_at_ms=now,
        error=None,
        waiting_on=None,
    )
    change = EffectChange(decided, frozenset({EffectStatus.NEEDS_REVIEW}), record.attempt)
    try:
        try:
            store.commit(run_id, entries, resume, change)
        except RunStateConflictError:
            # The run is not paused (someone re-drove it): record the decision alone.
            store.commit(run_id, entries, None, change)
    except EffectConflictError as exc:
        raise ReviewAlreadyDecidedError(store.get_effect(run_id, position)) from exc
    return decided


def _result_payload(tools: ToolRegistry, record: SideEffectRecord, result: Any) -> str:
    if result is None:
        raise ReviewResultError("a 'committed' decision needs the result the person confirmed")
    tool = tools.get(record.tool)
    hint = tool.result_type if tool is not None else None
    try:
        value = TypeAdapter(hint).validate_python(result) if hint is not None else result
        return encode(value, hint)
    except (ValidationError, PayloadError) as exc:
        raise ReviewResultError(f"the result does not fit tool {record.tool!r}: {exc}") from exc
