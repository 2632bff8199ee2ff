"""The trace plane: a replay-aware logger. Logging failures never fail a step."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol

from durable_agents.core.log_context import current_log_keys
from durable_agents.core.scrub import scrub, scrub_value
from durable_agents.errors import ConfigurationError

# (the agent's own line), not this module's (docs/operations.md).
_STACKLEVEL = 3


# The variable that sets the agents' own level (``ctx.logger``), apart from ``LOG_LEVEL``.
AGENT_LOG_LEVEL = "AGENT_LOG_LEVEL"
DEFAULT_AGENT_LOG_LEVEL = "INFO"

# The names of the loggers ``agent_logger`` made: local mode renders their lines for people.
_AGENT_LOGGERS: set[str] = set()


def agent_logger(parent: str, environ: Mapping[str, str] | None = None) -> logging.Logger:
    """The logger agents write to (``ctx.logger``): ``<parent>.agent``, with its own level.

    A child of the function's logger, so its lines go through that logger's handler (on
    Lambda, Powertools' JSON lines with the run, agent and operation as keys, secrets masked),
    but with a level of its own: ``AGENT_LOG_LEVEL`` (INFO by default). What an agent says is
    its author's output and shows at INFO while the runtime's own INFO lines stay hidden at
    ``LOG_LEVEL=WARNING``.

    Args:
        parent: The function's logger name (a Powertools ``Logger``'s ``name``).
        environ: Where ``AGENT_LOG_LEVEL`` is read (the process environment by default).

    Returns:
        The logger, its level set.

    Raises:
        ConfigurationError: If ``AGENT_LOG_LEVEL`` is not a logging level name.
    """
    source = os.environ if environ is None else environ
    level = (source.get(AGENT_LOG_LEVEL) or DEFAULT_AGENT_LOG_LEVEL).strip().upper()
    if not isinstance(logging.getLevelName(level), int):
        raise ConfigurationError(
            f"{AGENT_LOG_LEVEL}={level!r} is not a level (DEBUG, INFO, WARNING, ERROR, CRITICAL)"
        )
    logger = logging.getLogger(f"{parent}.agent")
    logger.setLevel(level)
    _AGENT_LOGGERS.add(logger.name)
    return logger


def agent_loggers() -> list[logging.Logger]:
    """The loggers ``agent_logger`` made in this process (local mode renders their lines)."""
    return [logging.getLogger(name) for name in sorted(_AGENT_LOGGERS)]


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
