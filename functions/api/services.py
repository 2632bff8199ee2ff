"""What the Api's execution environment holds once: its logger and its runtime.

Below both the resolver (``api.app``) and the route groups (``api.routes``), which import it:
the routes never import the app that mounts them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from durable_agents.aws.settings import Settings
from durable_agents.aws.telemetry import RunsStarted
from durable_agents.core.log_context import LOG_LOCATION
from durable_agents.core.scrub import ScrubFilter

if TYPE_CHECKING:
    from durable_agents.engine.runtime import Runtime

logger = Logger(location=LOG_LOCATION)  # file:function:line (durable_agents.core.log_context)
# Revealed secrets are masked in every line this function writes (durable_agents.core.scrub).
logger.registered_handler.addFilter(ScrubFilter())

_runtime: Runtime | None = None


def get_runtime() -> Runtime:
    """Builds the runtime once per execution environment (on first use, not at import)."""
    global _runtime  # noqa: PLW0603 - one runtime per Lambda execution environment
    if _runtime is None:
        # Imported by the first invocation, not at init: the DynamoDB journal and the AWS
        # adapters it loads (docs/benchmarks.md, "Cold start").
        from durable_agents.aws.deployment import build_runtime  # noqa: PLC0415 - cold start

        # RunsStarted by agent, for every run a request creates (durable_agents.aws.telemetry).
        _runtime = build_runtime(Settings.from_env(), logger=logger, plugins=[RunsStarted()])
    return _runtime
