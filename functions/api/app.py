"""Api: thin HTTP handlers over the runtime (one Powertools resolver and its route groups).

The routes (runs, reviews, approvals with IAM, JWT or signed links, callbacks, streams, the
console) are ``api.routes``' ``Router``s, included here; what they share with this module (the
logger, the runtime) is ``api.services``, below both: a route never imports this module.
Everything a caller names is looked up within the caller's tenant (``api.routes.tenancy``):
another tenant's is 404, exactly like none. Every rejection is a 4xx with
``{"error": {"type": ..., "message": ...}}`` saying what is wrong (an HTML page instead when a
browser asked for one).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from api.approval_page import LINK_PAGE_HEADERS, render_message_page
from api.authn import require_iam_identity
from api.cross_site import CrossSiteRequestError, UnsupportedMediaTypeError, refuse_cross_site
from api.routes import (
    approvals,
    callbacks,
    console,
    flow,
    openapi_doc,
    reruns,
    reviews,
    run_events,
    run_stops,
    runs,
    streams,
)
from api.routes.common import (
    BadRequest,
    UnprocessableRequest,
    error,
    html,
    prefers_html,
    wait_view,
)
from api.routes.limits import PayloadTooLargeError
from api.routes.tenancy import TenantNotMappedError
from api.sam_emulator import authenticate as sam_emulator_authenticate
from api.services import logger
from durable_agents.admin.review import (
    NotAReviewerError,
    ReviewAlreadyDecidedError,
    ReviewResultError,
)
from durable_agents.admin.views import effect_view
from durable_agents.auth.tokens import AuthenticationError, AuthUnavailableError, NotAnApproverError
from durable_agents.aws.deferred import DeferredTracer
from durable_agents.aws.settings import import_agent_modules
from durable_agents.core.models import WaitStatus
from durable_agents.engine.cancellation import RunNotCancellableError
from durable_agents.engine.flow.extensions import NoBudgetError
from durable_agents.engine.inbox import (
    EventIdConflictError,
    EventSendContendedError,
    RunNotAcceptingEventsError,
    TooManyEventNamesError,
)
from durable_agents.engine.reruns import RerunRefusedError, UnknownOperationError
from durable_agents.engine.run_starts import InputValidationError
from durable_agents.engine.wait_records import WaitGoneError, closed_for_finished_run
from durable_agents.errors import (
    AgentNotFoundError,
    EffectNotFoundError,
    IdempotencyConflictError,
    InfrastructureError,
    InvalidNameError,
    MigrationNotFoundError,
    MigrationRefusedError,
    PayloadError,
    RunNotFoundError,
    RunStateConflictError,
    VersionUnavailableError,
    WaitNotFoundError,
)


class ThreadSafeRestResolver(APIGatewayRestResolver):
    """``APIGatewayRestResolver`` whose per-request state is per thread.

    Powertools keeps the current event and lambda context on ``BaseRouter`` class attributes
    and the route arguments in an instance dict: fine in Lambda (one request per process at a
    time), wrong when one process serves requests from several threads (local mode's
    threaded server, concurrency tests). Here each thread sees its own request.
    """

    _state = threading.local()

    @property
    def current_event(self) -> APIGatewayProxyEvent:
        """The request this thread is resolving."""
        event: APIGatewayProxyEvent = self._state.event
        return event

    @current_event.setter
    def current_event(self, value: BaseProxyEvent) -> None:
        self._state.event = value

    @property
    def lambda_context(self) -> LambdaContext:
        """The Lambda context of this thread's request."""
        context: LambdaContext = self._state.lambda_context
        return context

    @lambda_context.setter
    def lambda_context(self, value: LambdaContext) -> None:
        self._state.lambda_context = value

    @property
    def context(self) -> dict[str, Any]:
        """Routing context (route arguments among it) of this thread's request."""
        if not hasattr(self._state, "context"):
            self._state.context = {}
        routing: dict[str, Any] = self._state.context
        return routing

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        self._state.context = value

    _build_lock = threading.Lock()
    _stacks_built = False

    def build_route_stacks(self) -> None:
        """Builds every route's middleware stack once, before any request uses one.

        Powertools builds a route's stack lazily on its first request, unguarded: two threads
        doing that at once would wrap the route twice, for good.
        """
        with self._build_lock:
            if self._stacks_built:
                return
            for route in self._static_routes + self._dynamic_routes:
                if not route._middleware_stack_built:
                    route._build_middleware_stack(
                        router_middlewares=self._router_middlewares, app=self
                    )
            self._stacks_built = True

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        """Resolves one request with this thread's state."""
        if not self._stacks_built:
            self.build_route_stacks()
        self._state.event = self._to_proxy_event(dict(event))
        self._state.lambda_context = context
        self._state.context = {}
        return super().resolve(event, context)


