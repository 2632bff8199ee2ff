"""Reconciler: every minute, recover stale calls, expire waits, fire timers, re-drive stalls."""

from __future__ import annotations

import contextlib
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from durable_agents.admin.flow_views import flow_overview
from durable_agents.admin.gauges import measure
from durable_agents.admin.reconciler import expire_wait, sweep, wake_run
from durable_agents.aws.deferred import DeferredTracer
from durable_agents.aws.settings import Settings, import_agent_modules
from durable_agents.aws.telemetry import emit_single_metric, flush_metrics_safely, trace_safely
from durable_agents.core.log_context import LOG_LOCATION, LogContextFilter
from durable_agents.core.scrub import ScrubFilter
from durable_agents.errors import InfrastructureError, InvocationRetryError
from durable_agents.tools import default_tools

if TYPE_CHECKING:
    from durable_agents.engine.runtime import Runtime

# ctx.logger), and every line of an invocation names its run, agent and operation.
logger = Logger(location=LOG_LOCATION)
# Revealed secrets are masked in every line this function writes (durable_agents.core.scrub).
logger.registered_handler.addFilter(ScrubFilter())
logger.registered_handler.addFilter(LogContextFilter())
# Made at the first invocation, not at init: it loads the X-Ray SDK (durable_agents.aws.deferred).
tracer = DeferredTracer()
metrics = Metrics()
# At init, not on the first event: a module that does not import fails the deployment at once.
AGENTS = import_agent_modules()

_runtime: Runtime | None = None
_settings: Settings | None = None


def get_runtime() -> tuple[Runtime, Settings]:
    """Builds the runtime once per execution environment."""
    global _runtime, _settings  # noqa: PLW0603 - one runtime per execution environment
    if _runtime is None or _settings is None:
        # Imported by the first invocation, not at init: the DynamoDB journal and the AWS
        # adapters it loads (docs/benchmarks.md, "Cold start").
        from durable_agents.aws.deployment import build_runtime  # noqa: PLC0415 - cold start

        _settings = Settings.from_env()
        _runtime = build_runtime(_settings, logger=logger)
    return _runtime, _settings


