"""Starting and re-driving runs, for ``POST /runs``, ``POST /runs/{id}/redrive`` and the console.

The console's forms (``routes.console``) go through the same code paths as the JSON routes.

Kept apart from ``routes.runs`` (which imports the console for its HTML history), so the
console can call them without an import cycle.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from aws_lambda_powertools import Logger
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from api.routes.common import BadRequest
from api.routes.limits import check_key
from api.routes.tenancy import owned_run
from api.services import get_runtime
from durable_agents.core.models import RunHeader
from durable_agents.core.tenancy import ALL_TENANTS, DEFAULT_TENANT
from durable_agents.flow_control import Budget, check_priority

logger = Logger(child=True)
MAX_TIMEOUT_SECONDS = 366 * 24 * 3600
MAX_BUDGET_TOKENS = 10**12
"""The largest token budget (or extension) a request may set: far past any real tree's use."""
MAX_BUDGET_USD = 10**9
"""The largest money budget (or extension) in dollars a request may set."""

# Checked by the route (``start_in_tenant``), not by pydantic, so a bad priority or budget is
# a 400 with the flow-control library's own message; the schemas document what is accepted.
_PRIORITY_SCHEMA = {
    "anyOf": [{"type": "integer", "minimum": 1, "maximum": 5}, {"type": "null"}],
    "description": "1 (highest) to 5 (lowest); 3 when absent. Orders the run in its agent's "
    "queue and at rate limits (ADR 0030). Anything else is 400.",
}
_BUDGET_SCHEMA = {
    "anyOf": [
        {
            "type": "object",
            "properties": {
                "tokens": {"type": "integer", "minimum": 1, "maximum": MAX_BUDGET_TOKENS},
                "cost_usd": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_BUDGET_USD},
                "on_exceeded": {"type": "string", "enum": ["pause", "fail"], "default": "pause"},
            },
            "additionalProperties": False,
        },
        {"type": "null"},
    ],
    "description": "Tokens and money for this run and every sub-agent it starts (replaces its "
    "agent's budget): at least one of tokens and cost_usd. Anything else is 400.",
}


class StartRunRequest(BaseModel):
    """Body of ``POST /runs``."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=80)
    input: Any = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    execution_timeout: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_SECONDS)
    """This run's time limit in seconds (replaces the agent's ``execution_timeout``)."""
    priority: Annotated[Any, WithJsonSchema(_PRIORITY_SCHEMA)] = None
    """1 (highest) to 5 (lowest); None: normal (3). Checked by ``run_priority``."""
    budget: Annotated[Any, WithJsonSchema(_BUDGET_SCHEMA)] = None
    """``{"tokens", "cost_usd", "on_exceeded"}``; None: the agent's. Checked by ``run_budget``."""


def run_priority(value: Any) -> int | None:
    """A start's ``priority`` (None: the default).

    Raises:
        BadRequest: If it is not an integer from 1 to 5.
    """
    if value is None:
        return None
    try:
        return check_priority(value)
    except ValueError as exc:
        raise BadRequest(str(exc)[:200]) from exc


def run_budget(value: Any) -> Budget | None:
    """A start's ``budget`` (None: its agent's).

    Raises:
        BadRequest: If it is not ``{"tokens": int, "cost_usd": number, "on_exceeded": ...}``
            with at least one positive, finite limit in range.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest('budget must be an object: {"tokens", "cost_usd", "on_exceeded"}')
    unknown = sorted(set(value) - {"tokens", "cost_usd", "on_exceeded"})
    if unknown:
        raise BadRequest(f"budget has no fields {unknown[:5]}; use tokens, cost_usd, on_exceeded")
    tokens, cost = value.get("tokens"), value.get("cost_usd")
    if tokens is not None and (
        isinstance(tokens, bool)
        or not isinstance(tokens, int)
        or not 1 <= tokens <= MAX_BUDGET_TOKENS
    ):
        raise BadRequest(f"budget.tokens must be an integer from 1 to {MAX_BUDGET_TOKENS}")
    if cost is not None and (
        isinstance(cost, bool)
        or not isinstance(cost, int | float)
        or not math.isfinite(cost)
        or not 0 < cost <= MAX_BUDGET_USD
    ):
        raise BadRequest(f"budget.cost_usd must be a number above 0, at most {MAX_BUDGET_USD}")
    on_exceeded = value.get("on_exceeded", "pause")
    if on_exceeded not in ("pause", "fail"):
        raise BadRequest("budget.on_exceeded must be 'pause' or 'fail'")
    try:
        return Budget.from_dict(value)
    except ValueError as exc:  # no limit at all (the checks above took the rest)
        raise BadRequest(f"budget: {str(exc)[:200]}") from exc


def start_in_tenant(
    tenant: str, request: StartRunRequest, header_key: str | None, caller: str
) -> tuple[RunHeader, bool]:
    """Starts a run in the caller's tenant (``POST /runs``'s and the console's).

    Idempotency keys are per tenant: another tenant's key never names (or reveals) a run of
    this one. The operators' tenant ``*`` owns no runs: its starts go to the default tenant.

    Returns:
        The run and whether this call created it (False: the key named an earlier start).

    Raises:
        BadRequest: If the header's and the body's keys differ, a key is malformed, or the
            priority or budget is not one.
    """
    if header_key and request.idempotency_key and header_key != request.idempotency_key:
        raise BadRequest("the Idempotency-Key header and the body's idempotency_key differ")
    if header_key:
        check_key(header_key, "the Idempotency-Key header")
    if request.idempotency_key:
        check_key(request.idempotency_key, "idempotency_key")
    key = request.idempotency_key or header_key
    priority, budget = run_priority(request.priority), run_budget(request.budget)
    owner = DEFAULT_TENANT if tenant == ALL_TENANTS else tenant
    run, created = get_runtime().start_run(
        request.agent,
        request.input,
        idempotency_key=key,
        tenant=owner,
        execution_timeout=request.execution_timeout,
        priority=priority,
        budget=budget,
    )
    logger.info(
        "run started" if created else "run start repeated",
        extra={"run_id": run.run_id, "agent": run.agent, "tenant": run.tenant, "caller": caller},
    )
    return run, created


def redrive_run(tenant: str, run_id: str, caller: str) -> RunHeader:
    """Resumes a PAUSED run or nudges a stalled one (``POST /runs/{id}/redrive``, the console).

    Raises:
        RunNotFoundError: If there is no such run, or it is another tenant's (404).
        RunStateConflictError: If the run has finished (409).
    """
    owned_run(tenant, run_id)
    header = get_runtime().redrive(run_id)
    logger.info("run re-driven", extra={"run_id": run_id, "caller": caller})
    return header
