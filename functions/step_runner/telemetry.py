"""The StepRunner's logs, metrics and trace annotations, as a runtime plugin.

Built on the runtime's instrumentation hooks (``durable_agents.plugins``): what the handler used
to log and count after ``execute`` returned is reported from ``on_invocation_end``, and failed
attempts and operations are reported as they are recorded. Replayed operations are never
counted or logged again. A hook that raises is logged by the runtime and changes nothing.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from durable_agents.plugins import (
    AttemptEndInfo,
    InvocationEndInfo,
    InvocationStartInfo,
    OperationEndInfo,
    Plugin,
)


class PowertoolsPlugin(Plugin):
    """Reports invocations, operations and attempts to Powertools' logger, metrics and tracer.

    Args:
        logger: A Powertools ``Logger`` (or anything with ``info`` and ``warning``).
        metrics: A Powertools ``Metrics`` (``add_metric``).
        tracer: A Powertools ``Tracer`` (``put_annotation``).
    """

    def __init__(self, *, logger: Any, metrics: Any, tracer: Any):
        self._logger = logger
        self._metrics = metrics
        self._tracer = tracer

    def on_invocation_start(self, info: InvocationStartInfo) -> None:
        """Annotates the invocation's trace with its run, so X-Ray can find it by run id."""
        self._tracer.put_annotation("run_id", info.run_id)

    def on_invocation_end(self, info: InvocationEndInfo) -> None:
        """``invocation finished`` and ``OperationsExecuted``, as the handler always wrote them.

        An invocation an exception escaped reports nothing here: the handler logs why (an
        infrastructure failure) and Lambda delivers the event again.
        """
        if info.outcome is None:
            return
        self._metrics.add_metric(
            name="OperationsExecuted", unit=MetricUnit.Count, value=len(info.executed)
        )
        self._logger.info(
            "invocation finished",
            extra={"outcome": info.outcome, "executed": list(info.executed), "detail": info.detail},
        )

    def on_operation_end(self, info: OperationEndInfo) -> None:
        """Counts operations finished by this invocation; logs the failed ones."""
        if info.replayed or info.outcome == "pending":
            return
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
