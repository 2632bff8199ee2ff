"""Export and import of a run's journal as JSON (golden journals, support bundles)."""

from __future__ import annotations

from typing import Any

from durable_agents.core.models import (
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
    RunHeader,
    RunSnapshot,
    RunStatus,
)
from durable_agents.core.tenancy import DEFAULT_TENANT

FORMAT_VERSION = 1


def _error(data: dict[str, Any] | None) -> ErrorInfo | None:
    return ErrorInfo.from_dict(data) if data else None


def snapshot_to_dict(snapshot: RunSnapshot) -> dict[str, Any]:
    """Returns a JSON-ready dict of the header and entries."""
    header = snapshot.header
    data = _to_dict(snapshot)
    if header.rerun is not None:  # only then: exports of other runs stay as they were
        data["header"]["rerun"] = header.rerun
    if header.flow is not None:  # likewise: flow control's facts (ADR 0030), when there are any
        data["header"]["flow"] = header.flow
    return data


def _to_dict(snapshot: RunSnapshot) -> dict[str, Any]:
    header = snapshot.header
    return {
        "format": FORMAT_VERSION,
        "header": {
            "run_id": header.run_id,
            "agent": header.agent,
            "versions": header.versions,
            "status": header.status.value,
            "input": header.input,
            "created_at_ms": header.created_at_ms,
            "updated_at_ms": header.updated_at_ms,
            "result": header.result,
            "error": header.error.to_dict() if header.error else None,
            "wake_at_ms": header.wake_at_ms,
            "waiting_on": header.waiting_on,
            "parent_run_id": header.parent_run_id,
            "idempotency_key": header.idempotency_key,
            "input_hash": header.input_hash,
            "tenant": header.tenant,
        },
        "entries": [
            {
                "position": e.position,
                "op_id": e.op_id,
                "kind": e.kind.value,
                "name": e.name,
                "type": e.type.value,
                "attempt": e.attempt,
                "value": e.value,
                "error": e.error.to_dict() if e.error else None,
                "recorded_at_ms": e.recorded_at_ms,
                "lease_expires_at_ms": e.lease_expires_at_ms,
                "due_at_ms": e.due_at_ms,
                "meta": e.meta,
            }
            for e in snapshot.entries
        ],
    }


def snapshot_from_dict(data: dict[str, Any]) -> RunSnapshot:
    """Rebuilds a snapshot from ``snapshot_to_dict`` output.

    Raises:
        ValueError: If the format version is unknown.
    """
    if data.get("format") != FORMAT_VERSION:
        raise ValueError(f"unknown journal export format {data.get('format')!r}")
    h = data["header"]
    header = RunHeader(
        run_id=h["run_id"],
        agent=h["agent"],
        versions=dict(h["versions"]),
        status=RunStatus(h["status"]),
        input=h["input"],
        created_at_ms=h["created_at_ms"],
        updated_at_ms=h["updated_at_ms"],
        result=h.get("result"),
        error=_error(h.get("error")),
        wake_at_ms=h.get("wake_at_ms"),
        waiting_on=h.get("waiting_on"),
        parent_run_id=h.get("parent_run_id"),
        idempotency_key=h.get("idempotency_key"),
        input_hash=h.get("input_hash", ""),
        tenant=h.get("tenant", DEFAULT_TENANT),  # exports from before tenants: the default
        rerun=h.get("rerun"),  # a rerun's origin (ADR 0027); absent for every other run
        flow=h.get("flow"),  # flow control's facts (ADR 0030); absent for most runs
    )
    entries = [
        Entry(
            run_id=header.run_id,
            position=e["position"],
            op_id=e["op_id"],
            kind=OpKind(e["kind"]),
            name=e["name"],
            type=EntryType(e["type"]),
            attempt=e["attempt"],
            value=e.get("value"),
            error=_error(e.get("error")),
            recorded_at_ms=e["recorded_at_ms"],
            lease_expires_at_ms=e.get("lease_expires_at_ms"),
            due_at_ms=e.get("due_at_ms"),
            meta=e.get("meta") or {},
        )
        for e in data["entries"]
    ]
    return RunSnapshot(header, entries)
