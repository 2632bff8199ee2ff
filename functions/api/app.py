"""Api: thin HTTP handlers over the runtime (one Powertools resolver, IAM-authorised routes).

Every rejection is a 4xx with ``{"error": {"type": ..., "message": ...}}`` saying what is wrong.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from durable_agents.deployment import Settings, build_runtime
from durable_agents.errors import (
    AgentNotFoundError,
    EffectNotFoundError,
    IdempotencyConflictError,
    InvalidNameError,
    PayloadError,
    RunNotFoundError,
    RunStateConflictError,
)
from durable_agents.events import step_ready
from durable_agents.models import RunStatus
from durable_agents.runtime import InputValidationError, Runtime
from durable_agents.side_effects.review import (
    Decision,
    ReviewAlreadyDecidedError,
    ReviewRequest,
    ReviewResultError,
    resolve,
)
from durable_agents.side_effects.tools import default_tools
from durable_agents.views import effect_view, history, run_view

logger = Logger()
tracer = Tracer()
app = APIGatewayRestResolver()

_runtime: Runtime | None = None
MAX_LIMIT = 100


def get_runtime() -> Runtime:
    """Builds the runtime once per execution environment (on first use, not at import)."""
    global _runtime  # noqa: PLW0603 - one runtime per Lambda execution environment
    if _runtime is None:
        _runtime = build_runtime(Settings.from_env(), logger=logger)
    return _runtime


class ReviewDecisionRequest(BaseModel):
    """Body of ``POST /reviews/{operation_id}``."""

    model_config = ConfigDict(extra="forbid")

    decision: Decision
    comment: str = Field(default="", max_length=2000)
    result: Any = None
    external_id: str | None = Field(default=None, max_length=256)


class StartRunRequest(BaseModel):
    """Body of ``POST /runs``."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=80)
    input: Any = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)


def _error(status: HTTPStatus, error_type: str, message: str, **extra: Any) -> Response[str]:
    body = {"error": {"type": error_type, "message": message, **extra}}
    return Response(
        status_code=status.value, content_type="application/json", body=json.dumps(body)
    )


def _ok(status: HTTPStatus, body: Any, headers: dict[str, str] | None = None) -> Response[str]:
    return Response(
        status_code=status.value,
        content_type="application/json",
        body=json.dumps(body),
        headers=headers,
    )


class BadRequest(Exception):
    """The request is malformed (not JSON, wrong parameter)."""


# What each domain error means for an HTTP caller. Domain exceptions carry no status codes.
ERROR_STATUS: dict[type[Exception], HTTPStatus] = {
    BadRequest: HTTPStatus.BAD_REQUEST,
    InvalidNameError: HTTPStatus.BAD_REQUEST,
    AgentNotFoundError: HTTPStatus.NOT_FOUND,
    RunNotFoundError: HTTPStatus.NOT_FOUND,
    EffectNotFoundError: HTTPStatus.NOT_FOUND,
    ReviewAlreadyDecidedError: HTTPStatus.CONFLICT,
    ReviewResultError: HTTPStatus.UNPROCESSABLE_ENTITY,
    IdempotencyConflictError: HTTPStatus.CONFLICT,
    RunStateConflictError: HTTPStatus.CONFLICT,
    InputValidationError: HTTPStatus.UNPROCESSABLE_ENTITY,
    PayloadError: HTTPStatus.UNPROCESSABLE_ENTITY,
    ValidationError: HTTPStatus.UNPROCESSABLE_ENTITY,
}


def error_response(exc: Exception) -> Response[str]:
    """Turns a known error into a 4xx response that says what is wrong."""
    status = next(
        (code for cls, code in ERROR_STATUS.items() if isinstance(exc, cls)),
        HTTPStatus.BAD_REQUEST,
    )
    extra: dict[str, Any] = {}
    message = str(exc)
    if isinstance(exc, ValidationError):
        message = "the request body does not match the schema"
        extra["details"] = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
    elif isinstance(exc, InputValidationError):
        message = f"input does not match agent {exc.agent!r}"
        extra["details"] = exc.errors
    elif isinstance(exc, IdempotencyConflictError):
        extra["run_id"] = exc.existing_run_id
    elif isinstance(exc, ReviewAlreadyDecidedError):
        extra["current"] = effect_view(exc.record)
    return _error(status, type(exc).__name__, message, **extra)


for _error_type in ERROR_STATUS:
    app.exception_handler(_error_type)(error_response)


def _body() -> Any:
    raw = app.current_event.body
    if raw is None or raw == "":
        raise BadRequest("the request needs a JSON body")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc.msg} at position {exc.pos}") from exc


