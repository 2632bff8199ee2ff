"""Approvals: list, show and decide — as an IAM caller, a person with a JWT, or a signed link.

* ``/approvals…`` (IAM, SigV4): operators and services; the notifier principals
  (``LINK_MINTERS``) also mint signed links there.
* ``/people/approvals/{id}`` (API Gateway auth NONE; the JWT is verified here).
* ``/links/approvals/{id}`` (API Gateway auth NONE; the link's HMAC is verified here).

An approval belongs to its run's tenant: IAM and JWT callers of another tenant get the 404 of
an unknown id (``routes.tenancy``); a signed link is bound to its one approval, so it needs no
tenant. Every path ends in ``routes.approval_decisions.decide`` (the console's too), where
``approval.record_decision`` records a decision once: the first one wins, a second gets 409
with the first, and one after the deadline gets 410. So does one after the approval's run
finished (a quorum went on without it): the approval is closed instead, and nothing of the
decision is kept (docs/operations.md, "Retention").
"""

from __future__ import annotations

import os
from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import quote

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from pydantic import BaseModel, ConfigDict, Field

from api.approval_page import LINK_PAGE_HEADERS, render_approval_page, render_message_page
from api.routes.approval_decisions import DecisionRequest, authorize, decide, ensure_open
from api.routes.common import (
    BadRequest,
    UnprocessableRequest,
    approval_view,
    find_wait,
    form_or_json_body,
    header,
    html,
    ok,
    prefers_html,
    public_base_url,
)
from api.routes.limits import MAX_LINK_BODY_BYTES
from api.routes.tenancy import iam_caller, owned_wait, tenant_of
from api.routes.tenant_listing import ListingQuery, collect, page_limit
from api.services import get_runtime
from durable_agents.auth.links import (
    LINK_TTL_RANGE,
    MAX_LINK_CHARS,
    LinkClaims,
    LinkSigner,
    SecretsManagerKey,
)
from durable_agents.auth.tokens import AuthUnavailableError, NotAnApproverError, bearer_token
from durable_agents.core.clock import iso
from durable_agents.core.models import WaitRecord, WaitStatus
from durable_agents.core.principals import Principal, iam_patterns, may_decide
from durable_agents.engine.operations.approval import KIND

if TYPE_CHECKING:
    from durable_agents.auth.jwt import JwtVerifier

logger = Logger(child=True)
router = Router()  # type: ignore[no-untyped-call]

STATES: dict[str, tuple[WaitStatus, bool | None]] = {
    "pending": (WaitStatus.PENDING, None),
    "approved": (WaitStatus.COMPLETED, True),
    "rejected": (WaitStatus.COMPLETED, False),
    "expired": (WaitStatus.EXPIRED, None),
}

# Built on first use, once per execution environment (configuration is read at this edge).
_jwt_verifier: JwtVerifier | None = None
_link_signer: LinkSigner | None = None


def jwt_verifier() -> JwtVerifier:
    """The verifier for ``JWT_ISSUER`` / ``JWT_AUDIENCE`` / ``JWT_JWKS_URL``.

    Raises:
        AuthUnavailableError: If JWT sign-in is not configured.
    """
    global _jwt_verifier  # noqa: PLW0603 - one verifier (and JWKS cache) per environment
    if _jwt_verifier is None:
        # Imported on the first JWT, not at init: PyJWT and cryptography are a sixth of the
        # Api's import, and an Api whose callers all sign with IAM never needs them
        # (docs/benchmarks.md, "Cold start").
        from durable_agents.auth.jwt import jwt_verifier_from_env  # noqa: PLC0415 - cold start

        _jwt_verifier = jwt_verifier_from_env(os.environ)
    return _jwt_verifier


def link_signer() -> LinkSigner:
    """The signer keyed by the secret ``APPROVAL_LINK_SECRET_ARN`` names.

    Raises:
        AuthUnavailableError: If signed links are not configured.
    """
    global _link_signer  # noqa: PLW0603 - one signer (and key cache) per environment
    if _link_signer is None:
        arn = os.environ.get("APPROVAL_LINK_SECRET_ARN", "").strip()
        if not arn:
            raise AuthUnavailableError(
                "signed links are not configured for this deployment "
                "(APPROVAL_LINK_SECRET_ARN is not set)"
            )
        import boto3  # noqa: PLC0415 - only link routes need Secrets Manager

        _link_signer = LinkSigner(SecretsManagerKey(boto3.client("secretsmanager"), arn))
    return _link_signer


class LinkDecisionRequest(DecisionRequest):
    """Body of ``POST /links/approvals/{id}`` (JSON or an HTML form)."""

    token: str = Field(min_length=1, max_length=MAX_LINK_CHARS)


