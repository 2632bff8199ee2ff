"""Callbacks (IAM, SigV4): an external system completes an operation or says it is alive.

``POST /callbacks/{id}/success`` (body = the JSON result), ``/failure`` (``error_type``,
``error_message``) and ``/heartbeat``. A callback completes once: a second completion gets 409
with the first outcome, one after its deadline or a missed heartbeat gets 410. So does any of
the three after the callback's run finished: the callback is closed instead, and nothing of the
call is kept (docs/operations.md, "Retention").

``{id}`` is the full callback id the agent handed out (``<public id>_<secret>``); an id whose
secret does not match, or that has none, is 404 like an unknown one (``find_callback``).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from pydantic import BaseModel, ConfigDict, Field

from api.routes.common import callback_view, check_wait_id, json_body, ok, wake
from api.services import get_runtime
from durable_agents.auth.deciders import principal_from_iam
from durable_agents.core.models import WaitRecord, WaitStatus
from durable_agents.engine.operations.callback import complete_callback, find_callback, heartbeat
from durable_agents.engine.wait_records import WaitGoneError, closed_for_finished_run

logger = Logger(child=True)
router = Router()  # type: ignore[no-untyped-call]


class CallbackFailureRequest(BaseModel):
    """Body of ``POST /callbacks/{id}/failure``."""

    model_config = ConfigDict(extra="forbid")

    error_type: str = Field(min_length=1, max_length=256)
    error_message: str = Field(default="", max_length=8192)


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


def _pending(callback_id: str) -> tuple[str, WaitRecord]:
    caller = principal_from_iam(_event().raw_event)
    record = find_callback(get_runtime().store, check_wait_id(callback_id))
    if record.status is not WaitStatus.PENDING:
        raise WaitGoneError(record)
    return caller.identity, record


def _wake_if_timed_out(record: WaitRecord) -> None:
    """Wakes the run of a callback found timed out (not one closed for its finished run)."""
    if record.status is WaitStatus.EXPIRED and not closed_for_finished_run(record):
        wake(record.run_id, "callback-timed-out")


def _settle(record: WaitRecord, caller: str, **outcome: Any) -> Response[str]:
    rt = get_runtime()
    try:
        settled = complete_callback(rt.store, rt.clock, record, **outcome)
    except WaitGoneError as exc:
        _wake_if_timed_out(exc.record)
        raise
    wake(settled.run_id, "callback-completed")
    logger.info(
        "callback completed",
        extra={
            "callback_id": settled.wait_id,
            "run_id": settled.run_id,
            "failed": "error_type" in outcome,
            "caller": caller,
        },
    )
    return ok(HTTPStatus.OK, callback_view(settled))


@router.post("/callbacks/<callback_id>/success")
def callback_success(callback_id: str) -> Response[str]:
    """Completes the callback with the body as its JSON result (empty body = null)."""
    caller, record = _pending(callback_id)
    return _settle(record, caller, result=json_body(_event(), required=False))


@router.post("/callbacks/<callback_id>/failure")
def callback_failure(callback_id: str) -> Response[str]:
    """Completes the callback with a failure the agent receives as ``CallbackFailedError``."""
    caller, record = _pending(callback_id)
    request = CallbackFailureRequest.model_validate(json_body(_event()))
    return _settle(
        record, caller, error_type=request.error_type, error_message=request.error_message
    )


@router.post("/callbacks/<callback_id>/heartbeat")
def callback_heartbeat(callback_id: str) -> Response[str]:
    """Pushes the heartbeat deadline forward (a no-op for callbacks without one)."""
    _, record = _pending(callback_id)
    rt = get_runtime()
    try:
        beat = heartbeat(rt.store, rt.clock, record)
    except WaitGoneError as exc:
        _wake_if_timed_out(exc.record)
        raise
    if rt.wait_scheduler is not None and beat.due_at_ms is not None:
        rt.wait_scheduler.schedule(beat.wait_id, beat.due_at_ms)  # the deadline moved
    return ok(HTTPStatus.OK, callback_view(beat))
