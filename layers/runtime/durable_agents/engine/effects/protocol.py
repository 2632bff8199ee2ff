"""The side-effect protocol: PREPARE → EXECUTE → COMMIT, and recovery of PREPARED calls.

Shared by ``ctx.tool`` (the StepRunner) and the reconciler, so both recover a call the same
way. Every transition is a conditional write on the side-effect record, so two recoverers (a
StepRunner and a reconciler, or two reconcilers) never act on the same call twice.

Recovery of a PREPARED call whose holder is gone (MISSION §9):

1. ``lookup`` says it happened → COMMIT what was found; never execute again.
2. ``lookup`` says it certainly did not, or the tool is ``idempotent`` → EXECUTE again with the
   identical stored request and key.
3. Unclear, not idempotent, ``reversible`` → ``compensate``, then EXECUTE again (the
   compensation is claimed and recorded once: ``side_effects.compensation``).
4. Unclear, not idempotent, irreversible → NEEDS_REVIEW: the run pauses for a person.

A person's ``retry`` grants the one attempt whose claim consumes it. ``Tool.max_attempts``
counts executions whose failure was observed; holders that died are counted against the crash
budget instead (``durable_agents.engine.crash_budget``), which pauses the run, never fails it.

The request is always rebuilt from the stored canonical JSON — never from the model again.
"""

from __future__ import annotations

from typing import Any

from durable_agents.core.credentials import CredentialMintError
from durable_agents.core.models import EffectChange, EffectStatus, SideEffectRecord
from durable_agents.core.serde import canonical_json
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.core.tracebacks import recorded_traceback
from durable_agents.engine import crash_budget
from durable_agents.engine.effects import compensation
from durable_agents.engine.effects.records import (
    NOTHING_SENT,
    Settled,
    claim_note,
    failures,
    idempotency_key,
    interrupted_since_redrive,
    operation_name,
    released,
)
from durable_agents.engine.effects.writes import UNCLEAR_BACKOFF, EffectWrites
from durable_agents.tools import (
    Found,
    NotFound,
    Tool,
    ToolGaveUpError,
    ToolRejectedError,
    ToolResult,
    Unknown,
)

__all__ = ["UNCLEAR_BACKOFF", "Settled", "SideEffectProtocol", "idempotency_key", "operation_name"]

_PREPARED = frozenset({EffectStatus.PREPARED})


