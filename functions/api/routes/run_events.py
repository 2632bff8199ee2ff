"""Messages into a running run, and the value it publishes (IAM, SigV4; tenant-scoped).

``POST /runs/{run_id}/events/{name}``: the body (any JSON value; empty = null) is recorded
once as the next event of ``name`` for the run (``durable_agents.engine.inbox``); the agent takes
it with ``ctx.wait_for_event(name)``. An ``Idempotency-Key`` header names the event: sending
it again records nothing new and answers 200 with the same event (202 the first time). A
finished run, or one being stopped, answers 409, and so does a name new to a run that
already takes events of ``MAX_EVENT_NAMES`` (64) names; another tenant's run is 404 like none.

``GET /runs/{run_id}/status-value``: the latest value the agent published with
``ctx.set_status`` (``value`` null, ``set_at`` null if it never did), read from the journal in
one consistent load.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from api.routes.common import header, json_body, ok, wake
from api.routes.limits import check_key
from api.routes.tenancy import iam_caller, owned_run
from api.services import get_runtime
from durable_agents.aws.deferred import DeferredTracer
from durable_agents.core.clock import iso
from durable_agents.core.ids import check_name, check_run_id
from durable_agents.core.principals import Principal
from durable_agents.engine.generations import published_status
from durable_agents.engine.inbox import SentEvent, send_event

logger = Logger(child=True)
# Made at the first traced call, not at import: it loads the X-Ray SDK (aws.deferred).
tracer = DeferredTracer()
router = Router()  # type: ignore[no-untyped-call]


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


def sent_view(sent: SentEvent) -> dict[str, object]:
    """The answer to ``POST /runs/{id}/events/{name}``."""
    return {
        "run_id": sent.run_id,
        "name": sent.name,
        "event_id": sent.event_id,
        "seq": sent.seq,
        "received_at": iso(sent.received_at_ms),
        "duplicate": not sent.created,
    }


@router.post("/runs/<run_id>/events/<name>")
@tracer.capture_method(capture_response=False)
def post_run_event(run_id: str, name: str) -> Response[str]:
    """Records the body as the run's next ``name`` event (once per ``Idempotency-Key``)."""
    event = _event()
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    name = check_name(name, "event")
    key = header(event, "Idempotency-Key")
    if key:
        check_key(key, "the Idempotency-Key header")
    payload = json_body(event, required=False)
    sent = record_event(principal, tenant, run_id, name, payload, key or None)
    status = HTTPStatus.ACCEPTED if sent.created else HTTPStatus.OK
    return ok(status, sent_view(sent))


def record_event(
    principal: Principal, tenant: str, run_id: str, name: str, payload: Any, key: str | None
) -> SentEvent:
    """Records ``payload`` as the run's next ``name`` event and wakes the run.

    The Api's route and the console's form; ``run_id``, ``name`` and ``key`` are checked.

    Raises:
        RunNotFoundError: If there is no such run, or it is another tenant's (404).
        RunNotAcceptingEventsError: If the run is finished or being stopped (409).
    """
    owned_run(tenant, run_id)
    rt = get_runtime()
    sent = send_event(rt.store, rt.clock, run_id, name, payload, key)
    if sent.woke:
        # Lost, it is not lost: the run is RUNNING with the event recorded, and the
        # reconciler re-drives a RUNNING run that went idle.
        wake(run_id, "event-received")
    logger.info(
        "run event received",
        extra={
            "run_id": run_id,
            "event_name": name,
            "seq": sent.seq,
            "duplicate": not sent.created,
            "caller": principal.display,
        },
    )
    return sent


@router.get("/runs/<run_id>/status-value")
@tracer.capture_method(capture_response=False)
def get_status_value(run_id: str) -> Response[str]:
    """The latest value the run published with ``ctx.set_status`` (null if none)."""
    _, tenant = iam_caller(_event())
    run_id = check_run_id(run_id)
    owned_run(tenant, run_id)
    snapshot = get_runtime().store.load(run_id)
    published = published_status(get_runtime().store, snapshot)  # earlier generations too
    return ok(
        HTTPStatus.OK,
        {
            "run_id": run_id,
            "status": snapshot.header.status.value,
            "value": published.value,
            "set_at": iso(published.set_at_ms),
            "op_id": published.op_id,
        },
    )