# Made at the first traced call, not at import: it loads the X-Ray SDK (aws.deferred).
tracer = DeferredTracer()
app = ThreadSafeRestResolver()
# At init, not on the first request: a module that does not import fails the deployment at once.
AGENTS = import_agent_modules()
# Every state-changing request is refused if another site sent it or its body is not of a type
# its route takes (api.cross_site), and every route but /people and /links needs an IAM caller
# (api.authn): each checked once for all, before any route reads anything.
app.use([refuse_cross_site, require_iam_identity])

# Every id travels as one path segment; DynamoDB refuses keys over 2,048 bytes (moto does not),
# so longer segments are refused here, before any route reads the table with them.
MAX_PATH_SEGMENT_BYTES = 512
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


# What each domain error means for an HTTP caller. Domain exceptions carry no status codes.
ERROR_STATUS: dict[type[Exception], HTTPStatus] = {
    BadRequest: HTTPStatus.BAD_REQUEST,
    PayloadTooLargeError: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    UnprocessableRequest: HTTPStatus.UNPROCESSABLE_ENTITY,
    AuthenticationError: HTTPStatus.UNAUTHORIZED,
    NotAnApproverError: HTTPStatus.FORBIDDEN,
    NotAReviewerError: HTTPStatus.FORBIDDEN,
    TenantNotMappedError: HTTPStatus.FORBIDDEN,
    console.CrossSiteFormError: HTTPStatus.FORBIDDEN,
    flow.NotAnOperatorError: HTTPStatus.FORBIDDEN,  # GET /flow: deployment-wide, operators only
    CrossSiteRequestError: HTTPStatus.FORBIDDEN,
    UnsupportedMediaTypeError: HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
    AuthUnavailableError: HTTPStatus.SERVICE_UNAVAILABLE,
    WaitNotFoundError: HTTPStatus.NOT_FOUND,
    # 409 when it was already decided or completed, 410 when it expired (see error_response).
    WaitGoneError: HTTPStatus.CONFLICT,
    InvalidNameError: HTTPStatus.BAD_REQUEST,
    AgentNotFoundError: HTTPStatus.NOT_FOUND,
    RunNotFoundError: HTTPStatus.NOT_FOUND,
    EffectNotFoundError: HTTPStatus.NOT_FOUND,
    ReviewAlreadyDecidedError: HTTPStatus.CONFLICT,
    ReviewResultError: HTTPStatus.UNPROCESSABLE_ENTITY,
    IdempotencyConflictError: HTTPStatus.CONFLICT,
    RunStateConflictError: HTTPStatus.CONFLICT,
    RunNotCancellableError: HTTPStatus.CONFLICT,
    NoBudgetError: HTTPStatus.CONFLICT,  # POST /runs/{id}/budget: its tree has none to extend
    RunNotAcceptingEventsError: HTTPStatus.CONFLICT,  # finished, or being stopped
    EventIdConflictError: HTTPStatus.CONFLICT,
    TooManyEventNamesError: HTTPStatus.CONFLICT,  # a run takes events of at most 64 names
    EventSendContendedError: HTTPStatus.SERVICE_UNAVAILABLE,
    InputValidationError: HTTPStatus.UNPROCESSABLE_ENTITY,
    # POST /runs/{id}/migrate: the run exists, what it is asked to move to does not (or may not).
    MigrationRefusedError: HTTPStatus.CONFLICT,
    MigrationNotFoundError: HTTPStatus.CONFLICT,
    VersionUnavailableError: HTTPStatus.CONFLICT,
    # POST /runs/{id}/rerun: not finished, a call not settled (409); no such operation (400).
    RerunRefusedError: HTTPStatus.CONFLICT,
    UnknownOperationError: HTTPStatus.BAD_REQUEST,
    PayloadError: HTTPStatus.UNPROCESSABLE_ENTITY,
    ValidationError: HTTPStatus.UNPROCESSABLE_ENTITY,
}


def _gone_message(record: Any) -> str:
    noun = "approval" if record.kind == "approval" else "callback"
    closed = (record.outcome or {}).get("closed")
    if closed_for_finished_run(record):
        return (
            f"{noun} {record.wait_id} was closed: its run had already finished "
            f"({(record.outcome or {}).get('run_status')}), so nothing can be decided for it "
            "any more"
        )
    if record.status is WaitStatus.EXPIRED and closed:  # durable_agents.engine.cancellation
        return f"{noun} {record.wait_id} was closed: its run was stopped ({closed})"
    if record.status is WaitStatus.EXPIRED:
        return f"{noun} {record.wait_id} expired: its deadline passed before it was settled"
    if record.kind == "approval":
        outcome = record.outcome or {}
        verb = "approved" if outcome.get("approved") else "rejected"
        return (
            f"approval {record.wait_id} was already {verb} by {outcome.get('decided_by')} "
            f"at {outcome.get('decided_at')}"
        )
    return f"callback {record.wait_id} was already completed"