class MintLinkRequest(BaseModel):
    """Body of ``POST /approvals/{id}/links``."""

    model_config = ConfigDict(extra="forbid")

    approver: str = Field(min_length=1, max_length=512)
    ttl_seconds: int = Field(default=86_400, ge=LINK_TTL_RANGE[0], le=LINK_TTL_RANGE[1])


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


def _authorize_minter(caller: Principal) -> None:
    """Minting is a privilege of its own: a link is a credential for someone else.

    Raises:
        NotAnApproverError: If the caller is not one of ``LINK_MINTERS`` (none when unset).
        AuthUnavailableError: If ``LINK_MINTERS`` is malformed.
    """
    try:
        minters = iam_patterns("LINK_MINTERS", os.environ)
    except ValueError as exc:
        raise AuthUnavailableError(str(exc)) from exc
    if not minters:
        raise LinkMinterError(
            f"{caller.identity} may not mint signed links: no notifier principal is configured "
            "(LINK_MINTERS, the template's LinkMinters parameter)"
        )
    if not may_decide(caller, minters):
        raise LinkMinterError(
            f"{caller.identity} may not mint signed links: it is not one of LINK_MINTERS"
        )


class LinkMinterError(NotAnApproverError):
    """The caller is authenticated but may not mint signed links (403)."""


def _show(record: WaitRecord, *, token: str | None = None) -> Response[str]:
    if prefers_html(_event()):
        # Relative: the form posts to the page's own path, whatever the stage or domain.
        page = render_approval_page(record, action_url=quote(record.wait_id), token=token)
        return html(HTTPStatus.OK, page, headers=None if token is None else LINK_PAGE_HEADERS)
    return ok(HTTPStatus.OK, approval_view(record))


def _decided(record: WaitRecord) -> Response[str]:
    if prefers_html(_event()):
        state = "approved" if (record.outcome or {}).get("approved") else "rejected"
        return html(
            HTTPStatus.OK,
            render_message_page(
                "Decision recorded", f"You {state} this request. The agent continues now."
            ),
        )
    return ok(HTTPStatus.OK, approval_view(record))


# -------------------------------------------------------------------------------- IAM (SigV4)
@router.get("/approvals")
def list_approvals() -> Response[str]:
    """Lists the caller's tenant's approvals by ``status``, oldest first.

    ``status``: pending (default), approved, rejected or expired; ``limit`` ≤ 100. Every page
    carries ``cursor`` (null only at the end; a page may be short, even empty, and still carry
    one: ``routes.tenant_listing``).
    """
    event = _event()
    _, tenant = iam_caller(event)
    params = event.query_string_parameters or {}
    state = (params.get("status") or "pending").lower()
    if state not in STATES:
        raise BadRequest(f"unknown status {state!r}; use one of {', '.join(STATES)}")
    limit = page_limit(params)
    status, approved = STATES[state]
    listed = collect(
        ListingQuery("approvals", tenant, {"status": state}),
        params.get("cursor") or None,
        lambda cursor, size, tenant: get_runtime().store.waits_page(
            KIND, status, limit=size, cursor=cursor, tenant=tenant
        ),
        lambda r: r.tenant,
        limit,
        keep=lambda r: approved is None or bool((r.outcome or {}).get("approved")) is approved,
    )
    return ok(
        HTTPStatus.OK,
        {"approvals": [approval_view(r) for r in listed.items], "cursor": listed.cursor},
    )


@router.get("/approvals/<approval_id>")
def get_approval(approval_id: str) -> Response[str]:
    """Shows one approval (JSON, or HTML when the ``Accept`` header prefers it)."""
    _, tenant = iam_caller(_event())
    return _show(owned_wait(tenant, find_wait(KIND, approval_id)))


@router.post("/approvals/<approval_id>")
def decide_approval(approval_id: str) -> Response[str]:
    """Records the SigV4 caller's decision, if an ``iam:`` approver pattern matches it."""
    event = _event()
    principal, tenant = iam_caller(event)
    record = owned_wait(tenant, find_wait(KIND, approval_id))
    authorize(principal, record)
    request = DecisionRequest.model_validate(form_or_json_body(event))
    settled = decide(record, request, decided_by=principal.display, via="iam")
    return _decided(settled)


