"""Which run, agent, operation and attempt a log line belongs to, on every line of an invocation.

``Runtime.execute`` opens an invocation's log context (``invocation_log_context``); the
operations it takes up and the attempts it claims update it (``note_operation``). Two things
read it:

* the replay-aware loggers (``ctx.logger``, a step's ``step.logger``) put its keys on their
  lines, whatever logger they write to;
* ``LogContextFilter``, on the handlers a process logs through (``install_log_context``), puts
  them on every other record written during the invocation: the runtime's own lines
  (``durable_agents.retry``, ``durable_agents.plugins`` …) and the handler's.

The context lives in a ``ContextVar``: a thread starts without one (local mode runs each
invocation on its own thread), and it is reset when the invocation ends, so no key of one
invocation reaches the next one in a warm execution environment.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any

# The Powertools ``location`` of the handlers' loggers: ``file:function:line``.
LOG_LOCATION = "%(filename)s:%(funcName)s:%(lineno)d"

# The keys, in the order they are documented (docs/operations.md).
LOG_KEYS = ("run_id", "agent", "tenant", "operation_id", "operation_name", "attempt")

_CURRENT: ContextVar[dict[str, Any] | None] = ContextVar("durable_agents_log_context", default=None)


# Named as the function it was: ``with invocation_log_context(run_id):``.
class invocation_log_context:
    """The log context of one invocation of ``run_id``, for the duration of the ``with``.

    A class rather than a ``contextlib.contextmanager``: it is entered once per invocation,
    and the generator and its wrapper were a measurable part of a sticky invocation's cost.

    Example:
        >>> with invocation_log_context("run-1"):
        ...     note_run(agent="fetcher", tenant="default")
        ...     note_operation("run-1:fetch:1", "fetch", attempt=2)
        ...     current_log_keys()["operation_name"], current_log_keys()["attempt"]
        ('fetch', 2)
        >>> current_log_keys()
        {}
    """

    __slots__ = ("_run_id", "_token")

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id

    def __enter__(self) -> None:
        self._token = open_log_context(self._run_id)

    def __exit__(self, *_: object) -> None:
        close_log_context(self._token)


def open_log_context(run_id: str) -> Token[dict[str, Any] | None]:
    """Opens the log context of one invocation of ``run_id``; ``close_log_context`` ends it.

    ``invocation_log_context`` without the context manager: ``Runtime.execute`` opens it in a
    ``try`` (a sticky invocation, one per step, then makes one Python call here, not three).

    Example:
        >>> token = open_log_context("run-1")
        >>> try:
        ...     note_run(agent="fetcher", tenant="default")
        ...     current_log_keys()
        ... finally:
        ...     close_log_context(token)
        {'run_id': 'run-1', 'agent': 'fetcher', 'tenant': 'default'}
        >>> current_log_keys()
        {}
    """
    return _CURRENT.set({"run_id": run_id})


close_log_context: Callable[[Token[dict[str, Any] | None]], None] = _CURRENT.reset
"""Ends the log context ``open_log_context`` opened, given its token (the variable's own reset)."""


def note_run(*, agent: str, tenant: str) -> None:
    """Adds the run's agent and tenant once its header is read (nothing outside a context)."""
    keys = _CURRENT.get()
    if keys is not None:
        keys["agent"] = agent
        keys["tenant"] = tenant


def current_agent() -> str:
    """The current invocation's agent (empty outside a context or before its header is read)."""
    keys = _CURRENT.get()
    return str(keys.get("agent", "")) if keys is not None else ""


def note_operation(operation_id: str, name: str, attempt: int | None = None) -> None:
    """The invocation is at this operation (and attempt, once one is claimed)."""
    keys = _CURRENT.get()
    if keys is None:
        return
    if keys.get("operation_id") != operation_id:
        keys.pop("attempt", None)  # another operation: the previous one's attempt is not its
    keys["operation_id"] = operation_id
    keys["operation_name"] = name
    if attempt is not None:
        keys["attempt"] = attempt


def current_log_keys() -> dict[str, Any]:
    """A copy of the current invocation's keys (empty outside an invocation)."""
    keys = _CURRENT.get()
    return dict(keys) if keys is not None else {}


class LogContextFilter(logging.Filter):
    """Puts the current invocation's keys on a record (those it does not carry already).

    A handler filter, so that it sees the records of every logger that propagates to the
    handler. It never raises and never drops a record: the trace plane must not fail a step.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Adds the keys; always True."""
        try:
            for key, value in current_log_keys().items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        except Exception:  # noqa: S110 - the trace plane must never fail execution
            pass
        return True


def log_safely(logger: logging.Logger, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
    """``logger.log(level, msg, *args, **kwargs)``, swallowing what a broken handler raises.

    ``logging`` lets an exception a handler's ``emit`` raises propagate to the caller: a
    runtime line written on a step's path (a stream cache that failed, a retry decision) must
    not turn a broken log shipper into a failed step. The location stays the caller's.
    """
    with contextlib.suppress(Exception):  # the trace plane must never fail execution
        logger.log(level, msg, *args, stacklevel=2, **kwargs)


def install_log_context(*loggers: logging.Logger) -> None:
    """Adds ``LogContextFilter`` to the handlers of the root logger and of ``loggers`` (once)."""
    for each in (logging.getLogger(), *loggers):
        for handler in each.handlers:
            if not any(isinstance(f, LogContextFilter) for f in handler.filters):
                handler.addFilter(LogContextFilter())