def error_response(exc: Exception) -> Response[str]:
    """Turns a known error into a 4xx (or 503) response that says what is wrong."""
    status = next(
        (code for cls, code in ERROR_STATUS.items() if isinstance(exc, cls)),
        HTTPStatus.BAD_REQUEST,
    )
    extra: dict[str, Any] = {}
    headers: dict[str, str] = {}
    message = str(exc)
    if isinstance(exc, ValidationError):
        message = "the request body does not match the schema"
        extra["details"] = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
    elif isinstance(exc, InputValidationError):
        message = f"input does not match agent {exc.agent!r}"
        extra["details"] = exc.errors
    elif isinstance(exc, IdempotencyConflictError):
        extra["run_id"] = exc.existing_run_id
    elif isinstance(exc, MigrationRefusedError):
        extra["reason"] = exc.reason
    elif isinstance(exc, MigrationNotFoundError):
        extra["missing"] = {"migration": {"from": exc.from_version, "to": exc.to_version}}
        extra["deployed"] = exc.known
    elif isinstance(exc, VersionUnavailableError):
        extra["missing"] = {exc.component: exc.version}
        extra["deployed"] = exc.deployed
    elif isinstance(exc, ReviewAlreadyDecidedError):
        extra["current"] = effect_view(exc.record)
    elif isinstance(exc, WaitGoneError):
        if exc.record.status is WaitStatus.EXPIRED:
            status = HTTPStatus.GONE
        message = _gone_message(exc.record)
        extra["current"] = wait_view(exc.record)
    elif isinstance(exc, AuthenticationError) and exc.scheme == "Bearer":
        headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
    if prefers_html(app.current_event):
        page = render_message_page(status.phrase, message)
        if (app.current_event.path or "").startswith("/links/"):
            headers.update(LINK_PAGE_HEADERS)  # the URL may hold a link's token
        return html(status, page, headers=headers or None)
    return error(status, type(exc).__name__, message, headers=headers or None, **extra)


for _error_type in ERROR_STATUS:
    app.exception_handler(_error_type)(error_response)


app.include_router(reviews.router)
app.include_router(runs.router)
app.include_router(run_stops.router)
app.include_router(flow.router)
app.include_router(reruns.router)
app.include_router(run_events.router)
app.include_router(approvals.router)
app.include_router(callbacks.router)
app.include_router(streams.router)
app.include_router(openapi_doc.router)
app.include_router(console.router)


def _oversized_segment(event: Mapping[str, Any]) -> str | None:
    """Why the path cannot name anything of ours, or None.

    A segment too long for a key, or one holding a control character.
    """
    for segment in str(event.get("path") or "").split("/"):
        decoded = unquote(segment)
        size = len(decoded.encode("utf-8", errors="surrogatepass"))
        if size > MAX_PATH_SEGMENT_BYTES:
            return f"a path segment is {size} bytes; ids are at most {MAX_PATH_SEGMENT_BYTES} bytes"
        # No id has one, and the router matches with ^...$, which takes a trailing newline:
        # /runs/<id>%0A would be answered as /runs/<id>, a second spelling of the id.
        if CONTROL_CHARACTER.search(decoded):
            return "a path segment holds a control character; no run id, name or other id has one"
    return None


def _rejection(status: HTTPStatus, message: str) -> dict[str, Any]:
    """A JSON error answered before routing (same shape as ``api.routes.common.error``)."""
    return {
        "statusCode": status.value,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"error": {"type": "BadRequest", "message": message}}),
    }


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The API Gateway (REST, proxy) entry point.

    A journal or bus failure (throttling, a 500, a timeout) answers 503 with ``Retry-After``:
    nothing was recorded for the request, so the caller may simply send it again.
    """
    too_long = _oversized_segment(event)
    if too_long is not None:
        return _rejection(HTTPStatus.BAD_REQUEST, too_long)
    # Under `make sam-local` only: the IAM caller SAM's API Gateway emulation leaves out.
    sam_emulator_authenticate(event)
    try:
        return app.resolve(event, context)
    except InfrastructureError as exc:
        logger.warning(
            "request aborted by an infrastructure failure",
            extra={"operation": exc.operation, "code": exc.code},
        )
        return {
            "statusCode": HTTPStatus.SERVICE_UNAVAILABLE.value,
            "headers": {"Content-Type": "application/json", "Retry-After": "1"},
            "body": json.dumps(
                {
                    "error": {
                        "type": "ServiceUnavailable",
                        "message": "the journal is temporarily unavailable; retry the request",
                    }
                }
            ),
        }
