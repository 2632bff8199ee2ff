"""Scrubbing revealed secrets out of everything the runtime writes down.

The serializer refuses ``Secret`` values by type, but a credential can still leak as text: a
tool raises ``RuntimeError(f"provider refused key {key}")`` and the message would be recorded
as the attempt's error, put into a review note, logged and published. So every value a
``Secret`` reveals in this process is remembered here, and recorded errors and notes, log lines
and event details pass through ``scrub`` before they leave the process.

The registry is per process (tools may reveal credentials on other threads) and bounded: the
most recently revealed values are kept. Values shorter than ``MIN_LENGTH`` are not scrubbed —
replacing a three-letter "secret" everywhere would garble unrelated text and protect nothing.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

MASK = "***"
MIN_LENGTH = 6
MAX_REMEMBERED = 4096

_lock = threading.Lock()
_revealed: OrderedDict[str, None] = OrderedDict()
_ordered: tuple[str, ...] = ()  # longest first, so a secret containing another goes whole


def remember(value: str) -> None:
    """Records that ``value`` was revealed (called by ``Secret.reveal``)."""
    global _ordered  # noqa: PLW0603 - one registry per process
    if len(value) < MIN_LENGTH:
        return
    with _lock:
        if value in _revealed:
            _revealed.move_to_end(value)
            return
        _revealed[value] = None
        while len(_revealed) > MAX_REMEMBERED:
            _revealed.popitem(last=False)
        _ordered = tuple(sorted(_revealed, key=len, reverse=True))


def scrub(text: str) -> str:
    """Returns ``text`` with every revealed secret value replaced by ``***``."""
    secrets = _ordered
    if not secrets:
        return text
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    return text


def scrub_value(value: Any) -> Any:
    """``scrub`` applied to every string inside a JSON-like value (dicts, lists, tuples)."""
    if not _ordered:
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {key: scrub_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(scrub_value(item) for item in value)
    return value


class ScrubFilter(logging.Filter):
    """A logging filter that masks revealed secrets in the message, its arguments and traceback.

    Attach it to the handlers a process logs through (``install_log_scrubbing``): a filter on a
    handler sees every record that handler writes, whichever logger made it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrites ``record`` in place; never drops it."""
        if not _ordered:
            return True
        try:
            record.msg = scrub(record.getMessage())
            record.args = ()
            if record.exc_info:
                text = logging.Formatter().formatException(record.exc_info)
                scrubbed = scrub(text)
                if scrubbed != text:
                    # A secret in the traceback: formatters print exc_text instead. Powertools'
                    # JSON formatter reads only exc_info, so it gets none to print. Otherwise
                    # exc_info stays: other handlers keep the traceback and the exception name.
                    record.exc_text = scrubbed
                    record.exc_info = None
            for key, value in list(record.__dict__.items()):
                if key not in _STANDARD_ATTRS:
                    record.__dict__[key] = scrub_value(value)
        except Exception:  # noqa: S110 - the trace plane must never fail execution
            pass
        return True


_STANDARD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
}


def install_log_scrubbing(*loggers: logging.Logger) -> None:
    """Adds ``ScrubFilter`` to the handlers of the root logger and of ``loggers`` (once)."""
    for each in (logging.getLogger(), *loggers):
        for handler in each.handlers:
            if not any(isinstance(f, ScrubFilter) for f in handler.filters):
                handler.addFilter(ScrubFilter())