class SideEffectProtocol(EffectWrites):
    """Executes, commits and recovers tool calls against the journal.

    Args:
        store: The journal.
        clock: The time source.
        lease_ms: How long a holder may execute before others treat it as gone.
        hooks: Crash-injection points (tests).
        credentials: Mints short-lived credentials per call (never recorded).
    """

    # -- PREPARE -----------------------------------------------------------------------------

    def prepare(
        self,
        run_id: str,
        position: str,
        operation_id: str,
        tool: Tool[Any, Any],
        request: Any,
        *,
        tenant: str = DEFAULT_TENANT,
    ) -> SideEffectRecord:
        """Records the canonical request and key before anything executes (``tenant``'s run).

        Raises:
            EffectConflictError: If the call is already prepared (another invocation won).
            PayloadError: If the request cannot be recorded (for example it holds a secret).
        """
        record = self.new_record(run_id, position, operation_id, tool, request, tenant=tenant)
        self.store.commit(run_id, [], None, EffectChange(record))
        return record

    def new_record(
        self,
        run_id: str,
        position: str,
        operation_id: str,
        tool: Tool[Any, Any],
        request: Any,
        *,
        tenant: str = DEFAULT_TENANT,
    ) -> SideEffectRecord:
        """The PREPARED record of a new call (not written): its canonical request and key.

        Raises:
            PayloadError: If the request cannot be recorded (for example it holds a secret).
        """
        now = self.clock.now_ms()
        model = tool.request_model.model_validate(request)
        lease = now + self.lease_ms
        return SideEffectRecord(
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
            tenant=tenant,
        )

    def claim(self, record: SideEffectRecord, tool: Tool[Any, Any]) -> SideEffectRecord:
        """Takes over a PREPARED call whose holder is gone (the next attempt).

        The claim counts a holder that died holding the call (``interrupted``) and consumes a
        person's ``retry`` grant for its own attempt, in the same conditional write.

        Raises:
            EffectConflictError: If someone else took it over or settled it first.
        """
        now = self.clock.now_ms()
        lease = now + self.lease_ms
        # When could the previous holder last have sent the request? If it released the call
        # itself (an unclear outcome), at that release — or never, if it only looked up and
        # chose to wait. If it died silently, at any moment until its lease ended.
        note = record.note or {}
        if released(record):
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
            note=claim_note(record),
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
        try:
            call = self.call(tool, record)
        except CredentialMintError as exc:
            return self.credentials_failed(tool, record, exc)
        self.hooks.before_execute(record.operation_id, record.attempt)
        try:
            outcome = tool.fn(request, call)
        except ToolRejectedError as exc:
            return self._commit_error(record, exc, how="rejected")
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            return self._retry_later(record, reason, story=recorded_traceback(exc))
        self.hooks.after_execute(record.operation_id, record.attempt)
        if isinstance(outcome, ToolResult):
            return self._commit_result(
                tool, record, outcome.value, outcome.external_id, how="executed"
            )
        return self._commit_result(tool, record, outcome, None, how="executed")

    # -- recovery ----------------------------------------------------------------------------

    def refuse_other_schema(self, tool: Tool[Any, Any], record: SideEffectRecord) -> Settled | None:
        """Parks a call prepared under another schema version of its tool for a person.

        The stored request was validated by the tool as it was then; code that may read it
        differently ("500 cents" read as euros) never executes or undoes it on its own.

        Returns:
            The review outcome, or None if the versions match (recover as usual).
        """
        if record.tool_schema_version == tool.schema_version:
            return None
        reason = (
            f"prepared with tool {record.tool!r} schema version {record.tool_schema_version!r}, "
            f"but schema version {tool.schema_version!r} is deployed: the stored request is not "
            "executed by code that may read it differently"
        )
        return self.needs_review(tool, record, reason)

    def recover(self, tool: Tool[Any, Any], record: SideEffectRecord) -> Settled:
        """Settles a PREPARED call this holder has just claimed (see the module docstring)."""
        interrupted = interrupted_since_redrive(record)
        if crash_budget.exceeded(interrupted):
            return self.pause_for_crashes(record, record, interrupted)
        note = record.note or {}
        if note.get("retry_attempt") == record.attempt:
            # A person confirmed it did not happen, and granted this attempt (and only this
            # one, recorded by its claim): same request, same key, no lookup.
            return self.execute(tool, record)
        if note.get(NOTHING_SENT):
            # Every earlier attempt was released before calling the tool (its credentials could
            # not be minted): nothing to look up or undo.
            return self.execute(tool, record)
        if note.get("compensating") is not None:
            # A compensation was claimed and never recorded: settle that before anything else
            # (a lookup would see the state half undone).
            return compensation.compensate_then_execute(self, tool, record, self.execute)
        request = tool.request_model.model_validate_json(record.canonical_request)
        try:
            call = self.call(tool, record)
        except CredentialMintError as exc:
            return self.credentials_failed(tool, record, exc)
        verdict: Any = Unknown("the tool declares no lookup")
        lookup_failed: tuple[str, str | None] | None = None
        if tool.lookup is not None:
            try:
                verdict = tool.lookup(request, call)
            except Exception as exc:
                lookup_failed = (
                    f"lookup failed: {type(exc).__name__}: {exc}",
                    recorded_traceback(exc),
                )
                verdict = Unknown(lookup_failed[0])
        if isinstance(verdict, Found):
            return self._commit_result(
                tool, record, verdict.value, verdict.external_id, how="found"
            )
        # Only executions that ran and failed visibly use up attempts; crashes do not.
        failed = failures(record)
        exhausted = failed >= tool.max_attempts
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
                gave_up = ToolGaveUpError(record.operation_id, tool.name, failed)
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
            return compensation.compensate_then_execute(self, tool, record, self.execute)
        if exhausted:
            reason = f"{reason}; {failed} of {tool.max_attempts} attempts failed"
        return self.needs_review(
            tool,
            record,
            f"outcome unknown and the call is not idempotent, not reversible: {reason}",
            unclear=lookup_failed,
        )

    def abandon(self, tool: Tool[Any, Any], record: SideEffectRecord) -> Settled:
        """Finishes a call a person abandoned: undo it once if the tool can, then fail it typed.

        See ``durable_agents.engine.effects.compensation``: the compensation is claimed, leased
        and recorded once; ``held`` means another delivery is compensating.
        """
        return compensation.abandon(self, tool, record)
