"""The trace plane: a replay-aware logger. Logging failures never fail a step."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from durable_agents.core.log_context import current_log_keys
from durable_agents.core.scrub import scrub, scrub_value

# (the agent's own line), not this module's (docs/operations.md).
_STACKLEVEL = 3


class _Live(Protocol):
    live: bool


class ReplayAwareLogger:
    """Logs only while the invocation executes new work, so replays do not repeat lines.

    Every line carries the run id and the invocation's log context (agent, tenant, operation
    id and name, attempt: ``durable_agents.core.log_context``), and its location is the line that
    called ``info``/``warning``…, not this wrapper. Errors raised by the underlying logger are
    swallowed: observability is a separate plane and must never fail execution.
    """

    def __init__(
        self, invocation: _Live, logger: Any, run_id: str, keys: dict[str, Any] | None = None
    ):
        self._inv = invocation
        self._logger = logger
        self._run_id = run_id
        self._keys = keys or {}

    def bind(self, **keys: Any) -> ReplayAwareLogger:
        """A logger like this one whose every line also carries ``keys`` (a step's op id)."""
        return ReplayAwareLogger(self._inv, self._logger, self._run_id, {**self._keys, **keys})

    def _emit(self, level: int, msg: str, args: tuple[Any, ...], extra: dict[str, Any]) -> None:
        if not self._inv.live:
            return
        try:
            context = current_log_keys()
            merged = scrub_value({**context, "run_id": self._run_id, **self._keys, **extra})
            text = msg % args if args else msg
            # Revealed secrets masked; the location is the agent's line (``_STACKLEVEL``).
            self._logger.log(level, scrub(text), extra=merged, stacklevel=_STACKLEVEL)
        except Exception:  # noqa: S110 - the trace plane must not break execution
            pass

    def debug(self, msg: str, *args: Any, **extra: Any) -> None:
        """Logs at DEBUG unless replaying."""
        self._emit(logging.DEBUG, msg, args, extra)

    def info(self, msg: str, *args: Any, **extra: Any) -> None:
        """Logs at INFO unless replaying."""
        self._emit(logging.INFO, msg, args, extra)

    def warning(self, msg: str, *args: Any, **extra: Any) -> None:
        """Logs at WARNING unless replaying."""
        self._emit(logging.WARNING, msg, args, extra)

    def error(self, msg: str, *args: Any, **extra: Any) -> None:
        """Logs at ERROR unless replaying."""
        self._emit(logging.ERROR, msg, args, extra)
