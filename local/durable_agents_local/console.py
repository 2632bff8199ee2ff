"""Compact text views of runs and their history, for the CLI and the demo."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from durable_agents.admin.views import entry_event, history
from durable_agents.core.clock import iso
from durable_agents.core.models import EffectStatus, OpKind, RunSnapshot
from durable_agents_local.cli.tables import traceback_stories

NOTE_WIDTH = 60


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Formats rows as left-aligned columns under ``headers``."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in [list(headers), *rows]
    ]
    return "\n".join(lines)


def _clip(text: str, width: int = NOTE_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _time(at: str | None) -> str:
    return at[11:23] if at else ""


def runs_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """One line per run: id, agent, version, status, created and updated times."""
    if not runs:
        return "no runs"
    rows = [
        [
            str(r["run_id"]),
            str(r["agent"]),
            str((r.get("versions") or {}).get("workflow_version", "")),
            str(r["status"]),
            str(r.get("created_at") or ""),
            str(r.get("updated_at") or ""),
        ]
        for r in runs
    ]
    return table(["RUN ID", "AGENT", "VERSION", "STATUS", "CREATED", "UPDATED"], rows)


def run_details(run: Mapping[str, Any]) -> str:
    """A run as ``key: value`` lines (values as compact JSON)."""
    lines = []
    for key in (
        "run_id",
        "agent",
        "status",
        "created_at",
        "updated_at",
        "wake_at",
        "waiting_on",
        "parent_run_id",
        "versions",
        "input",
        "result",
        "error",
    ):
        value = run.get(key)
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        lines.append(f"{key + ':':<14}{text}")
    return "\n".join(lines)


def short_op(op_id: str | None, run_id: str) -> str:
    """An operation id without its run prefix (``gather:2/fetch-1:1``)."""
    return (op_id or "").removeprefix(f"{run_id}:")


def offset_seconds(at: str | None, start: datetime | None) -> float | None:
    """Seconds from ``start`` to the ISO time ``at``."""
    if not at or start is None:
        return None
    return (datetime.fromisoformat(at) - start).total_seconds()


def _note(event: Mapping[str, Any]) -> str:
    if isinstance(event.get("comment"), str):
        return _clip(event["comment"])
    if event.get("error"):
        error = event["error"]
        return _clip(f"{error.get('type')}: {error.get('message')}")
    if event.get("due_at"):
        return f"due {_time(event['due_at'])}"
    if "result" in event and event["result"] is not None:
        return _clip(json.dumps(event["result"], separators=(",", ":")))
    return ""


def history_table(events: Sequence[Mapping[str, Any]]) -> str:
    """The history as a timeline: offset from the start, event, operation, attempt, note."""
    if not events:
        return "no events"
    run_id = str(events[0].get("run_id", ""))
    first = events[0].get("at")
    start = datetime.fromisoformat(first) if first else None
    rows = []
    for event in events:
        offset = offset_seconds(event.get("at"), start)
        rows.append(
            [
                f"+{offset:.2f}s".rjust(8) if offset is not None else "",
                str(event["event"]),
                short_op(event.get("op_id"), run_id),
                str(event.get("attempt", "")),
                _note(event),
            ]
        )
    timeline = table(["OFFSET", "EVENT", "OPERATION", "ATTEMPT", "NOTE"], rows)
    # Under it, each failure's recorded traceback, as ``runs history`` prints them.
    return "\n\n".join([timeline, *traceback_stories(events, run_id)])


def _when(event: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["at"]))


def side_effect_timeline(
    snapshot: RunSnapshot, extra: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """A run's history with its tool calls' PREPARE and COMMIT in time order, for a timeline.

    Unlike ``views.history`` (which lists side-effect records at the end, as they are now),
    each record becomes ``side_effect_prepared`` at its prepare time and, once settled,
    ``side_effect_<status>`` at its last change; a tool's result says how it was reached
    (``via executed``: the call returned; ``via found``: a recovery's lookup found it).

    Args:
        snapshot: The run as loaded from the journal.
        extra: More events with an ISO ``at`` (and ``event``, ``comment``), e.g. what the
            providers' ledgers recorded or when a worker died.

    Returns:
        Events sorted by time, ready for ``history_table``.
    """
    framed = history(snapshot)
    events = [framed[0]]
    finished = [framed[-1]] if framed[-1]["event"].startswith("run_") and len(framed) > 1 else []
    for entry in snapshot.entries:
        event = entry_event(entry)
        if entry.kind is OpKind.TOOL and entry.type.is_result and entry.meta.get("via"):
            external = entry.meta.get("external_id")
            event["comment"] = f"via {entry.meta['via']}" + (f", {external}" if external else "")
        events.append(event)
    for record in snapshot.effects:
        op = {"op_id": record.operation_id, "kind": "tool", "name": record.tool}
        events.append(
            {
                **op,
                "event": "side_effect_prepared",
                "at": iso(record.prepared_at_ms),
                "attempt": 1,
                "comment": f"key {record.idempotency_key}",
            }
        )
        if record.status is not EffectStatus.PREPARED:
            events.append(
                {
                    **op,
                    "event": f"side_effect_{record.status.value.lower()}",
                    "at": iso(record.updated_at_ms),
                    "attempt": record.attempt,
                    "comment": record.external_id or "",
                }
            )
    events.extend(dict(e) for e in extra)
    return [events[0], *sorted(events[1:], key=_when), *finished]


def streamed_texts(chunks: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """What a reader of a run's stream shows: each streaming operation's text, in order.

    A ``begin`` chunk (re)starts an operation's text — a ``begin`` of attempt 2 means the step
    crashed mid-stream and its text starts over; ``text`` chunks append to it.

    Args:
        chunks: Stream chunks (``GET /runs/{id}/stream``: ``operation_id``, ``kind``, ``text``).

    Returns:
        ``(operation_id, text)`` pairs in the order the operations began.
    """
    texts: dict[str, str] = {}
    for chunk in chunks:
        op = str(chunk.get("operation_id") or "")
        if chunk.get("kind") == "begin":
            texts[op] = ""
        elif chunk.get("kind") == "text":
            texts[op] = texts.get(op, "") + str(chunk.get("text") or "")
    return list(texts.items())
