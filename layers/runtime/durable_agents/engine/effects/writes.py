"""The side-effect protocol's writes: each one conditional on the record as it was read.

``SideEffectProtocol`` (the decisions: PREPARE, claim, EXECUTE, recovery) builds on these;
``side_effects.compensation`` uses them too. A write that finds the record (or the run)
changed returns ``False`` / ``Settled("lost_race")``: another holder acted first, and acts
once. Storage failures propagate as ``InfrastructureError``.
"""

from __future__ import annotations

from typing import Any

from durable_agents.core.clock import Clock
from durable_agents.core.credentials import CallScope, CredentialMintError, CredentialProvider
from durable_agents.core.models import (
    ACTIVE_STATUSES,
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
from durable_agents.core.serde import encode, error_info
from durable_agents.engine import crash_budget
from durable_agents.engine.effects.records import (
    NEVER_MS,
    NOTHING_SENT,
    RERUN_ORIGINAL,
    Settled,
    failed_note,
    failures,
    operation_name,
    release_note,
    review_note,
    with_unclear,
)
from durable_agents.engine.invocation import NO_HOOKS, InvocationHooks
from durable_agents.engine.ports import InvocationStore
from durable_agents.errors import (
    EffectConflictError,
    EntryConflictError,
    PayloadError,
    RunStateConflictError,
)
from durable_agents.retry import RetryPolicy
from durable_agents.tools import Tool, ToolCall

ACTIVE = ACTIVE_STATUSES  # BUDGET_EXCEEDED too: its code runs again (ADR 0030)
# Unclear outcomes are looked at again after a short, growing pause (the provider may still be
# processing the call); the delay is recorded on the record and the run header.
UNCLEAR_BACKOFF = RetryPolicy(
    max_attempts=100, initial_delay_seconds=1, backoff_rate=2, max_delay_seconds=60, jitter=0
)


class EffectWrites:
    """The conditional writes of the side-effect protocol, against one journal.

    Args:
        store: The journal.
        clock: The time source.
        lease_ms: How long a holder may execute before others treat it as gone.
        hooks: Crash-injection points (tests).
        credentials: Mints short-lived credentials per call (never recorded).
    """

    def __init__(
        self,
        store: InvocationStore,
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

    def needs_review(
        self,
        tool: Tool[Any, Any],
        record: SideEffectRecord,
        reason: str,
        *,
        unclear: tuple[str, str | None] | None = None,
        original: SideEffectRecord | None = None,
        create: bool = False,
    ) -> Settled:
        """Parks the call for a person and pauses the run (one transaction).

        Who may decide is frozen into the record now — ``tool.reviewers`` of the code parking
        it — so that a redeploy before the decision cannot change it (``review.reviewers_of``).

        Args:
            tool: The tool as deployed in the parking process.
            record: The record as read (the write's condition).
            reason: Why a person has to decide.
            unclear: The exception that left the outcome unknown in this look (a failed
                lookup): its type and message, and its traceback, kept for the reviewer.
            original: For a rerun, the call of an earlier run in its chain the review is
                about (``engine.reruns``): named in the note, with its request and result.
            create: ``record`` is a new call's (``new_record``), not written yet: it is
                written parked, in the same transaction as the pause, certainly unsent.
        """
        now = self.clock.now_ms()
        note = review_note(record, reason, tool.reviewers)
        if unclear is not None:
            note = with_unclear(note, *unclear)
        if original is not None:
            note[RERUN_ORIGINAL] = {
                "run_id": original.run_id,
                "operation_id": original.operation_id,
                "status": original.status.value,
                "canonical_request": original.canonical_request,
                "result": original.result,
                "external_id": original.external_id,
            }
        parked = record.replace(status=EffectStatus.NEEDS_REVIEW, updated_at_ms=now, note=note)
        pause = RunChange(
            expected=frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED, RunStatus.PAUSED}),
            status=RunStatus.PAUSED,
            updated_at_ms=now,
            error=ErrorInfo(type="NeedsReview", message=f"{record.operation_id}: {reason}"),
            wake_at_ms=None,
            waiting_on={"kind": "review", "op_id": record.operation_id, "tool": record.tool},
        )
        if create:
            parked = parked.replace(note={**note, NOTHING_SENT: True})
            try:
                self.store.commit(record.run_id, [], pause, EffectChange(parked))
            except (EffectConflictError, RunStateConflictError):
                return Settled("lost_race")
        elif not self.write(record, [], parked, pause):
            return Settled("lost_race")
        return Settled("review", record=parked)

    def pause_for_crashes(
        self, paused: SideEffectRecord, before: SideEffectRecord, interrupted: int
    ) -> Settled:
        """Pauses the run because holders keep dying inside this call (the crash budget).

        The call is released (a redrive continues at once, with a fresh budget) and kept out
        of the reconciler's index: while paused, nobody takes it over automatically.

        Args:
            paused: The record to write (``before`` with any note changes of the caller).
            before: The record as read (the write's condition).
            interrupted: The interruptions since the last redrive.
        """
        now = self.clock.now_ms()
        note = release_note(paused, executed=False)
        note["crash_budget_base"] = note.get("interrupted", 0)
        parked = paused.replace(
            updated_at_ms=now, lease_expires_at_ms=now, stale_at_ms=NEVER_MS, note=note
        )
        pause = RunChange(
            expected=ACTIVE,
            status=RunStatus.PAUSED,
            updated_at_ms=now,
            error=crash_budget.pause_error(before.operation_id, interrupted),
            wake_at_ms=None,
            waiting_on=crash_budget.waiting_on(before.operation_id, interrupted),
        )
        # The run may not be active (paused for something else, while the reconciler recovers
        # the call): park the call alone then, so that nobody takes it over before a redrive.
        if not (self.write(before, [], parked, pause) or self.write(before, [], parked, None)):
            return Settled("lost_race")
        return Settled("paused", record=parked)

    # -- writes ------------------------------------------------------------------------------

    def call(self, tool: Tool[Any, Any], record: SideEffectRecord) -> ToolCall:
        """What the tool receives for this attempt (credentials minted now, never recorded).

        Raises:
            CredentialMintError: If a credential could not be minted (the tool is not called).
        """
        scope = CallScope(tool.name, record.run_id, record.operation_id, record.attempt)
        try:
            creds = self.credentials.credentials_for(tool.name) if self.credentials else {}
            for source in tool.credentials:
                creds = {**creds, **source.mint(scope)}
        except Exception as exc:
            raise CredentialMintError(tool.name, f"{type(exc).__name__}: {exc}") from exc
        return ToolCall(record.operation_id, record.idempotency_key, record.attempt, creds)

    def credentials_failed(
        self, tool: Tool[Any, Any], record: SideEffectRecord, exc: CredentialMintError
    ) -> Settled:
        """Releases the call unexecuted after its credentials could not be minted.

        Nothing was sent, so the next attempt's recovery does not have to wonder about this
        one; but the failure counts towards ``max_attempts`` (a missing role or secret would
        otherwise be retried forever), and is shown on the record and the run header. Once
        they are used up the call fails with the ``CredentialMintError`` if no attempt ever
        called the tool (``nothing_sent``), otherwise a person decides.
        """
        # The first attempt, or every one before it, was released unsent: nothing happened.
        nothing_sent = record.attempt == 1 or bool((record.note or {}).get(NOTHING_SENT))
        if failures(record) + 1 >= tool.max_attempts:
            if nothing_sent:  # certain: the call fails, typed, and the agent can handle it
                return self._commit_error(record, exc, how="gave_up")
            return self.needs_review(tool, record, str(exc))
        released = release_note(record, executed=False, failures=failures(record) + 1)
        note = with_unclear(released, str(exc), None)  # the reason says it all: no story
        if nothing_sent:
            note[NOTHING_SENT] = True
        return self._retry_later(record, str(exc), executed=False, note=note)

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
            return self.needs_review(tool, record, f"result cannot be recorded: {exc}")
        now = self.clock.now_ms()
        entry = self.entry(
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
            written = self.write(record, [entry], done, self.resume())
        except PayloadError as exc:  # too large for every configured store
            return self.needs_review(tool, record, f"result cannot be recorded: {exc}")
        if not written:
            return Settled("lost_race")
        self.hooks.after_record(record.operation_id)
        return Settled(how, entry=entry, record=done)

    def resume(self) -> RunChange | None:
        """The header change that wakes a SUSPENDED run with a commit (if ``resume_run``)."""
        if not self.resume_run:
            return None
        return RunChange(
            expected=ACTIVE,
            status=RunStatus.RUNNING,
            updated_at_ms=self.clock.now_ms(),
            wake_at_ms=None,
            waiting_on=None,
        )

    def _commit_error(self, record: SideEffectRecord, exc: Exception, *, how: str) -> Settled:
        now = self.clock.now_ms()
        entry = self.entry(record, EntryType.FAILED, error=error_info(exc), meta={"via": how})
        done = record.replace(
            status=EffectStatus.COMMITTED,
            updated_at_ms=now,
            note={"outcome": how, "error": str(exc)},
        )
        if not self.write(record, [entry], done, self.resume()):
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
        note: dict[str, Any] | None = None,
        story: str | None = None,
    ) -> Settled:
        """Releases the call for a later look, and suspends the run until then.

        Args:
            record: The record as read (the write's condition).
            reason: Why the outcome is unknown (an exception's type and message, or why the
                look chose to wait).
            not_before_ms: Not looked at again before this time.
            executed: Whether this holder called the tool (a failure that counts).
            note: The note to write instead of the one made from the above.
            story: The traceback of the exception behind ``reason``, if there was one.
        """
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
            # An execution that ran and failed is one of ``max_attempts``; a look that chose
            # to wait is not.
            note=note
            or (
                failed_note(record, reason, story)
                if executed
                else with_unclear(release_note(record, executed=False), reason, story)
            ),
        )
        suspend = RunChange(
            expected=ACTIVE,
            status=RunStatus.SUSPENDED,
            updated_at_ms=now,
            wake_at_ms=due,
            waiting_on={"kind": "tool-recovery", "op_id": record.operation_id, "until_ms": due},
        )
        if not self.write(record, [], released, suspend):
            return Settled("lost_race")
        return Settled("retry_later", due_ms=due, record=released)

    def write(
        self,
        before: SideEffectRecord,
        entries: list[Entry],
        after: SideEffectRecord,
        change: RunChange | None,
    ) -> bool:
        """Writes ``after`` if the record is still as ``before`` (status and attempt).

        Returns:
            False if another holder changed the record (or the run) first; storage failures
            propagate as ``InfrastructureError``.
        """
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

    def entry(self, record: SideEffectRecord, type_: EntryType, **fields: Any) -> Entry:
        """A journal entry of this call's operation (its result or error)."""
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
