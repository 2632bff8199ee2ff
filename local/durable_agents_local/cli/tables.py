"""Text tables of the CLI, fitted to a terminal (80 columns unless told otherwise).

Every table is built from the Api's JSON (the same views ``--json`` prints): runs, a run's
history, its operations (``runs timeline``), approvals and calls in review. A table wider than
the terminal shrinks its widest columns first and ellipsizes the cells that no longer fit, so
a line does not wrap; but the ids one copies into the next command (run, approval and
operation ids) are never cut: a line whose ids alone (with the other columns at their
narrowest) are wider than the terminal is longer than it, and the terminal wraps it.

Every cell, and every line the CLI prints for a person, shows the control characters of the
Api's data escaped (``escape_controls``): run data is anyone's text (a tool's error message,
an approval's summary), and an ESC sequence printed raw is obeyed by the terminal — it can
retitle the window, erase a line and write a fake one in its place, or (a bidi override)
make text read backwards.

A failure's recorded traceback (``runs show``, ``runs history``) is printed whole under the
lines or the table, each of its lines escaped the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from durable_agents.engine.effects.records import why

WIDTH = 80
GAP = "  "
ELLIPSIS = "…"
MIN_COLUMN = 4

_SHORT = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
# C0, DEL and C1 (0x80-0x9f: 8-bit forms of ESC sequences, CSI 0x9b among them) as \xNN;
# the bidi embeddings, overrides (U+202A-U+202E) and isolates (U+2066-U+2069) as \uNNNN; lone
# surrogates too (valid JSON, but print() cannot encode them).
_ESCAPES: dict[int, str] = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    **_SHORT,
    **{code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
    **{code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)},
}
_ESCAPES_BUT_NEWLINES = {code: text for code, text in _ESCAPES.items() if code != 0x0A}

# An operation's state after its last journal entry (``views.entry_event``'s ``event`` suffix).
_STATE_AFTER = {
    "started": "RUNNING",
    "attempt_failed": "RETRYING",
    "scheduled": "WAITING",
    "notified": "WAITING",
    "succeeded": "SUCCEEDED",
    "failed": "FAILED",
}


def escape_controls(text: str, *, keep_newlines: bool = False) -> str:
    r"""``text`` with every control character shown escaped, as a terminal cannot obey it.

    C0 controls, DEL and C1 controls become ``\xNN`` (``\n``, ``\t``, ``\r`` for those
    three), the bidi embeddings, overrides and isolates and lone surrogates ``\uNNNN``. A
    backslash is left as it is: the output is for reading, not for parsing back.

    >>> escape_controls("\x1b]0;pwned\x07 ok\u202e")
    '\\x1b]0;pwned\\x07 ok\\u202e'

    Args:
        text: Any text, the Api's included.
        keep_newlines: Leave ``\n`` as it is (a multi-line text of the CLI's own making, whose
            parts from the Api were escaped already).
    """
    return text.translate(_ESCAPES_BUT_NEWLINES if keep_newlines else _ESCAPES)


def escape_strings(value: Any) -> Any:
    """``value`` (the Api's JSON) with ``escape_controls`` applied to every string in it.

    For text built from the Api's answer by code that does not escape (a ``describe``);
    ``--json`` prints the answer itself (``json.dumps`` escapes every control character).
    """
    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, Mapping):
        return {escape_strings(k): escape_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape_strings(v) for v in value]
    return value


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one an ellipsis if anything was cut.

    Its control characters are shown escaped first (``escape_controls``): a newline would
    break the table, an ESC sequence would be obeyed by the terminal.
    """
    text = escape_controls(text)
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS if width > 0 else ""


def fit_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int = WIDTH,
    *,
    keep: Sequence[int] = (),
) -> str:
    """Left-aligned columns under ``headers``, no line longer than ``width``.

    While the table is too wide the widest column loses a character (never below its header
    or ``MIN_COLUMN``; the columns in ``keep``, ids one copies, never); cells longer than
    their column are ellipsized. When the kept columns and the others' narrowest widths add up
    to more than ``width``, the lines are longer than ``width``: a line is never cut, or it
    would cut the ids.
    """
    # Escaped before the whitespace is collapsed: str.split() would take some controls
    # (\x1c-\x1f, \x85) for spaces, and the rest must not reach the terminal.
    cells = [[" ".join(escape_controls(c).split()) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    floor = [min(max(len(h), MIN_COLUMN), w) for h, w in zip(headers, widths, strict=True)]
    budget = width - len(GAP) * (len(headers) - 1)
    while sum(widths) > budget:
        shrinkable = [i for i, w in enumerate(widths) if w > floor[i] and i not in keep]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: (widths[i], i))  # a tie: the later column
        widths[widest] -= 1
    lines = [
        GAP.join(clip(c, w).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in [list(headers), *cells]
    ]
    return "\n".join(lines)


def short_time(at: str | None, *, seconds: bool = True) -> str:
    """An ISO time as ``MM-DD HH:MM:SS`` (or ``MM-DD HH:MM``), UTC as the Api writes it."""
    return f"{at[5:10]} {at[11 : 19 if seconds else 16]}" if at and len(at) >= 19 else ""


def seconds_between(start: str | None, end: str | None) -> float | None:
    """Seconds from ISO time ``start`` to ``end`` (None if either is missing)."""
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def duration(seconds: float | None) -> str:
    """``0.42s``, ``12.3s``, ``4m05s``, ``2h13m``."""
    if seconds is None:
        return ""
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def compact(value: Any) -> str:
    """A value as one line: strings as they are, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def runs_table(runs: Sequence[Mapping[str, Any]], width: int = WIDTH) -> str:
    """One line per run: id, agent, pinned version, status, created and updated times."""
    if not runs:
        return "no runs"
    rows = [
        [
            str(r.get("run_id", "")),
            str(r.get("agent", "")),
            str((r.get("versions") or {}).get("workflow_version", "")),
            str(r.get("status", "")),
            short_time(r.get("created_at"), seconds=False),
            short_time(r.get("updated_at"), seconds=False),
        ]
        for r in runs
    ]
    headers = ["RUN ID", "AGENT", "VERSION", "STATUS", "CREATED", "UPDATED"]
    return fit_table(headers, rows, width, keep=(0, 4, 5))


_ID_KEYS = ("run_id", "parent_run_id", "rerun_of")


def run_details(run: Mapping[str, Any], width: int = WIDTH) -> str:
    """A run as ``key: value`` lines, each clipped to ``width`` but the ids' (never cut)."""
    lines = []
    for key in (
        "run_id", "agent", "status", "tenant", "created_at", "updated_at", "wake_at",
        "waiting_on", "flow", "parent_run_id", "rerun_of", "rerun_from", "versions",
        "cancel_requested",
        "execution_deadline",
        "input", "result", "error",
    ):  # fmt: skip
        value = run.get(key)
        if key == "error" and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if k != "traceback"}  # shown below, whole
        if value is not None:
            line = f"{key + ':':<20}{compact(value)}"
            lines.append(clip(line, max(width, len(line)) if key in _ID_KEYS else width))
    story = traceback_lines(run.get("error"))
    if story:
        lines += ["traceback:", *story]
    return "\n".join(lines)


def traceback_lines(error: Any) -> list[str]:
    """An Api error's recorded ``traceback``, one indented line per line (none if it has none).

    Each line's control characters are shown escaped (``escape_controls``): a traceback holds
    messages and source lines, anyone's text. Lines are not clipped to the terminal's width:
    a file's path and line number end the line, and a cut one would lose them (the terminal
    wraps a long line instead).
    """
    text = error.get("traceback") if isinstance(error, Mapping) else None
    if not isinstance(text, str) or not text:
        return []
    return ["  " + escape_controls(line) for line in text.rstrip("\n").split("\n")]


def short_op(op_id: str | None, run_id: str) -> str:
    """An operation id without its run prefix (``gather:2/fetch-1:1``)."""
    return (op_id or "").removeprefix(f"{run_id}:")


def _note(event: Mapping[str, Any]) -> str:
    if event.get("error"):
        error = event["error"]
        return f"{error.get('type')}: {error.get('message')}"
    if event.get("due_at"):
        return f"due {short_time(event['due_at'])}"
    if event.get("result") is not None:
        return compact(event["result"])
    return ""


def history_table(events: Sequence[Mapping[str, Any]], width: int = WIDTH) -> str:
    """The history: offset from the start, event, operation, attempt, note."""
    if not events:
        return "no events"
    run_id = str(events[0].get("run_id", ""))
    first = events[0].get("at")
    rows = []
    for event in events:
        offset = seconds_between(first, event.get("at"))
        rows.append(
            [
                f"+{offset:.2f}s" if offset is not None else "",
                str(event.get("event", "")),
                short_op(event.get("op_id") or event.get("operation_id"), run_id),
                str(event.get("attempt", "")),
                _note(event),
            ]
        )
    headers = ["OFFSET", "EVENT", "OPERATION", "ATTEMPT", "NOTE"]
    table = fit_table(headers, rows, width, keep=(2,))  # the operation id: never cut
    # Under the table, each failure's recorded traceback (the NOTE has its type and message).
    return "\n\n".join([table, *traceback_stories(events, run_id)])


def traceback_stories(events: Sequence[Mapping[str, Any]], run_id: str) -> list[str]:
    """Each recorded traceback of ``events``, titled with its operation, event and attempt.

    Args:
        events: History events (an ``error`` with a ``traceback`` has a story; others none).
        run_id: The run (operation ids are shown without it).

    Returns:
        One block of lines per traceback, in the events' order.
    """
    stories = []
    for event in events:
        story = traceback_lines(event.get("error"))
        if story:
            op = short_op(event.get("op_id"), run_id) or "the run"
            attempt = f", attempt {event['attempt']}" if event.get("attempt") else ""
            title = f"traceback of {op} ({event.get('event', '')}{attempt}):"
            stories.append("\n".join([escape_controls(title), *story]))
        unclear = _unclear_story(event, short_op(event.get("operation_id"), run_id))
        if unclear:
            stories.append(unclear)
    return stories


def operations(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A run's operations from its history, in the order they began.

    Each: ``op_id``, ``kind`` (and ``sub_kind`` once one of its events names one: a
    ``wait_for_callback`` scope's result), ``name``, ``attempts``, ``status`` (RUNNING, RETRYING,
    WAITING, SUCCEEDED, FAILED), ``started_at``, ``ended_at`` (a settled one's),
    ``duration_seconds`` (to its last entry) and ``deadline`` (a timer's or retry's due time,
    or a running attempt's lease expiry; None once settled); a batch that completed with
    failed branches also ``failed_branches`` and ``total_branches``; one that failed an
    attempt also ``error`` and ``error_event`` (its last failure's).
    """
    ops: dict[str, dict[str, Any]] = {}
    for event in events:
        op_id, kind = event.get("op_id"), event.get("kind")
        if not op_id or not kind or event.get("event") == "run_migrated":
            continue
        op = ops.setdefault(
            str(op_id),
            {"op_id": op_id, "kind": kind, "name": event.get("name"), "attempts": 0,
             "status": "RUNNING", "started_at": event.get("at"), "ended_at": None,
             "duration_seconds": None, "deadline": None},
        )  # fmt: skip
        state = str(event.get("event", "")).removeprefix(f"{kind}_")
        op["status"] = _STATE_AFTER.get(state, op["status"])
        op["attempts"] = max(op["attempts"], int(event.get("attempt") or 0))
        if event.get("sub_kind"):  # a marked scope's (a wait_for_callback): on its result
            op["sub_kind"] = event["sub_kind"]
        op["duration_seconds"] = seconds_between(op["started_at"], event.get("at"))
        settled = op["status"] in ("SUCCEEDED", "FAILED")
        op["ended_at"] = event.get("at") if settled else None
        op["deadline"] = None if settled else event.get("due_at") or event.get("lease_expires_at")
        if event.get("failed_branches"):  # a batch's, tolerated or not (ADR 0024)
            op["failed_branches"] = event["failed_branches"]
            op["total_branches"] = event.get("total_branches")
        if event.get("error"):  # the last failure's (its traceback, if recorded)
            op["error"], op["error_event"] = event["error"], event.get("event")
    return list(ops.values())


def _kind(op: Mapping[str, Any]) -> str:
    """An operation's kind; a marked one's with its sub-kind (``child/wait_for_callback``)."""
    sub_kind = op.get("sub_kind")
    return f"{op['kind']}/{sub_kind}" if sub_kind else str(op["kind"])


def _status(op: Mapping[str, Any]) -> str:
    """An operation's status; a batch's says how many of its branches failed."""
    status = str(op["status"])
    failed = op.get("failed_branches")
    if failed:
        return f"{status} ({failed}/{op.get('total_branches')} failed)"
    return status


def timeline_table(run_id: str, ops: Sequence[Mapping[str, Any]], width: int = WIDTH) -> str:
    """``runs timeline``: one line per operation."""
    if not ops:
        return "no operations"
    rows = [
        [
            short_op(op["op_id"], run_id),
            _kind(op),
            str(op.get("name") or ""),
            str(op.get("attempts") or "-"),
            duration(op.get("duration_seconds")),
            _status(op),
            short_time(op.get("deadline")),
        ]
        for op in ops
    ]
    headers = ["OPERATION", "KIND", "NAME", "ATT", "TOOK", "STATUS", "DEADLINE"]
    table = fit_table(headers, rows, width, keep=(0, 6))  # the operation id: never cut
    # Under it, the recorded traceback of each operation that failed for good.
    failed = [
        {"op_id": op["op_id"], "event": op.get("error_event"), "error": op.get("error")}
        for op in ops
        if op["status"] == "FAILED"
    ]
    return "\n\n".join([table, *traceback_stories(failed, run_id)])


def approvals_table(approvals: Sequence[Mapping[str, Any]], width: int = WIDTH) -> str:
    """One line per approval: id, status, run, name, deadline, summary."""
    if not approvals:
        return "no approvals"
    rows = [
        [
            str(a.get("approval_id", "")),
            str(a.get("status", "")),
            str(a.get("run_id", "")),
            str(a.get("name") or ""),
            short_time(a.get("deadline")),
            str(a.get("summary") or ""),
        ]
        for a in approvals
    ]
    headers = ["APPROVAL ID", "STATUS", "RUN ID", "NAME", "DEADLINE", "SUMMARY"]
    return fit_table(headers, rows, width, keep=(0, 2, 4))  # the ids: never cut


def reviews_table(reviews: Sequence[Mapping[str, Any]], width: int = WIDTH) -> str:
    """One line per call in review: operation id, tool, attempt, since when, why."""
    if not reviews:
        return "no calls in review"
    rows = [
        [
            str(r.get("operation_id", "")),
            str(r.get("tool", "")),
            str(r.get("attempt", "")),
            short_time(r.get("updated_at"), seconds=False),
            why(r.get("note")),
        ]
        for r in reviews
    ]
    # The operation id is what `reviews decide` takes: never clipped.
    table = fit_table(["OPERATION ID", "TOOL", "ATT", "SINCE", "WHY"], rows, width, keep=(0, 3))
    # Under it, the traceback of each call's unclear outcome (where the tool or lookup raised).
    stories = [_unclear_story(r, str(r.get("operation_id", ""))) for r in reviews]
    return "\n\n".join([table, *(s for s in stories if s)])


def _unclear_story(effect: Mapping[str, Any], shown_as: str) -> str:
    """The traceback of an unsettled call's unclear outcome, titled (``""`` if none)."""
    unclear = effect.get("unclear")
    story = traceback_lines(unclear if isinstance(unclear, Mapping) else None)
    if not story:
        return ""
    attempt = f", attempt {effect['attempt']}" if effect.get("attempt") else ""
    title = f"traceback of {shown_as} (unclear outcome{attempt}):"
    return "\n".join([escape_controls(title), *story])
