"""The side-effect protocol: PREPARE → EXECUTE → COMMIT, and recovery of PREPARED calls.

Shared by ``ctx.tool`` (the StepRunner) and the reconciler, so both recover a call the same
way. Every transition is a conditional write on the side-effect record, so two recoverers (a
StepRunner and a reconciler, or two reconcilers) never act on the same call twice.

Recovery of a PREPARED call whose holder is gone (MISSION §9):

1. ``lookup`` says it happened → COMMIT what was found; never execute again.
2. ``lookup`` says it certainly did not, or the tool is ``idempotent`` → EXECUTE again with the
   identical stored request and key.
3. Unclear, not idempotent, ``reversible`` → ``compensate``, then EXECUTE again.
4. Unclear, not idempotent, irreversible → NEEDS_REVIEW: the run pauses for a person.

The request is always rebuilt from the stored canonical JSON — never from the model again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from durable_agents.clock import Clock
from durable_agents.credentials import CredentialProvider
from durable_agents.errors import (
    EffectConflictError,
    EntryConflictError,
    PayloadError,
    RunStateConflictError,
)
from durable_agents.invocation import NO_HOOKS, InvocationHooks
from durable_agents.journal.store import JournalStore
from durable_agents.models import (
    EffectChange,
    EffectStatus,
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
    RunChange,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.retry import RetryPolicy
from durable_agents.serde import canonical_json, encode, error_info
from durable_agents.side_effects.tools import (
    Found,
    NotFound,
    Tool,
    ToolAbandonedError,
    ToolCall,
    ToolGaveUpError,
    ToolRejectedError,
    ToolResult,
    Unknown,
)

_ACTIVE = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED})
_PREPARED = frozenset({EffectStatus.PREPARED})
# Unclear outcomes are looked at again after a short, growing pause (the provider may still be
# processing the call); the delay is recorded on the record and the run header.
UNCLEAR_BACKOFF = RetryPolicy(
    max_attempts=100, initial_delay_seconds=1, backoff_rate=2, max_delay_seconds=60, jitter=0
)


def idempotency_key(operation_id: str) -> str:
    """The key sent to providers: the operation id itself, or its hash if it is too long.

    Derived only from the run and the position, so it is the same on every attempt, after every
    crash and in every recovery — never from anything a model produced.
    """
    if len(operation_id) <= 200:
        return operation_id
    return "da-" + hashlib.sha256(operation_id.encode()).hexdigest()


def operation_name(operation_id: str) -> str:
    """The operation name inside an operation id (``<run_id>:<name>:<n>``)."""
    return operation_id.rsplit("/", 1)[-1].rsplit(":", 2)[-2]


@dataclass(frozen=True, slots=True)
class Settled:
    """How one protocol step ended.

    Attributes:
        how: ``executed``, ``found`` (lookup), ``rejected``, ``gave_up``, ``abandoned``,
            ``retry_later`` (unclear; look again at ``due_ms``), ``review`` (a person decides),
            ``lost_race`` (another holder changed the record first).
        entry: The recorded result entry, if the call is settled.
        due_ms: For ``retry_later``: when to look again.
        record: The record as last written.
    """

    how: str
    entry: Entry | None = None
    due_ms: int | None = None
    record: SideEffectRecord | None = None


class SideEffectProtocol:
    """Executes, commits and recovers tool calls against the journal.

    Args:
        store: The journal.
        clock: The time source.
        lease_ms: How long a holder may execute before others treat it as gone.
        hooks: Crash-injection points (tests).
        credentials: Mints short-lived credentials per call (never recorded).
    """

    def __init__(
        self,
        store: JournalStore,
        clock: Clock,
        *,
        lease_ms: int,
        hooks: InvocationHooks = NO_HOOKS,
        credentials: CredentialProvider | None = None,
    ):
        self.store = store
        self.clock = clock
        self.lease_ms = lease_ms
        self.hooks = hooks
        self.credentials = credentials
        # Set by a caller that knows the run header says SUSPENDED (waiting on this call): the
        # commit then also wakes the run, in the same transaction.
        self.resume_run = False

    # -- PREPARE -----------------------------------------------------------------------------

    def prepare(
        self, run_id: str, position: str, operation_id: str, tool: Tool[Any, Any], request: Any
    ) -> SideEffectRecord:
        """Records the canonical request and key before anything executes.

        Raises:
            EffectConflictError: If the call is already prepared (another invocation won).
            PayloadError: If the request cannot be recorded (for example it holds a secret).
        """
        now = self.clock.now_ms()
        model = tool.request_model.model_validate(request)
        lease = now + self.lease_ms
        record = SideEffectRecord(
            run_id=run_id,
            position=position,
            operation_id=operation_id,
            tool=tool.name,
            tool_schema_version=tool.schema_version,
            canonical_request=canonical_json(model),
            idempotency_key=idempotency_key(operation_id),
            status=EffectStatus.PREPARED,
            attempt=1,
            prepared_at_ms=now,
            updated_at_ms=now,
            lease_expires_at_ms=lease,
            stale_at_ms=max(lease, now + int(tool.stale_after_seconds * 1000)),
        )
        self.store.commit(run_id, [], None, EffectChange(record))
        return record

    def claim(self, record: SideEffectRecord, tool: Tool[Any, Any]) -> SideEffectRecord:
        """Takes over a PREPARED call whose holder is gone (the next attempt).

        Raises:
            EffectConflictError: If someone else took it over or settled it first.
        """
        now = self.clock.now_ms()
        lease = now + self.lease_ms
        # When could the previous holder last have sent the request? If it released the call
        # itself (an unclear outcome), at that release — or never, if it only looked up and
        # chose to wait. If it died silently, at any moment until its lease ended.
        note = record.note or {}
        if note.get("released_by_attempt") == record.attempt:
            if note.get("executed") is False:
                last_attempt = record.last_attempt_at_ms or record.prepared_at_ms
            else:
                last_attempt = record.updated_at_ms
        else:
            last_attempt = min(now, record.lease_expires_at_ms)
        claimed = record.replace(
            attempt=record.attempt + 1,
            last_attempt_at_ms=last_attempt,
            updated_at_ms=now,
            lease_expires_at_ms=lease,
            stale_at_ms=max(lease, now + int(tool.stale_after_seconds * 1000)),
        )
        self.store.commit(record.run_id, [], None, EffectChange(claimed, _PREPARED, record.attempt))
        return claimed

    # -- EXECUTE + COMMIT --------------------------------------------------------------------

    def execute(self, tool: Tool[Any, Any], record: SideEffectRecord) -> Settled:
        """Calls the tool with the stored request and key, then commits the outcome.

        A ``ToolRejectedError`` is a definite refusal and is committed as the call's error. Any
        other exception is an unclear outcome: the record stays PREPARED and is looked at
        again later through recovery.
        """
        request = tool.request_model.model_validate_json(record.canonical_request)
        call = self._call(tool, record)
        self.hooks.before_execute(record.operation_id, record.attempt)
        try:
            outcome = tool.fn(request, call)
        except ToolRejectedError as exc:
            return self._commit_error(record, exc, how="rejected")
        except Exception as exc:
            return self._retry_later(record, f"{type(exc).__name__}: {exc}")
        self.hooks.after_execute(record.operation_id, record.attempt)
        if isinstance(outcome, ToolResult):
            return self._commit_result(
                tool, record, outcome.value, outcome.external_id, how="executed"
            )
        return self._commit_result(tool, record, outcome, None, how="executed")

    # -- recovery ----------------------------------------------------------------------------

    def recover(self, tool: Tool[Any, Any], record: SideEffectRecord) -> Settled:
        """Settles a PREPARED call this holder has just claimed (see the module docstring)."""
        note = dict(record.note or {})
        if note.pop("retry_pending", False):
            # A person confirmed it did not happen: same request, same key, once.
            return self.execute(tool, record.replace(note=note))
        request = tool.request_model.model_validate_json(record.canonical_request)
        call = self._call(tool, record)
        verdict: Any = Unknown("the tool declares no lookup")
        if tool.lookup is not None:
            try:
                verdict = tool.lookup(request, call)
            except Exception as exc:
                verdict = Unknown(f"lookup failed: {type(exc).__name__}: {exc}")
        if isinstance(verdict, Found):
            return self._commit_result(
                tool, record, verdict.value, verdict.external_id, how="found"
            )
        exhausted = record.attempt > tool.max_attempts
        settled_at = (record.last_attempt_at_ms or record.prepared_at_ms) + int(
            tool.stale_after_seconds * 1000
        )
        if isinstance(verdict, NotFound):
            if not tool.idempotent and self.clock.now_ms() < settled_at:
                # An earlier attempt may still be landing at the provider: "not found" is only
                # certain after the tool's settle time. Look again then.
                return self._retry_later(
                    record,
                    "not found yet; waiting for the settle time",
                    not_before_ms=settled_at,
                    executed=False,
                )
            if exhausted:
                gave_up = ToolGaveUpError(record.operation_id, tool.name, record.attempt - 1)
                return self._commit_error(record, gave_up, how="gave_up")
            return self.execute(tool, record)
        reason = verdict.reason if isinstance(verdict, Unknown) else "unknown"
        if tool.idempotent and not exhausted:
            return self.execute(tool, record)
        if tool.compensate is not None and not exhausted:
            if self.clock.now_ms() < settled_at:
                # Undoing now could miss an earlier attempt still landing at the provider.
                return self._retry_later(
                    record,
                    "waiting for the settle time to compensate",
                    not_before_ms=settled_at,
                    executed=False,
                )
            try:
                tool.compensate(request, call)
            except Exception as exc:
                return self.needs_review(record, f"compensation failed: {exc}")
            return self.execute(tool, record)
        if exhausted:
            reason = f"{reason}; {tool.max_attempts} attempts used"
        return self.needs_review(
            record, f"outcome unknown and the call is not idempotent, not reversible: {reason}"
        )

    def needs_review(self, record: SideEffectRecord, reason: str) -> Settled:
        """Parks the call for a person and pauses the run (one transaction)."""
        now = self.clock.now_ms()
        parked = record.replace(
            status=EffectStatus.NEEDS_REVIEW,
            updated_at_ms=now,
            note={**(record.note or {}), "reason": reason},
        )
        pause = RunChange(
            expected=frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED, RunStatus.PAUSED}),
            status=RunStatus.PAUSED,
            updated_at_ms=now,
            error=ErrorInfo(type="NeedsReview", message=f"{record.operation_id}: {reason}"),
            wake_at_ms=None,
            waiting_on={"kind": "review", "op_id": record.operation_id, "tool": record.tool},
        )
        if not self._write(record, [], parked, pause):
            return Settled("lost_race")
        return Settled("review", record=parked)

    def abandon(self, tool: Tool[Any, Any], record: SideEffectRecord) -> Settled:
        """Finishes a call a person abandoned: undo it if the tool can, then fail it typed."""
        note = dict(record.note or {})
        compensated = False
        if tool.compensate is not None and not note.get("compensated"):
            request = tool.request_model.model_validate_json(record.canonical_request)
            try:
                tool.compensate(request, self._call(tool, record))
            except Exception as exc:
                return self.needs_review(record, f"compensation after abandon failed: {exc}")
            compensated = True
        error = ToolAbandonedError(
            record.operation_id, tool.name, compensated, str(note.get("comment", ""))
        )
        entry = self._entry(
            record, EntryType.FAILED, error=error_info(error), meta={"via": "abandoned"}
        )
        done = record.replace(
            updated_at_ms=self.clock.now_ms(), note={**note, "compensated": compensated}
        )
        if not self._write(record, [entry], done, self._resume()):
            return Settled("lost_race")
        return Settled("abandoned", entry=entry, record=done)

    # -- writes ------------------------------------------------------------------------------

    def _call(self, tool: Tool[Any, Any], record: SideEffectRecord) -> ToolCall:
        creds = self.credentials.credentials_for(tool.name) if self.credentials else {}
        return ToolCall(record.operation_id, record.idempotency_key, record.attempt, creds)

    def _commit_result(
        self,
        tool: Tool[Any, Any],
        record: SideEffectRecord,
        value: Any,
        external_id: str | None,
        *,
        how: str,
    ) -> Settled:
        try:
            payload = encode(value, tool.result_type)
        except PayloadError as exc:
            # It happened, but its result cannot be recorded: do not guess, ask a person.
            return self.needs_review(record, f"result cannot be recorded: {exc}")
        now = self.clock.now_ms()
        entry = self._entry(
            record,
            EntryType.SUCCEEDED,
            value=payload,
            meta={"via": how, "external_id": external_id},
        )
        done = record.replace(
            status=EffectStatus.COMMITTED,
            updated_at_ms=now,
            result=payload,
            external_id=external_id,
        )
        try:
            written = self._write(record, [entry], done, self._resume())
        except PayloadError as exc:  # too large for every configured store
            return self.needs_review(record, f"result cannot be recorded: {exc}")
        if not written:
            return Settled("lost_race")
        self.hooks.after_record(record.operation_id)
        return Settled(how, entry=entry, record=done)

    def _resume(self) -> RunChange | None:
        if not self.resume_run:
            return None
        return RunChange(
            expected=_ACTIVE,
            status=RunStatus.RUNNING,
            updated_at_ms=self.clock.now_ms(),
            wake_at_ms=None,
            waiting_on=None,
        )

    def _commit_error(self, record: SideEffectRecord, exc: Exception, *, how: str) -> Settled:
        now = self.clock.now_ms()
        entry = self._entry(record, EntryType.FAILED, error=error_info(exc), meta={"via": how})
        done = record.replace(
            status=EffectStatus.COMMITTED,
            updated_at_ms=now,
            note={"outcome": how, "error": str(exc)},
        )
        if not self._write(record, [entry], done, self._resume()):
            return Settled("lost_race")
        self.hooks.after_record(record.operation_id)
        return Settled(how, entry=entry, record=done)

    def _retry_later(
        self,
        record: SideEffectRecord,
        reason: str,
        *,
        not_before_ms: int = 0,
        executed: bool = True,
    ) -> Settled:
        now = self.clock.now_ms()
        delay_ms = int(
            UNCLEAR_BACKOFF.delay_seconds(record.attempt, seed=record.operation_id) * 1000
        )
        due = max(now + delay_ms, not_before_ms)
        # Release the lease at ``due``: whoever looks next (this run's StepRunner or the
        # reconciler) claims the next attempt and goes through recovery.
        released = record.replace(
            updated_at_ms=now,
            lease_expires_at_ms=due,
            stale_at_ms=due,
            note={
                **(record.note or {}),
                "unclear": reason,
                "executed": executed,
                "released_by_attempt": record.attempt,
            },
        )
        suspend = RunChange(
            expected=_ACTIVE,
            status=RunStatus.SUSPENDED,
            updated_at_ms=now,
            wake_at_ms=due,
            waiting_on={"kind": "tool-recovery", "op_id": record.operation_id, "until_ms": due},
        )
        if not self._write(record, [], released, suspend):
            return Settled("lost_race")
        return Settled("retry_later", due_ms=due, record=released)

    def _write(
        self,
        before: SideEffectRecord,
        entries: list[Entry],
        after: SideEffectRecord,
        change: RunChange | None,
    ) -> bool:
        try:
            self.store.commit(
                before.run_id,
                entries,
                change,
                EffectChange(after, frozenset({before.status}), before.attempt),
            )
        except (EffectConflictError, EntryConflictError, RunStateConflictError):
            return False
        return True

    def _entry(self, record: SideEffectRecord, type_: EntryType, **fields: Any) -> Entry:
        return Entry(
            run_id=record.run_id,
            position=record.position,
            op_id=record.operation_id,
            kind=OpKind.TOOL,
            name=operation_name(record.operation_id),
            type=type_,
            attempt=record.attempt,
            recorded_at_ms=self.clock.now_ms(),
            **fields,
        )
