"""JSON views of runs and their history, shared by the Api and the CLI."""

from __future__ import annotations

import json
from typing import Any

from durable_agents.core.clock import iso
from durable_agents.core.models import (
    Entry,
    EntryType,
    OpKind,
    RunHeader,
    RunSnapshot,
    SideEffectRecord,
)
from durable_agents.engine.effects.records import frozen_reviewers, unclear_outcome
from durable_agents.engine.time_limits import deadline_ms


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def run_view(header: RunHeader) -> dict[str, Any]:
    """The public view of a run: status, result or error, and what it is waiting on."""
    waiting = dict(header.waiting_on) if header.waiting_on else None
    if waiting and "until_ms" in waiting:
        waiting["until"] = iso(waiting["until_ms"])
    return {
        "run_id": header.run_id,
        "agent": header.agent,
        "status": header.status.value,
        "versions": header.versions,
        "input": _json(header.input),
        "result": _json(header.result),
        "error": header.error.to_dict() if header.error else None,
        "waiting_on": waiting,
        "wake_at": iso(header.wake_at_ms),
        "parent_run_id": header.parent_run_id,
        "tenant": header.tenant,
        "created_at": iso(header.created_at_ms),
        "updated_at": iso(header.updated_at_ms),
        # A request to stop it (mode, reason, who, when) and its time limit, if any.
        "cancel_requested": _stop_view(header.cancel_requested),
        "execution_timeout_ms": header.execution_timeout_ms,
        "execution_deadline": iso(deadline_ms(header)),
        # How many times it continued as new (ADR 0016); its history is per generation.
        "generation": header.generation,
        # A rerun's origin (durable_agents.engine.reruns): the run it re-runs, and from where.
        "rerun_of": (header.rerun or {}).get("of"),
        "rerun_from": (header.rerun or {}).get("from"),
        "rerun": header.rerun,
    }


def _stop_view(request: dict[str, Any] | None) -> dict[str, Any] | None:
    if not request:
        return None
    at = request.get("at_ms")
    return {**request, "at": iso(at) if isinstance(at, int) else None}


_BATCHES = (OpKind.MAP, OpKind.PARALLEL)
_RESULTS = (EntryType.SUCCEEDED, EntryType.FAILED)


def _branch_counts(value: str) -> tuple[int, int] | None:
    # Imported here: only a batch's result needs it (the views stay light to import).
    from durable_agents.engine.operations.batch_result import branch_counts  # noqa: PLC0415

    try:
        return branch_counts(json.loads(value))
    except ValueError:  # a value that is not JSON is no batch outcome
        return None


def entry_event(entry: Entry) -> dict[str, Any]:
    """One journal entry as a history event (``step_started``, ``wait_scheduled``, …)."""
    if entry.kind is OpKind.MIGRATION:  # not an operation: what a migration changed
        return {"event": "run_migrated", "op_id": entry.op_id, "kind": entry.kind.value,
                "name": entry.name, "at": iso(entry.recorded_at_ms),
                "migration": _json(entry.value)}  # fmt: skip
    event: dict[str, Any] = {
        "event": f"{entry.kind.value}_{entry.type.value}",
        "op_id": entry.op_id,
        "kind": entry.kind.value,
        "name": entry.name,
        "at": iso(entry.recorded_at_ms),
    }
    sub_kind = entry.sub_kind
    if sub_kind is not None:  # what a general kind's operation is (a wait_for_callback scope)
        event["sub_kind"] = sub_kind
    if entry.attempt:
        event["attempt"] = entry.attempt
    if entry.type is EntryType.SUCCEEDED and entry.value is not None:
        event["result"] = _json(entry.value)
    if entry.kind in _BATCHES and entry.type in _RESULTS and entry.value is not None:
        # A batch's failed branches, tolerated or not: a timeline marks the batch with them
        # (ADR 0024). Counted from the branch letters; a FAILED batch's value stays unshown.
        counts = _branch_counts(entry.value)
        if counts is not None:
            event["failed_branches"], event["total_branches"] = counts
    if entry.error is not None:
        event["error"] = entry.error.to_dict()
    if entry.due_at_ms is not None:
        event["due_at"] = iso(entry.due_at_ms)
    if entry.lease_expires_at_ms is not None:
        event["lease_expires_at"] = iso(entry.lease_expires_at_ms)
    return event


def history(snapshot: RunSnapshot) -> list[dict[str, Any]]:
    """The run's journal as events in program order, framed by start and finish."""
    header = snapshot.header
    events: list[dict[str, Any]] = [
        {
            "event": "run_started",
            "run_id": header.run_id,
            "agent": header.agent,
            "versions": header.versions,
            "input": _json(header.input),
            "at": iso(header.created_at_ms),
        }
    ]
    events += [entry_event(e) for e in snapshot.entries]
    events += [
        {"event": f"side_effect_{r.status.value.lower()}", **effect_view(r)}
        for r in snapshot.effects
    ]
    if header.status.terminal or header.status.value in ("PAUSED", "VERSION_UNAVAILABLE"):
        events.append(
            {
                "event": f"run_{header.status.value.lower()}",
                "result": _json(header.result),
                "error": header.error.to_dict() if header.error else None,
                "at": iso(header.updated_at_ms),
            }
        )
    return events


def _reviewers(record: SideEffectRecord) -> list[str] | None:
    frozen = frozen_reviewers(record)
    return None if frozen is None else list(frozen)


def effect_view(record: SideEffectRecord) -> dict[str, Any]:
    """The public view of a side-effect record (what a reviewer needs to decide)."""
    return {
        "operation_id": record.operation_id,
        "run_id": record.run_id,
        "tool": record.tool,
        "tool_schema_version": record.tool_schema_version,
        "status": record.status.value,
        "request": _json(record.canonical_request),
        "canonical_request": record.canonical_request,
        "idempotency_key": record.idempotency_key,
        "attempt": record.attempt,
        "external_id": record.external_id,
        "result": _json(record.result),
        "note": record.note,
        # Why an unsettled call's outcome is unknown, with the traceback of the exception
        # behind it (scrubbed, bounded): what a reviewer reads first. None once settled.
        "unclear": unclear_outcome(record),
        # Who may decide it: frozen when the call was parked (empty: REVIEW_OPERATORS; None:
        # parked before they were frozen, REVIEW_OPERATORS). Patterns only, never credentials.
        "reviewers": _reviewers(record),
        "prepared_at": iso(record.prepared_at_ms),
        "updated_at": iso(record.updated_at_ms),
    }