@flush_metrics_safely(metrics)  # a failed flush never fails an invocation that committed
@trace_safely(tracer)  # a tracer that fails never fails the invocation
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Runs one sweep (or one scheduled wake-up) and reports what it did.

    Raises:
        InvocationRetryError: If the journal or the bus failed for the whole invocation
            (nothing was decided on it; the schedule or Lambda retries).
    """
    try:
        return _handle(event, context)
    except InfrastructureError as exc:
        logger.warning(
            "reconciler aborted by an infrastructure failure; it is retried",
            extra={"operation": exc.operation, "code": exc.code},
        )
        raise InvocationRetryError(exc) from exc


# What the sweep did, as one metric by action (the counts above stay, for old dashboards).
RECONCILER_ACTIONS = frozenset(
    {
        "timers_fired",
        "stalled_redriven",
        "suspended_redriven",
        "version_resumed",
        "effects_found",
        "effects_retried",
        "effects_escalated",
        "effects_schema_mismatch",
        "effects_finished_run",
        "effects_deferred",
        "waits_expired",
        "flow_reclaimed",
        "flow_granted",
        "flow_requeued",
        "budget_woken",
    }
)
GAUGES = (
    ("RunsPaused", "runs_paused"),
    ("ApprovalsPending", "approvals_pending"),
    ("ReviewsPending", "reviews_pending"),
)


def _emit(
    name: str, value: float, dimensions: dict[str, str], unit: MetricUnit = MetricUnit.Count
) -> None:
    """One metric with its own dimensions; one that cannot be written is logged, not raised."""
    try:
        emit_single_metric(name, unit, value, dimensions)
    except Exception:
        with contextlib.suppress(Exception):
            logger.warning("a metric could not be written; ignored", extra={"metric": name})


def _report_gauges(runtime: Runtime) -> None:
    """What waits for a person: totals (what the alarms watch) and by agent, once per sweep.

    A reading that fails is reported as ``GaugeReadErrors``: the sweep's work is done, and a
    gauge is never worth failing (and re-running) it.
    """
    try:
        gauges = measure(runtime.store)
    except (Exception, InfrastructureError):
        metrics.add_metric(name="GaugeReadErrors", unit=MetricUnit.Count, value=1)
        with contextlib.suppress(Exception):
            logger.warning("the sweep's gauges could not be read", exc_info=True)
        return
    for name, attribute in GAUGES:
        counts = getattr(gauges, attribute)
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=sum(counts.values()))
        for agent in gauges.agents():
            _emit(name, counts.get(agent, 0), {"agent": agent})
    if gauges.capped:
        logger.warning("gauges capped; the real counts are higher", extra={"capped": gauges.capped})


def _report_flow(runtime: Runtime) -> None:
    """Flow control's gauges, once per sweep (ADR 0030): by agent and by rate limit.

    ``QueuedRuns``, ``RunningRuns`` and ``OldestQueuedWaitMs`` (0 when nobody waits) for each
    agent with a concurrency limit (dimension ``agent``; never a key: keys are unbounded), and
    ``RateLimitWaitsToday`` for each declared rate limit (dimension ``limiter``), and
    ``ProviderThrottlesToday`` for each registered model configuration's provider and model
    (the provider's own throttles, backed off durably). A reading
    that fails is counted in ``GaugeReadErrors``, like the other gauges: it never fails the
    sweep.
    """
    try:
        overview = flow_overview(
            runtime.store, runtime.registry, default_tools, runtime.clock.now_ms()
        )
    except (Exception, InfrastructureError):
        metrics.add_metric(name="GaugeReadErrors", unit=MetricUnit.Count, value=1)
        with contextlib.suppress(Exception):
            logger.warning("the sweep's flow gauges could not be read", exc_info=True)
        return
    for agent in overview["agents"]:
        dimensions = {"agent": str(agent["agent"])}
        _emit("QueuedRuns", agent["queued"], dimensions)
        _emit("RunningRuns", agent["running"], dimensions)
        wait = agent["oldest_wait_ms"]
        _emit("OldestQueuedWaitMs", wait or 0, dimensions, MetricUnit.Milliseconds)
    for limit in overview["rate_limits"]:
        _emit("RateLimitWaitsToday", limit["waits_today"], {"limiter": str(limit["limiter"])})
    for throttle in overview["provider_throttles"]:
        dimensions = {"provider": str(throttle["provider"]), "model": str(throttle["model_id"])}
        _emit("ProviderThrottlesToday", throttle["throttled_today"], dimensions)


def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    runtime, settings = get_runtime()
    if isinstance(event.get("run_id"), str):  # a run timer's one-time schedule fired
        woken = wake_run(runtime, event["run_id"])
        metrics.add_metric(name="TimersFired", unit=MetricUnit.Count, value=int(woken))
        return {"run_id": event["run_id"], "woken": woken}
    if isinstance(event.get("wait_id"), str):  # a deadline's one-time schedule fired
        expired = expire_wait(runtime, event["wait_id"])
        metrics.add_metric(name="WaitsExpired", unit=MetricUnit.Count, value=int(expired))
        return {"wait_id": event["wait_id"], "expired": expired}
    report = sweep(
        runtime,
        stall_after_ms=settings.stall_after_seconds * 1000,
        remaining_ms=context.get_remaining_time_in_millis,
    )
    for name, value in (
        ("TimersFired", report.timers_fired),
        ("StalledRunsRedriven", report.stalled_redriven),
        ("StuckSuspendedRunsRedriven", report.suspended_redriven),
        ("EffectsFound", report.effects_found),
        ("EffectsRetried", report.effects_retried),
        ("EffectsEscalated", report.effects_escalated),
        ("EffectsSchemaMismatch", report.effects_schema_mismatch),
        ("EffectsOfFinishedRuns", report.effects_finished_run),
        ("EffectsSkipped", report.effects_skipped),
        ("EffectsDeferred", report.effects_deferred),
        ("WaitsExpired", report.waits_expired),
        ("FlowSlotsReclaimed", report.flow_reclaimed),
        ("FlowGranted", report.flow_granted),
        ("FlowRequeued", report.flow_requeued),
        ("BudgetWoken", report.budget_woken),
        ("StaleListings", report.stale_listings),
        ("SweepUnitErrors", report.unit_errors),
        ("SweepInfrastructureErrors", report.infrastructure_errors),
    ):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    for action, value in sorted(asdict(report).items()):
        if action in RECONCILER_ACTIONS and value:
            _emit("ReconcilerActions", value, {"action": action})
    _report_gauges(runtime)
    _report_flow(runtime)
    failed = report.unit_errors + report.infrastructure_errors
    # Failed units are isolated (the sweep went on); a warning makes them findable.
    log = logger.warning if failed else logger.info
    log("sweep finished", extra=asdict(report))
    return asdict(report)
