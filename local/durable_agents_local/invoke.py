"""Invoking a template function in-process, with a Lambda context and one log line per call.

A line says what a person watching the terminal wants to know at a glance: the function, then
for an Api request its method, path, status and run; for a StepRunner invocation the agent,
the run, the operations it executed and its outcome; then the duration::

    10:02:11.402 ApiFunction        POST /runs -> 201 run-8f0c1d2e3a4b5c6d (0.04s)
    10:02:11.517 StepRunnerFunction greeter run-8f0c1d2e3a4b5c6d greet:1 -> succeeded (0.51s)
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from durable_agents.errors import ConfigurationError
from durable_agents_local.functions import FunctionSpec
from durable_agents_local.lambda_context import new_context
from durable_agents_local.log_keys import isolate_log_keys
from durable_agents_local.terminal import one_line

Handler = Callable[[dict[str, Any], Any], Any]

log = logging.getLogger("durable_agents_local")


def load_handler(spec: FunctionSpec) -> Handler:
    """Imports ``spec.handler`` (``package.module.function``) from the function's CodeUri.

    The Powertools loggers the module created get per-thread keys (``local.log_keys``), so
    each log line names the function that wrote it.

    Raises:
        ConfigurationError: If the module cannot be imported or has no such function.
    """
    code_dir = str(spec.code_dir)
    if code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    module_name, _, attr = spec.handler.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"{spec.logical_id}: cannot import {module_name!r} from {code_dir}: {exc}"
        ) from exc
    handler = getattr(module, attr, None)
    if not callable(handler):
        raise ConfigurationError(f"{spec.logical_id}: {module_name!r} has no handler {attr!r}")
    # The functions share this process: each thread (one invocation) keeps its own log keys.
    isolate_log_keys()
    return handler  # type: ignore[no-any-return]


def _short(op_id: str, run_id: str) -> str:
    return op_id.removeprefix(f"{run_id}:")


def summarize(event: Mapping[str, Any], result: Any) -> str | None:
    """One readable phrase about an invocation's result; None when there is nothing to say.

    Knows the shapes of the project's handlers (an Api response, a StepRunner outcome, a
    reconciler report); anything else is shown as compact JSON.
    """
    if isinstance(result, Mapping) and "statusCode" in result:
        line = f"{event.get('httpMethod')} {event.get('path')} -> {result['statusCode']}"
        run_id = (event.get("pathParameters") or {}).get("run_id") or _body_run_id(result)
        return f"{line} {run_id}" if run_id else line
    if isinstance(result, Mapping) and "outcome" in result:
        return _step_phrase(result)
    if isinstance(event.get("Records"), list):
        failed = len(result.get("batchItemFailures") or []) if isinstance(result, Mapping) else 0
        return f"{len(event['Records'])} stream records" + (f", {failed} failed" if failed else "")
    if isinstance(result, Mapping) and "timers_fired" in result:
        keys = (
            "timers_fired",
            "stalled_redriven",
            "effects_found",
            "effects_retried",
            "effects_escalated",
            "effects_other",
            "stopped_early",
        )
        acted = {k: result[k] for k in keys if result.get(k)}
        if not acted:
            return None  # an idle sweep: nothing to report
        return "sweep: " + ", ".join(f"{k}={v}" for k, v in acted.items())
    return json.dumps(result, default=str)[:200]


def _step_phrase(result: Mapping[str, Any]) -> str:
    """``<agent> <run> <operations executed> -> <outcome>[: <error>]``: a StepRunner's result.

    The operations are the ones this invocation executed (not those it replayed), without the
    run id their ids start with; a run that failed or paused says why (``error``).
    """
    run_id = str(result.get("run_id") or "?")
    executed = ", ".join(_short(str(op), run_id) for op in result.get("executed") or [])
    head = " ".join(part for part in (str(result.get("agent") or ""), run_id, executed) if part)
    line = f"{head} -> {result['outcome']}"
    error = result.get("error")
    return f"{line}: {one_line(str(error))}" if error else line


def failure_phrase(exc: BaseException) -> str:
    r"""``raised <type>: <message>`` on one line (escaped and cut): an invocation that raised.

    Example:
        >>> failure_phrase(ValueError("bad\nevent"))
        'raised ValueError: bad\\nevent'
    """
    message = one_line(str(exc))
    return f"raised {type(exc).__name__}" + (f": {message}" if message else "")


def _body_run_id(response: Mapping[str, Any]) -> str | None:
    try:
        body = json.loads(response.get("body") or "null")
    except (TypeError, ValueError):
        return None
    if isinstance(body, dict):
        run = body.get("run")
        value = (run if isinstance(run, dict) else body).get("run_id")
        return str(value) if value else None
    return None


def _event_run_id(event: Mapping[str, Any]) -> str:
    detail = event.get("detail")
    if isinstance(detail, Mapping) and detail.get("run_id"):
        return str(detail["run_id"])
    return str((event.get("pathParameters") or {}).get("run_id") or "")


class LocalFunction:
    """A template function loaded into this process.

    Args:
        spec: The function as the template declares it.
        handler: The imported handler.
        region: The local region (for the context's ARN).
        timeout_seconds: Overrides the template's Timeout (``--function-timeout``).
    """

    def __init__(
        self,
        spec: FunctionSpec,
        handler: Handler,
        *,
        region: str,
        timeout_seconds: float | None = None,
    ):
        self.spec = spec
        self.name = spec.logical_id
        self._handler = handler
        self._region = region
        self.timeout_seconds = timeout_seconds or spec.timeout_seconds

    def invoke(self, event: dict[str, Any], *, note: str = "") -> Any:
        """Calls the handler once and logs one line about it.

        Args:
            event: The Lambda event.
            note: Appended to the log line (e.g. ``delivery 2``).

        Returns:
            What the handler returned.

        Raises:
            Exception: Whatever the handler raised (logged first: its type and message; its
                traceback too at ``--log-level DEBUG``).
        """
        context = new_context(self.name, self.timeout_seconds, self.spec.memory_mb, self._region)
        started = time.monotonic()
        suffix = f" [{note}]" if note else ""
        try:
            result = self._handler(event, context)
        except Exception as exc:
            elapsed = time.monotonic() - started
            run_id = _event_run_id(event)
            # One line, like the others; the traceback only at --log-level DEBUG (a retried
            # infrastructure failure would otherwise fill the terminal).
            log.error(
                "%-18s %s%s (%.2fs)%s",
                self.name,
                f"{run_id} " if run_id else "",
                failure_phrase(exc),
                elapsed,
                suffix,
            )
            log.debug("%s traceback:", self.name, exc_info=True)
            raise
        elapsed = time.monotonic() - started
        phrase = summarize(event, result)
        if phrase is not None:
            log.info("%-18s %s (%.2fs)%s", self.name, phrase, elapsed, suffix)
        else:
            # Nothing to tell (an idle sweep), except at DEBUG, where its duration shows what
            # the idle stack costs (scripts/bench_loop.py reads it).
            log.debug("%-18s idle (%.2fs)%s", self.name, elapsed, suffix)
        return result
