"""The Lambda functions' logs, metrics and trace annotations (Powertools), and their guards.

In the layer because the StepRunner, the Api and the reconciler all use it (each function's
package holds only its own code). The StepRunner's part is a runtime plugin.

Built on the runtime's instrumentation hooks (``durable_agents.plugins``): what the handler used
to log and count after ``execute`` returned is reported from ``on_invocation_end``, and failed
attempts and operations are reported as they are recorded. Replayed operations are never
counted or logged again. A hook that raises is logged by the runtime and changes nothing.

Every metric of an invocation has the dimension ``agent`` (one StepRunner invocation advances
one run, so one agent). ``OperationLatency`` is also by ``kind`` and ``ModelTokensIn``/``Out``
by ``model_id``: those are written as their own EMF documents (``single_metric``), since one
Powertools ``Metrics`` flush has one dimension set. No metric has a run id dimension.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from durable_agents.plugins import (
    AttemptEndInfo,
    AttemptStartInfo,
    InvocationEndInfo,
    InvocationStartInfo,
    OperationEndInfo,
    Plugin,
    RunStartInfo,
)

# The run transitions an invocation's own fenced write made (its outcome), and their metric.
# A duplicate delivery to a settled run ends ``noop`` and a lost race ``contended``: neither
# counts, so each transition is counted once however often the event is delivered.
RUN_TRANSITION_METRICS = {
    "succeeded": "RunsSucceeded",
    "failed": "RunsFailed",
    "cancelled": "RunsCancelled",
    "terminated": "RunsCancelled",
    "timed_out": "RunsTimedOut",
    "paused": "RunsEnteredPaused",
}

MetricEmitter = Callable[[str, MetricUnit, float, dict[str, str]], None]
Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


def flush_metrics_safely(metrics: Any) -> Callable[[Handler], Handler]:
    """Like ``metrics.log_metrics(raise_on_empty_metrics=False)``, but a failed flush is logged.

    Powertools flushes after the handler returned, so a flush that raises (stdout closed, a
    metric Powertools refuses) would fail an invocation whose step is already committed:
    Lambda would deliver the event again and, after its retries, park it in the dead-letter
    queue — an alarm for nothing. The metrics of that invocation are lost, nothing else.
    """

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def wrapper(event: dict[str, Any], context: Any) -> dict[str, Any]:
            try:
                return handler(event, context)
            finally:
                try:
                    metrics.flush_metrics(raise_on_empty_metrics=False)
                except Exception:
                    _warn("metrics could not be flushed; ignored", "durable_agents.metrics")
                # What was not flushed must not be flushed by the next invocation of this warm
                # environment, under its agent dimension: drop it. Powertools clears only what
                # it printed; with metrics disabled (local mode) it prints nothing, and the
                # next invocation, of another agent, was warned that "agent" was already set.
                with contextlib.suppress(Exception):
                    metrics.clear_metrics()

        return wrapper

    return decorate


def trace_safely(tracer: Any) -> Callable[[Handler], Handler]:
    """Like ``tracer.capture_lambda_handler(capture_response=False)``, minus its failure mode.

    Powertools opens the handler's subsegment in a ``with`` around the handler: a tracer that
    cannot open it (the X-Ray SDK without a context, a broken recorder) fails the invocation
    before any step ran, and one that cannot close it fails an invocation whose step committed.
    Here either is logged and the handler runs (or returns) as it would untraced. The
    subsegment is annotated ``ColdStart`` and ``Service`` as Powertools does; an exception the
    handler raises is recorded on it and raised.
    """
    cold = [True]

    def decorate(handler: Handler) -> Handler:
        name = f"## {handler.__name__}"

        @functools.wraps(handler)
        def wrapper(event: dict[str, Any], context: Any) -> dict[str, Any]:
            # Outside the guard: a tracer that cannot be made at all (a DeferredTracer is made
            # on this first use) fails the invocation; it is not a sink failing.
            provider = tracer.provider
            try:
                scope = provider.in_subsegment(name=name)
                subsegment = scope.__enter__()
            except Exception:
                _warn("the tracer could not open the handler's subsegment; untraced")
                return handler(event, context)
            with contextlib.suppress(Exception):
                subsegment.put_annotation(key="ColdStart", value=cold[0])
                subsegment.put_annotation(key="Service", value=tracer.service)
            cold[0] = False
            try:
                result = handler(event, context)
            except BaseException as exc:
                with contextlib.suppress(Exception):  # records the exception on the segment
                    scope.__exit__(type(exc), exc, exc.__traceback__)
                raise
            try:
                scope.__exit__(None, None, None)
            except Exception:
                _warn("the tracer could not close the handler's subsegment; ignored")
            return result

        return wrapper

    return decorate


def _warn(message: str, logger: str = "durable_agents.tracing") -> None:
    with contextlib.suppress(Exception):
        logging.getLogger(logger).warning(message, exc_info=True)


def emit_single_metric(
    name: str, unit: MetricUnit, value: float, dimensions: dict[str, str]
) -> None:
    """Writes one EMF document: ``name`` with exactly ``dimensions`` (namespace from the env).

    Nothing when ``POWERTOOLS_METRICS_DISABLED`` (or ``POWERTOOLS_DEV``) switches metrics off,
    as for the ``Metrics`` flush.

    Raises:
        Exception: Whatever Powertools raises; callers run inside a plugin hook (ignored).
    """
    if is_metrics_disabled():
        return  # Powertools' single_metric writes even then (local mode switches metrics off)
    with single_metric(name=name, unit=unit, value=value) as metric:
        for key, dimension in dimensions.items():
            metric.add_dimension(name=key, value=dimension)


@dataclass(slots=True)
class _Executed:
    """An operation this invocation finished, reported with the agent once it is known."""

    kind: str
    duration_ms: int
    model_id: str | None
    tokens_in: int | None
    tokens_out: int | None


class RunsStarted(Plugin):
    """``RunsStarted`` by agent, once per run created (the Api's starts, sub-agents' runs).

    Args:
        emit: Writes a metric with its own dimensions (``emit_single_metric`` by default).
    """

    def __init__(self, emit: MetricEmitter = emit_single_metric):
        self._emit = emit

    def on_run_start(self, info: RunStartInfo) -> None:
        """Counts the run under its agent."""
        self._emit("RunsStarted", MetricUnit.Count, 1, {"agent": info.agent})


class PowertoolsPlugin(RunsStarted):
    """Reports invocations, operations and attempts to Powertools' logger, metrics and tracer.

    Args:
        logger: A Powertools ``Logger`` (or anything with ``info`` and ``warning``).
        metrics: A Powertools ``Metrics`` (``add_metric``, ``add_dimension``).
        tracer: A Powertools ``Tracer`` (``put_annotation``).
        emit: Writes a metric with its own dimensions (``emit_single_metric`` by default).
    """

    # It counts and annotates only what an invocation executed: replays need not report.
    replayed_operations = False

    def __init__(
        self, *, logger: Any, metrics: Any, tracer: Any, emit: MetricEmitter = emit_single_metric
    ):
        super().__init__(emit)
        self._logger = logger
        self._metrics = metrics
        self._tracer = tracer
        self._executed: list[_Executed] = []

    def on_invocation_start(self, info: InvocationStartInfo) -> None:
        """Annotates the invocation's trace with its run, so X-Ray can find it by run id."""
        self._executed = []  # a warm environment: nothing of the last invocation stays
        self._tracer.put_annotation("run_id", info.run_id)

    def on_invocation_end(self, info: InvocationEndInfo) -> None:
        """``invocation finished``, ``OperationsExecuted``, the run's transition, latencies.

        An invocation an exception escaped reports no outcome: the handler logs why (an
        infrastructure failure) and Lambda delivers the event again. What it recorded before
        (latencies, tokens) is still reported: it was recorded.
        """
        executed, self._executed = self._executed, []
        agent = info.agent or "unknown"
        with contextlib.suppress(Exception):  # the tracer failing must not cost the metrics
            self._tracer.put_annotation("agent", agent)
        with contextlib.suppress(Exception):  # nor the dimension the counts below
            self._metrics.add_dimension(name="agent", value=agent)
        for each in executed:
            self._report_executed(agent, each)
        if info.outcome is None:
            return
        self._metrics.add_metric(
            name="OperationsExecuted", unit=MetricUnit.Count, value=len(info.executed)
        )
        transition = RUN_TRANSITION_METRICS.get(info.outcome)
        if transition is not None:
            self._metrics.add_metric(name=transition, unit=MetricUnit.Count, value=1)
        self._logger.info(
            "invocation finished",
            extra={"outcome": info.outcome, "executed": list(info.executed), "detail": info.detail},
        )

    def _report_executed(self, agent: str, each: _Executed) -> None:
        """One finished operation's latency and tokens; one that fails does not stop the rest."""
        try:
            self._emit(
                "OperationLatency",
                MetricUnit.Milliseconds,
                each.duration_ms,
                {"agent": agent, "kind": each.kind},
            )
            if each.model_id is not None:
                model = {"agent": agent, "model_id": each.model_id}
                self._emit("ModelTokensIn", MetricUnit.Count, each.tokens_in or 0, model)
                self._emit("ModelTokensOut", MetricUnit.Count, each.tokens_out or 0, model)
        except Exception:
            with contextlib.suppress(Exception):
                logging.getLogger("durable_agents.plugins").warning(
                    "a metric could not be written; ignored", exc_info=True
                )

    def on_operation_end(self, info: OperationEndInfo) -> None:
        """Counts operations finished by this invocation, annotates the trace, logs failures."""
        if info.replayed or info.outcome == "pending":
            return
        # The operation this invocation finished (not one it only took up, budget spent).
        self._annotate(info.op_id, info.name, info.kind)
        self._executed.append(
            _Executed(
                info.kind,
                info.duration_ms or 0,
                info.model_id,
                info.input_tokens,
                info.output_tokens,
            )
        )
        if info.outcome == "succeeded":
            self._metrics.add_metric(name="OperationsSucceeded", unit=MetricUnit.Count, value=1)
            return
        self._metrics.add_metric(name="OperationsFailed", unit=MetricUnit.Count, value=1)
        self._logger.warning(
            "operation failed",
            extra={
                "op_id": info.op_id,
                "kind": info.kind,
                "attempt": info.attempts,
                "error_type": info.error_type,
            },
        )

    def on_operation_attempt_start(self, info: AttemptStartInfo) -> None:
        """Annotates the trace with the operation whose attempt runs (it may not finish)."""
        self._annotate(info.op_id, info.name, info.kind)

    def _annotate(self, op_id: str, name: str, kind: str) -> None:
        with contextlib.suppress(Exception):  # the tracer failing must not cost the metrics
            self._tracer.put_annotation("operation_id", op_id)
            self._tracer.put_annotation("operation_name", name)
            self._tracer.put_annotation("operation_kind", kind)

    def on_operation_attempt_end(self, info: AttemptEndInfo) -> None:
        """Logs and counts failed and interrupted attempts (a retry, a dead worker)."""
        if info.outcome == "succeeded":
            return
        self._metrics.add_metric(name="AttemptsFailed", unit=MetricUnit.Count, value=1)
        self._logger.warning(
            "operation attempt failed"
            if info.outcome == "failed"
            else "operation attempt interrupted",
            extra={
                "op_id": info.op_id,
                "kind": info.kind,
                "attempt": info.attempt,
                "error_type": info.error_type,
                "next_attempt_at_ms": info.next_attempt_at_ms,
            },
        )
