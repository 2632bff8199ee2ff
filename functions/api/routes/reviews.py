"""Reviews (IAM, SigV4): tool calls waiting for a person, and their decisions.

A tool call whose outcome is unknown waits in review (``durable_agents.admin.review``) until a
reviewer says what happened: committed, retry or abandon. Only the tool's declared reviewers
may decide (``REVIEW_OPERATORS`` for a tool that declares none). A call of another tenant's run
is 404, like one never recorded (``routes.tenancy``).
"""

from __future__ import annotations

import os
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from pydantic import BaseModel, ConfigDict, Field

from api.routes.common import json_body, ok
from api.routes.tenancy import check_effect_owner, iam_caller
from api.routes.tenant_listing import ListingQuery, collect, page_limit
from api.services import get_runtime
from durable_agents.admin.review import Decision, ReviewRequest, resolve
from durable_agents.admin.views import effect_view
from durable_agents.auth.tokens import AuthUnavailableError
from durable_agents.aws.deferred import DeferredTracer
from durable_agents.core.models import SideEffectRecord
from durable_agents.core.principals import Principal, iam_patterns
from durable_agents.engine.events import step_ready
from durable_agents.tools import default_tools

logger = Logger(child=True)
# Made at the first traced call, not at import: it loads the X-Ray SDK (aws.deferred).
tracer = DeferredTracer()
router = Router()  # type: ignore[no-untyped-call]


class ReviewDecisionRequest(BaseModel):
    """Body of ``POST /reviews/{operation_id}``."""

    model_config = ConfigDict(extra="forbid")

    decision: Decision
    comment: str = Field(default="", max_length=2000)
    result: Any = None
    external_id: str | None = Field(default=None, max_length=256)


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


@router.get("/reviews")
@tracer.capture_method(capture_response=False)
def list_reviews() -> Response[str]:
    """Lists the caller's tenant's tool calls waiting for a person, with the exact request.

    Oldest first; ``limit`` ≤ 100. Every page carries ``cursor`` (null only at the end; a
    page may be short, even empty, and still carry one: ``routes.tenant_listing``).
    """
    event = _event()
    _, tenant = iam_caller(event)
    params = event.query_string_parameters or {}
    store = get_runtime().store
    listed = collect(
        ListingQuery("reviews", tenant),
        params.get("cursor") or None,
        lambda cursor, size, tenant: store.reviews_page(limit=size, cursor=cursor, tenant=tenant),
        lambda r: r.tenant,
        page_limit(params),
    )
    return ok(
        HTTPStatus.OK,
        {"reviews": [effect_view(r) for r in listed.items], "cursor": listed.cursor},
    )


@router.post("/reviews/<operation_id>")
@tracer.capture_method(capture_response=False)
def decide_review(operation_id: str) -> Response[str]:
    """Records a reviewer's decision (committed / retry / abandon) once and resumes the run.

    Only the tool's declared reviewers may decide (``REVIEW_OPERATORS`` for a tool that
    declares none; nobody until configured): 403 otherwise. A call of another tenant's run is
    404, like one never recorded.
    """
    event = _event()
    reviewer, tenant = iam_caller(event)
    body = ReviewDecisionRequest.model_validate(json_body(event))
    return ok(HTTPStatus.OK, effect_view(record_review(reviewer, tenant, operation_id, body)))


def record_review(
    reviewer: Principal, tenant: str, operation_id: str, body: ReviewDecisionRequest
) -> SideEffectRecord:
    """Records a review decision and wakes the run (``POST /reviews/{id}`` and the console's).

    Raises:
        EffectNotFoundError: If nothing is recorded there, or it is another tenant's run (404).
        NotAReviewerError: If the reviewer may not decide it (403).
        ReviewAlreadyDecidedError: If it is no longer in review (409).
        AuthUnavailableError: If ``REVIEW_OPERATORS`` is malformed (503).
    """
    try:
        operators = iam_patterns("REVIEW_OPERATORS", os.environ)
    except ValueError as exc:
        raise AuthUnavailableError(str(exc)) from exc
    runtime = get_runtime()
    # Operation ids of nested scopes contain "/": clients send it percent-encoded.
    operation_id = unquote(operation_id)
    # Before anything about the call is checked: another tenant's is "not recorded", not 403.
    check_effect_owner(tenant, operation_id)
    record = resolve(
        runtime.store,
        default_tools,
        runtime.clock,
        operation_id,
        ReviewRequest(
            decision=body.decision,
            decided_by=reviewer.display,
            comment=body.comment,
            result=body.result,
            external_id=body.external_id,
            via=reviewer.via,
        ),
        reviewer=reviewer,
        operators=operators,
    )
    runtime.publisher.publish([step_ready(record.run_id, "review-decided")])
    logger.info(
        "review decided",
        extra={
            "operation_id": operation_id,
            "decision": body.decision.value,
            "decided_by": reviewer.display,
        },
    )
    return record
