"""Per-thread Powertools log keys, so each local log line names the function that wrote it.

Powertools ``Logger`` instances of one service share one ``logging`` handler, and its
formatter keeps the appended keys (``function_name``, ``function_request_id``, ``run_id`` …)
in one dict. On Lambda that is right: one execution environment runs one invocation at a
time. Local mode runs every function in one process, each invocation on its own thread, so
two invocations at once overwrote each other's keys and lines named the wrong function.

``isolate_log_keys`` gives every Powertools formatter in the process one key dict per thread:
a thread starts from the keys the formatter had when it was isolated (service, level,
location …), and ``inject_lambda_context``/``append_keys`` on it change only its own. A local
thread runs one invocation at a time (a consumer, a request, a sweep), like an execution
environment. Only local mode calls this; the handlers on Lambda are untouched.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

_ISOLATED: dict[type[Any], type[Any]] = {}
_LOCK = threading.Lock()


class _Keys(threading.local):
    keys: dict[str, Any]


def _isolated_class(base: type[LambdaPowertoolsFormatter]) -> type[LambdaPowertoolsFormatter]:
    """A subclass of ``base`` whose ``log_format`` (the key dict) is per thread."""
    if getattr(base, "_per_thread_keys", False):
        return base
    if base not in _ISOLATED:

        def _get(self: Any) -> dict[str, Any]:
            state: _Keys = self.__dict__["_thread_keys"]
            if not hasattr(state, "keys"):  # a thread's first line: the shared starting keys
                state.keys = dict(self.__dict__["_initial_keys"])
            return state.keys

        def _set(self: Any, value: dict[str, Any]) -> None:
            self.__dict__["_thread_keys"].keys = value

        _ISOLATED[base] = type(
            f"PerThread{base.__name__}",
            (base,),
            {"log_format": property(_get, _set), "_per_thread_keys": True},
        )
    return _ISOLATED[base]


def isolate_log_keys() -> int:
    """Makes the keys of every Powertools formatter of this process per thread (idempotent).

    Call it after importing handlers: their ``Logger()`` calls create the formatters.

    Returns:
        How many formatters were isolated by this call.
    """
    count = 0
    with _LOCK:
        loggers = [logging.getLogger()] + [
            item
            for item in list(logging.Logger.manager.loggerDict.values())
            if isinstance(item, logging.Logger)
        ]
        for logger in loggers:
            for handler in logger.handlers:
                formatter = handler.formatter
                if not isinstance(formatter, LambdaPowertoolsFormatter):
                    continue
                if getattr(type(formatter), "_per_thread_keys", False):
                    continue
                initial = formatter.__dict__.pop("log_format")
                formatter.__dict__["_initial_keys"] = dict(initial)
                formatter.__dict__["_thread_keys"] = _Keys()
                formatter.__class__ = _isolated_class(type(formatter))
                count += 1
    return count