@router.post("/approvals/<approval_id>/links")
def mint_link(approval_id: str) -> Response[str]:
    """Mints a signed, expiring link for one of the approval's ``user:``/``group:`` approvers.

    The link is a credential: whoever holds it decides as that approver. Only the configured
    notifier principals (``LINK_MINTERS``) may mint; a decision through the link records who
    minted it. An ``iam:`` approver signs its own requests and never gets a link (that would
    turn a SigV4 identity into a bearer token).
    """
    event = _event()
    caller, tenant = iam_caller(event)
    _authorize_minter(caller)
    record = owned_wait(tenant, find_wait(KIND, approval_id))
    request = MintLinkRequest.model_validate(form_or_json_body(event))
    if request.approver not in record.details.get("approvers", []):
        raise UnprocessableRequest(
            f"{request.approver!r} is not one of the approvers of {record.wait_id}"
        )
    if request.approver.startswith("iam:"):
        raise UnprocessableRequest(
            f"{request.approver!r} is an iam: approver: it decides with SigV4 "
            "(POST /approvals/{id}), never through a signed link"
        )
    ensure_open(record)
    base_url = public_base_url(event)
    token, claims = link_signer().mint(
        record.wait_id,
        request.approver,
        request.ttl_seconds,
        now_ms=get_runtime().clock.now_ms(),
        minted_by=caller.identity,
    )
    url = f"{base_url}/links/approvals/{quote(record.wait_id)}?token={token}"
    logger.info(
        "approval link minted",
        extra={
            "approval_id": record.wait_id,
            "approver": claims.approver,
            "link_id": claims.link_id,
            "expires_at": iso(claims.expires_at_s * 1000),
            "minted_by": caller.identity,
        },
    )
    return ok(
        HTTPStatus.CREATED,
        {
            "url": url,
            "approval_id": record.wait_id,
            "approver": claims.approver,
            "link_id": claims.link_id,
            "expires_at": iso(claims.expires_at_s * 1000),
            "minted_by": caller.identity,
        },
        headers={"Cache-Control": "no-store"},
    )


# ------------------------------------------------------------------------- people with a JWT
def _person(approval_id: str) -> tuple[Principal, WaitRecord]:
    """The signed-in person and the approval, if it is of their tenant (404 otherwise)."""
    verifier = jwt_verifier()
    token = bearer_token(header(_event(), "Authorization"))
    principal = verifier.verify(token, now_ms=get_runtime().clock.now_ms())
    tenant = tenant_of(principal)
    return principal, owned_wait(tenant, find_wait(KIND, approval_id))


@router.get("/people/approvals/<approval_id>")
def person_get_approval(approval_id: str) -> Response[str]:
    """Shows an approval of the person's tenant to a signed-in person who is an approver."""
    principal, record = _person(approval_id)
    authorize(principal, record)
    return _show(record)


@router.post("/people/approvals/<approval_id>")
def person_decide_approval(approval_id: str) -> Response[str]:
    """Records a signed-in person's decision (``user:`` or ``group:`` approver patterns)."""
    principal, record = _person(approval_id)
    authorize(principal, record)
    request = DecisionRequest.model_validate(form_or_json_body(_event()))
    settled = decide(record, request, decided_by=principal.display, via="jwt")
    return _decided(settled)


# ------------------------------------------------------------------------------- signed links
def _link(approval_id: str, token: str | None) -> tuple[LinkClaims, WaitRecord]:
    signer = link_signer()
    claims = signer.verify(token or "", approval_id, now_ms=get_runtime().clock.now_ms())
    record = find_wait(KIND, approval_id)
    authorize(claims.principal, record)
    return claims, record


@router.get("/links/approvals/<approval_id>")
def link_get_approval(approval_id: str) -> Response[str]:
    """The page a signed link opens: the request, and Approve/Reject (JSON if asked)."""
    token = (_event().query_string_parameters or {}).get("token")
    _, record = _link(approval_id, token)
    return _show(record, token=token)


@router.post("/links/approvals/<approval_id>")
def link_decide_approval(approval_id: str) -> Response[str]:
    """Records the decision of a signed link's holder (form-encoded or JSON body).

    The link is single-use in effect: an approval takes one decision, so once one is recorded
    every further use gets 409. Only a recorded decision uses it up.
    """
    event = _event()
    query_token = (event.query_string_parameters or {}).get("token")
    # Authenticate before parsing: a token in the query is verified first, and a body that
    # carries it (an HTML form) is read under the small link limits (auth NONE route).
    verified = _link(approval_id, query_token) if query_token else None
    body = form_or_json_body(event, limit=MAX_LINK_BODY_BYTES)
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object or a form")
    token = body.get("token") or query_token
    if verified is not None and token == query_token:
        claims, record = verified
    else:
        claims, record = _link(approval_id, token if isinstance(token, str) else None)
    request = LinkDecisionRequest.model_validate({**body, "token": token})
    settled = decide(
        record,
        DecisionRequest(decision=request.decision, comment=request.comment),
        decided_by=claims.decided_by,
        via="link",
        # Links minted before they named their minter record "unknown" rather than nothing.
        minted_by=claims.minted_by or "unknown",
    )
    return _decided(settled)