def _caller() -> str:
    identity = app.current_event.request_context.identity
    return str(identity.user_arn or identity.caller or identity.source_ip or "unknown")


@app.post("/runs")
@tracer.capture_method(capture_response=False)
def start_run() -> Response[str]:
    """Starts a run. Repeating a request with the same idempotency key returns the same run."""
    request = StartRunRequest.model_validate(_body())
    header_key = app.current_event.headers.get("Idempotency-Key") or app.current_event.headers.get(
        "idempotency-key"
    )
    if header_key and request.idempotency_key and header_key != request.idempotency_key:
        raise BadRequest("the Idempotency-Key header and the body's idempotency_key differ")
    key = request.idempotency_key or header_key
    run, created = get_runtime().start_run(request.agent, request.input, idempotency_key=key)
    logger.info(
        "run started" if created else "run start repeated",
        extra={"run_id": run.run_id, "agent": run.agent, "caller": _caller()},
    )
    status = HTTPStatus.CREATED if created else HTTPStatus.OK
    return _ok(
        status,
        {"created": created, "run": run_view(run)},
        headers={"Location": f"/runs/{run.run_id}"},
    )


@app.get("/runs")
@tracer.capture_method(capture_response=False)
def list_runs() -> Response[str]:
    """Lists runs, optionally by ``status``, newest first (``limit`` ≤ 100, ``cursor``)."""
    params = app.current_event.query_string_parameters or {}
    status = None
    if params.get("status"):
        try:
            status = RunStatus(params["status"].upper())
        except ValueError as exc:
            allowed = ", ".join(s.value for s in RunStatus)
            raise BadRequest(f"unknown status {params['status']!r}; use one of {allowed}") from exc
    try:
        limit = int(params.get("limit", "50"))
    except ValueError as exc:
        raise BadRequest("limit must be an integer") from exc
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}")
    page = get_runtime().store.list_runs(status=status, limit=limit, cursor=params.get("cursor"))
    return _ok(HTTPStatus.OK, {"runs": [run_view(h) for h in page.runs], "cursor": page.cursor})


@app.get("/runs/<run_id>")
@tracer.capture_method(capture_response=False)
def get_run(run_id: str) -> Response[str]:
    """Returns a run's status, result or error, and what it is waiting on."""
    return _ok(HTTPStatus.OK, run_view(get_runtime().store.get_run(run_id)))


@app.get("/runs/<run_id>/history")
@tracer.capture_method(capture_response=False)
def get_history(run_id: str) -> Response[str]:
    """Returns the run's journal as events in program order."""
    snapshot = get_runtime().store.load(run_id)
    return _ok(HTTPStatus.OK, {"run_id": run_id, "events": history(snapshot)})


@app.post("/runs/<run_id>/redrive")
@tracer.capture_method(capture_response=False)
def redrive(run_id: str) -> Response[str]:
    """Resumes a PAUSED run after a fix was deployed, or nudges a stalled one."""
    header = get_runtime().redrive(run_id)
    logger.info("run re-driven", extra={"run_id": run_id, "caller": _caller()})
    return _ok(HTTPStatus.ACCEPTED, run_view(header))


@app.get("/reviews")
@tracer.capture_method(capture_response=False)
def list_reviews() -> Response[str]:
    """Lists tool calls waiting for a person, with the exact request that would execute."""
    records = get_runtime().store.effects_in_review(limit=MAX_LIMIT)
    return _ok(HTTPStatus.OK, {"reviews": [effect_view(r) for r in records]})


@app.post("/reviews/<operation_id>")
@tracer.capture_method(capture_response=False)
def decide_review(operation_id: str) -> Response[str]:
    """Records a person's decision (committed / retry / abandon) once and resumes the run."""
    body = ReviewDecisionRequest.model_validate(_body())
    runtime = get_runtime()
    # Operation ids of nested scopes contain "/": clients send it percent-encoded.
    operation_id = unquote(operation_id)
    record = resolve(
        runtime.store,
        default_tools,
        runtime.clock,
        operation_id,
        ReviewRequest(
            decision=body.decision,
            decided_by=_caller(),
            comment=body.comment,
            result=body.result,
            external_id=body.external_id,
        ),
    )
    runtime.publisher.publish([step_ready(record.run_id, "review-decided")])
    logger.info(
        "review decided",
        extra={"operation_id": operation_id, "decision": body.decision.value, "caller": _caller()},
    )
    return _ok(HTTPStatus.OK, effect_view(record))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The API Gateway (REST, proxy) entry point."""
    return app.resolve(event, context)
