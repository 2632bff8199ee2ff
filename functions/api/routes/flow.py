"""Flow control over the Api (IAM, SigV4; ADR 0030): a run tree's budget, and the queues.

* ``POST /runs/{run_id}/budget`` raises the budget of the run's tree and wakes the members it
  paused (``BUDGET_EXCEEDED``). Whoever may cancel the run may extend its budget: any mapped
  caller, for a run of the caller's tenant (``*``: any); another tenant's run is 404 like none.
* ``GET /flow`` shows every limited agent's queue and slots and every rate limit: figures of the
  whole deployment, so only for the operators' tenant ``*`` (or anyone where no ``TENANT_MAP``
  is configured: one tenant, the deployment's); a tenant's caller gets 403.
"""

from __future__ import annotations

from http import HTTPStatus

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from api.routes.common import BadRequest, json_body, ok
from api.routes.run_starts import MAX_BUDGET_TOKENS, MAX_BUDGET_USD
from api.routes.tenancy import iam_caller, owned_run, tenant_map
from api.services import get_runtime
from durable_agents.admin.flow_views import flow_overview
from durable_agents.aws.deferred import DeferredTracer
from durable_agents.core.ids import check_run_id
from durable_agents.core.tenancy import ALL_TENANTS
from durable_agents.engine.flow.extensions import extend_budget
from durable_agents.errors import DurableError
from durable_agents.tools import default_tools

logger = Logger(child=True)
# Made at the first traced call, not at import: it loads the X-Ray SDK (aws.deferred).
tracer = DeferredTracer()
router = Router()  # type: ignore[no-untyped-call]
MAX_BUDGET_REASON_CHARS = 500


class NotAnOperatorError(DurableError):
    """A deployment-wide view asked for by a tenant's caller, not an operator's (403)."""


class ExtendBudgetRequest(BaseModel):
    """Body of ``POST /runs/{run_id}/budget``: what to add, and why.

    Both amounts 0 raise nothing and only wake the members still paused (after a crash between
    an extension and its wake-ups).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    add_tokens: StrictInt = Field(default=0, ge=0, le=MAX_BUDGET_TOKENS)
    add_cost_usd: StrictFloat = Field(default=0.0, ge=0, le=MAX_BUDGET_USD)
    reason: str = Field(min_length=1, max_length=MAX_BUDGET_REASON_CHARS, pattern=r"\S")


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


def _extension(body: object) -> ExtendBudgetRequest:
    """The checked body: a bad one is a 400 that names each field that is wrong.

    Raises:
        BadRequest: If it is not ``{"add_tokens", "add_cost_usd", "reason"}`` as documented.
    """
    try:
        return ExtendBudgetRequest.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part)[:40] for part in e['loc']) or 'body'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        raise BadRequest(
            "the body must be {add_tokens: integer >= 0, add_cost_usd: number >= 0, "
            f"reason: 1-{MAX_BUDGET_REASON_CHARS} characters}}: {problems}"
        ) from exc


@router.post("/runs/<run_id>/budget")
@tracer.capture_method(capture_response=False)
def extend_run_budget(run_id: str) -> Response[str]:
    """Raises the budget of the run's tree (any run of it) and wakes the members it paused.

    Who may cancel the run may extend its budget; another tenant's run is 404, like none. The
    answer is the tree's budget after the extension (``extensions`` records who, why and when).
    A tree without a budget is 409.
    """
    event = _event()
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    request = _extension(json_body(event))
    owned_run(tenant, run_id)
    rt = get_runtime()
    state = extend_budget(
        rt.store, rt.clock, rt.publisher, run_id,
        add_tokens=request.add_tokens, add_cost_usd=request.add_cost_usd,
        by=principal.display, reason=request.reason,
    )  # fmt: skip
    logger.info(
        "run budget extended",
        extra={
            "run_id": run_id,
            "root_run_id": state.root,
            "add_tokens": request.add_tokens,
            "add_cost_usd": request.add_cost_usd,
            "exceeded": state.exceeded,
            "caller": principal.display,
        },
    )
    return ok(HTTPStatus.OK, {"run_id": run_id, "budget": state.to_dict()})


@router.get("/flow")
@tracer.capture_method(capture_response=False)
def get_flow() -> Response[str]:
    """Every limited agent's queue and slots (per key), and every rate limit's use (operators).

    Deployment-wide figures: the operators' tenant ``*`` only (anyone where no ``TENANT_MAP``
    is configured); a tenant's caller gets 403.
    """
    _, tenant = iam_caller(_event())
    if tenant != ALL_TENANTS and tenant_map().configured:
        raise NotAnOperatorError(
            "GET /flow shows every tenant's queues: only the operators' tenant (*) may read it"
        )
    rt = get_runtime()
    return ok(HTTPStatus.OK, flow_overview(rt.store, rt.registry, default_tools, rt.clock.now_ms()))
