"""How local mode's terminal reads: time-stamped lines, and the agents' own lines made readable.

The worker writes its lines (one per invocation, warnings, errors) to stderr with
``StampFormatter``. What agents say through ``ctx.logger`` goes, on Lambda, through the
function's Powertools handler as JSON; here ``show_agent_lines`` sends it to stderr instead, as
one line a person reads at a glance::

    10:02:11.517 agent greeter run-8f0c1d2e3a4b5c6d greet:1: checking Ada order=o-1
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO

from durable_agents.core.log_context import LOG_KEYS
from durable_agents.core.observability import agent_loggers
from durable_agents.core.scrub import ScrubFilter

# The attributes every LogRecord has: what is left on a record is what the agent passed.
_RECORD_ATTRIBUTES = frozenset(
    (*logging.makeLogRecord({}).__dict__, "message", "asctime", "taskName")
)
# The log context's keys are the line's head; ``op_id`` is the step logger's older name for
# ``operation_id`` (docs/operations.md), so it would only repeat it.
_HEAD_KEYS = frozenset((*LOG_KEYS, "op_id"))
# A line longer than this wraps in a terminal; the JSON logs (``--log-level``) keep everything.
MAX_TEXT = 160


def one_line(text: str, limit: int = MAX_TEXT) -> str:
    r"""``text`` on one line: newlines and control characters escaped, cut at ``limit``.

    Example:
        >>> one_line('bad "input"\nline 2')
        'bad \\"input\\"\\nline 2'
    """
    return _cut(json.dumps(text, ensure_ascii=False)[1:-1], limit)


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: Any) -> str:
    """A key's value: a plain word as it is, anything else as compact JSON (one line)."""
    if isinstance(value, str) and value and all(c.isalnum() or c in "-_.:/@" for c in value):
        return value
    try:
        return _cut(json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":")))
    except (TypeError, ValueError):  # a circular structure: its repr still says something
        return one_line(repr(value))


class StampFormatter(logging.Formatter):
    """``HH:MM:SS.mmm message``; a warning or an error says so after the time."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s.%(msecs)03d %(message)s", datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        """The record's line (its traceback, if any, on the lines after it)."""
        text = super().format(record)
        if record.levelno >= logging.WARNING:
            head, _, rest = text.partition(" ")
            text = f"{head} {record.levelname}: {rest}"
        return text


class AgentLineFormatter(StampFormatter):
    """``HH:MM:SS.mmm agent <name> <run_id> <operation>: <message> key=value …``.

    The run, agent and operation come from the keys the replay-aware logger puts on every
    record (``durable_agents.core.log_context``); the other keys the agent passed follow the
    message, compact. The message is one line (escaped), so a line is one record.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one readable line."""
        keys = record.__dict__
        run_id = str(keys.get("run_id") or "-")
        operation = str(keys.get("operation_id") or "").removeprefix(f"{run_id}:")
        extra = " ".join(
            f"{key}={_compact(value)}"
            for key, value in keys.items()
            if key not in _RECORD_ATTRIBUTES and key not in _HEAD_KEYS
        )
        head = f"agent {keys.get('agent') or '?'} {run_id} {operation or '-'}"
        line = f"{head}: {one_line(record.getMessage())}" + (f" {extra}" if extra else "")
        # Formatted as a copy: the record may go on to other handlers, with its own message.
        shown = logging.makeLogRecord({**keys, "msg": line, "args": None, "exc_info": None})
        return super().format(shown)


def show_agent_lines(stream: TextIO | None = None, *, quiet: bool = False) -> int:
    """Writes the agents' lines (``agent_logger``'s loggers) to ``stream`` as readable lines.

    Call it once the handlers are imported (they make the loggers). The lines no longer reach
    the function's JSON handler: one readable line per record, not the same record twice.

    Args:
        stream: Where to write (stderr, the worker's log, by default).
        quiet: Only the agents' warnings and errors (``--quiet``), whatever their level.

    Returns:
        How many loggers now write readable lines.
    """
    loggers = agent_loggers()
    for logger in loggers:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(AgentLineFormatter())
        handler.setLevel(logging.WARNING if quiet else logging.NOTSET)
        # ctx.logger masks revealed secrets already; this handler does too, as the function's
        # does, for any other line written to these loggers.
        handler.addFilter(ScrubFilter())
        logger.handlers[:] = [handler]
        logger.propagate = False
    return len(loggers)
