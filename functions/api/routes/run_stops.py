"""Stopping runs (IAM, SigV4): ``POST /runs/{id}/cancel`` and ``POST /runs/{id}/terminate``.

Both record the request in the run header and wake the run (``durable_agents.engine.cancellation``);
the run's StepRunner acts on it. The answer is 202 with the run as it now stands (the request
in ``cancel_requested``); the run's final status tells how it ended — a run whose last
operation was already recorded may still end SUCCEEDED. Another tenant's run is 404 like none;
a finished run is 409; a cancel of a PAUSED or VERSION_UNAVAILABLE run is 409 (its code cannot
run: terminate it).
"""

from __future__ import annotations

from http import HTTPStatus

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from pydantic import BaseModel, ConfigDict, Field

from api.routes.common import json_body, ok
from api.routes.tenancy import iam_caller, owned_run
from api.services import get_runtime
from durable_agents.admin.views import run_view
from durable_agents.aws.deferred import DeferredTracer
from durable_agents.core.ids import check_run_id
from durable_agents.core.models import RunHeader
from durable_agents.core.principals import Principal
from durable_agents.engine.cancellation import CANCEL, TERMINATE, request_stop

logger = Logger(child=True)
# Made at the first traced call, not at import: it loads the X-Ray SDK (aws.deferred).
tracer = DeferredTracer()
router = Router()  # type: ignore[no-untyped-call]
MAX_REASON_CHARS = 1000


class StopRunRequest(BaseModel):
    """Body of ``POST /runs/{run_id}/cancel`` and ``/terminate`` (optional)."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", max_length=MAX_REASON_CHARS)


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


@router.post("/runs/<run_id>/cancel")
@tracer.capture_method(capture_response=False)
def cancel(run_id: str) -> Response[str]:
    """Asks the run to stop cooperatively: its agent sees ``RunCancelledError`` and may clean up."""
    return _stop(run_id, CANCEL)


@router.post("/runs/<run_id>/terminate")
@tracer.capture_method(capture_response=False)
def terminate(run_id: str) -> Response[str]:
    """Stops the run at once, without running its agent code again."""
    return _stop(run_id, TERMINATE)


def _stop(run_id: str, mode: str) -> Response[str]:
    event = _event()
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    body = json_body(event, required=False)
    request = StopRunRequest.model_validate({} if body is None else body)
    header = stop_run(principal, tenant, run_id, mode, request)
    return ok(HTTPStatus.ACCEPTED, run_view(header))


def stop_run(
    principal: Principal, tenant: str, run_id: str, mode: str, request: StopRunRequest
) -> RunHeader:
    """Records a stop of one of the tenant's runs and wakes it (the Api's and the console's).

    Raises:
        RunNotFoundError: If there is no such run, or it is another tenant's (404).
        RunNotCancellableError: If the run is finished, or cannot run its code to cancel (409).
    """
    owned_run(tenant, run_id)
    rt = get_runtime()
    header = request_stop(
        rt.store, rt.clock, rt.publisher, run_id, mode=mode, reason=request.reason,
        by=principal.display,
    )  # fmt: skip
    logger.info(
        f"run {mode} requested",
        extra={"run_id": run_id, "mode": mode, "caller": principal.display},
    )
    return header
