"""StepRunner: one ``Step Ready`` event = one durable step of one run.

Load the journal (strongly consistent), replay the agent from the top, execute the first
unrecorded operation, record it with a conditional write, publish the next ``Step Ready``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field

from durable_agents.aws.deferred import DeferredTracer
from durable_agents.aws.settings import Settings, import_agent_modules
from durable_agents.aws.telemetry import PowertoolsPlugin, flush_metrics_safely, trace_safely
from durable_agents.core.log_context import LOG_LOCATION, LogContextFilter
from durable_agents.core.observability import agent_logger as make_agent_logger
from durable_agents.core.scrub import ScrubFilter
from durable_agents.engine.events import STEP_READY
from durable_agents.engine.outcomes import OutcomeKind
from durable_agents.errors import InfrastructureError, InvocationRetryError, RunNotFoundError

if TYPE_CHECKING:
    from durable_agents.engine.runtime import Runtime

# The function's own lines (the runtime's plugin, the handler's warnings) at LOG_LEVEL; every
# line of an invocation names its run, agent and operation.
logger = Logger(location=LOG_LOCATION)
# Revealed secrets are masked in every line this function writes (durable_agents.core.scrub).
logger.registered_handler.addFilter(ScrubFilter())
logger.registered_handler.addFilter(LogContextFilter())
# The agents' lines (ctx.logger): a child of ``logger``, so the same JSON lines and filters,
# at AGENT_LOG_LEVEL (INFO by default): an agent's info shows while the runtime's is hidden.
agent_logger = make_agent_logger(logger.name)
# Made at the first invocation, not at init: it loads the X-Ray SDK (durable_agents.aws.deferred).
tracer = DeferredTracer()
metrics = Metrics()
# At init, not on the first event: a module that does not import fails the deployment at once.
AGENTS = import_agent_modules()

_runtime: Runtime | None = None
# The result stays small (Lambda keeps it in its logs): the error's first characters only.
_ERROR_CHARS = 300


class StepReadyDetail(BaseModel):
    """The detail of a ``Step Ready`` event."""

    run_id: str = Field(min_length=1, max_length=128)
    reason: str = ""
    target: str | None = Field(default=None, max_length=1024)
    """A parallel branch to advance (its position), or None for the whole run."""


def get_runtime() -> Runtime:
    """Builds the runtime once per execution environment (on first use, not at import)."""
    global _runtime  # noqa: PLW0603 - one runtime per Lambda execution environment
    if _runtime is None:
        # Imported by the first invocation, not at init: the DynamoDB journal and the AWS
        # adapters it loads (docs/benchmarks.md, "Cold start").
        from durable_agents.aws.deployment import build_runtime  # noqa: PLC0415 - cold start

        # Its logs, metrics and trace annotations come from the runtime's plugin hooks.
        plugin = PowertoolsPlugin(logger=logger, metrics=metrics, tracer=tracer)
        _runtime = build_runtime(Settings.from_env(), logger=agent_logger, plugins=[plugin])
    return _runtime


@flush_metrics_safely(metrics)  # a failed flush never fails an invocation that committed
@trace_safely(tracer)  # a tracer that fails never fails the invocation
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Advances one run by one operation (or by the agent's ``invocation_budget``).

    Raises:
        ValidationError: If the event is malformed (after Lambda's retries it goes to the DLQ).
        ValueError: If the event is not a ``Step Ready`` event.
        EventPublishError: If the follow-up event could not be published (Lambda retries;
            nothing recorded is repeated).
        InvocationRetryError: If the journal or the bus failed (throttling, a 500, a timeout):
            nothing was recorded as the run's outcome and Lambda delivers the event again.
    """
    envelope = EventBridgeModel.model_validate(event)
    if envelope.detail_type != STEP_READY:
        raise ValueError(f"expected a {STEP_READY!r} event, got {envelope.detail_type!r}")
    detail = StepReadyDetail.model_validate(envelope.detail)
    logger.append_keys(run_id=detail.run_id)
    try:
        outcome = get_runtime().execute(
            detail.run_id,
            agent_budget=True,  # the agent's invocation_budget: one operation by default
            remaining_ms=context.get_remaining_time_in_millis(),
            target=detail.target,
        )
    except InfrastructureError as exc:
        logger.warning(
            "invocation aborted by an infrastructure failure; it is retried",
            extra={"operation": exc.operation, "code": exc.code},
        )
        metrics.add_metric(name="InfrastructureAborts", unit=MetricUnit.Count, value=1)
        raise InvocationRetryError(exc) from exc
    except RunNotFoundError:
        # Retrying cannot make a missing run appear: report and drop the event.
        logger.warning("Step Ready for an unknown run", extra={"reason": detail.reason})
        return {"run_id": detail.run_id, "outcome": "not_found", "executed": []}
    # "invocation finished" and OperationsExecuted: PowertoolsPlugin.on_invocation_end. The
    # agent, and why a run failed or paused, are for the line a person reads about this
    # invocation (local mode's terminal: durable_agents_local.invoke).
    result: dict[str, Any] = {
        "run_id": detail.run_id,
        "agent": outcome.agent,
        "outcome": outcome.kind.value,
        "executed": outcome.executed,
    }
    if outcome.kind in (OutcomeKind.FAILED, OutcomeKind.PAUSED) and outcome.detail:
        result["error"] = outcome.detail[:_ERROR_CHARS]
    return result
