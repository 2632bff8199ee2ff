"""What every route group shares: responses, request parsing, content negotiation, views."""

from __future__ import annotations

import json
import os
import re
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from api.approval_page import HTML_HEADERS, approval_state
from api.routes import limits
from api.routes.limits import MAX_FORM_FIELDS, MAX_JSON_BODY_BYTES, body_text, parse_json
from api.services import get_runtime
from durable_agents.auth.tokens import AuthUnavailableError
from durable_agents.core.clock import iso
from durable_agents.core.models import WaitRecord
from durable_agents.engine.events import EventPublishError, step_ready
from durable_agents.errors import WaitNotFoundError

logger = Logger(child=True)

MAX_WAIT_ID_CHARS = 128
BadRequest = limits.BadRequest  # defined with the limits; the routes have always taken it here


class UnprocessableRequest(Exception):
    """The request is well-formed but asks for something this resource cannot do (422)."""


def ok(status: HTTPStatus, body: Any, headers: dict[str, str] | None = None) -> Response[str]:
    """A JSON response."""
    return Response(
        status_code=status.value,
        content_type="application/json",
        body=json.dumps(body),
        headers=headers,
    )


def error(
    status: HTTPStatus,
    error_type: str,
    message: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response[str]:
    """A JSON error: ``{"error": {"type": ..., "message": ..., **extra}}``."""
    body = {"error": {"type": error_type, "message": message, **extra}}
    return Response(
        status_code=status.value,
        content_type="application/json",
        body=json.dumps(body),
        headers=headers,
    )


def html(status: HTTPStatus, page: str, headers: dict[str, str] | None = None) -> Response[str]:
    """An HTML response with the Api's strict browser headers."""
    return Response(
        status_code=status.value,
        content_type="text/html; charset=utf-8",
        body=page,
        headers={**HTML_HEADERS, **(headers or {})},
    )


def header(event: APIGatewayProxyEvent, name: str) -> str | None:
    """A request header, whatever its case."""
    wanted = name.lower()
    for key, value in (event.headers or {}).items():
        if key.lower() == wanted:
            return str(value)
    return None


def _quality(accept: str, media_type: str) -> float:
    """The q-value ``accept`` gives ``media_type`` (the most specific matching range wins)."""
    kind, _, _subtype = media_type.partition("/")
    best: tuple[int, float] = (-1, 0.0)
    for item in accept.split(","):
        range_, *params = (p.strip() for p in item.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        range_ = range_.lower()
        specificity = (
            2
            if range_ == media_type
            else 1
            if range_ == f"{kind}/*"
            else 0
            if range_ == "*/*"
            else -1
        )
        if specificity > best[0]:
            best = (specificity, q)
    return best[1] if best[0] >= 0 else 0.0


def wants_html(event: APIGatewayProxyEvent, *, default: bool = False) -> bool:
    """Whether the ``Accept`` header prefers HTML to JSON (``default`` on a tie or no header)."""
    accept = header(event, "Accept")
    if not accept:
        return default
    page, data = _quality(accept, "text/html"), _quality(accept, "application/json")
    return default if page == data else page > data


def is_form(event: APIGatewayProxyEvent) -> bool:
    """Whether the body is an HTML form submission."""
    content_type = (header(event, "Content-Type") or "").split(";")[0].strip().lower()
    return content_type == "application/x-www-form-urlencoded"


# Where the approval page posts its form: /approvals/{id}, /people/... and /links/approvals/{id}.
DECISION_PATH = re.compile(r"/(?:people/|links/)?approvals/[^/]+")


def prefers_html(event: APIGatewayProxyEvent) -> bool:
    """Whether to answer with a page rather than JSON.

    ``Accept`` decides; without a preference, opening a signed link (``GET /links/...``) and
    submitting a decision form (the approval page's) get HTML, everything else JSON: a form
    sent to an operator's JSON route (``curl -d``) gets a JSON error.
    """
    decision_form = is_form(event) and DECISION_PATH.fullmatch(event.path) is not None
    browsing = (event.http_method == "GET" and event.path.startswith("/links/")) or decision_form
    return wants_html(event, default=browsing)


def json_body(
    event: APIGatewayProxyEvent, *, required: bool = True, limit: int = MAX_JSON_BODY_BYTES
) -> Any:
    r"""The JSON body (None when empty and not ``required``), parsed under the limits.

    Raises:
        BadRequest: If it is missing (and required), not UTF-8, not JSON within the limits,
            or holds a string with a lone surrogate (``"\ud83d"``: not valid Unicode).
        PayloadTooLargeError: If it is longer than ``limit`` bytes.
    """
    text = body_text(event, limit=limit)
    if text is None:
        if required:
            raise BadRequest("the request needs a JSON body")
        return None
    return parse_json(text)


def form_or_json_body(event: APIGatewayProxyEvent, *, limit: int = MAX_JSON_BODY_BYTES) -> Any:
    """A JSON body, or an HTML form's fields as a dict (at most ``MAX_FORM_FIELDS``).

    Raises:
        BadRequest: If the body is missing, not JSON, has too many fields or a repeated one,
            or is not valid Unicode (a field that is not UTF-8 once percent-decoded, such as a
            lone surrogate's bytes ``%ED%A0%BD``, or a JSON string with a lone surrogate).
        PayloadTooLargeError: If it is longer than ``limit`` bytes.
    """
    if not is_form(event):
        return json_body(event, limit=limit)
    raw = body_text(event, limit=limit) or ""
    fields: dict[str, str] = {}
    try:
        # errors="strict": the default ("replace") would record U+FFFD in place of what the
        # person typed (or a forged surrogate's bytes) without telling anyone.
        pairs = parse_qsl(
            raw, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS, errors="strict"
        )
    except UnicodeDecodeError as exc:  # a ValueError too: caught first
        raise BadRequest(
            "the form is not valid Unicode: a field is not UTF-8 once percent-decoded "
            "(a lone surrogate's bytes, or a stray byte)"
        ) from exc
    except ValueError as exc:  # "Max number of fields exceeded"
        raise BadRequest(f"the form has more than {MAX_FORM_FIELDS} fields") from exc
    for key, value in pairs:
        if key in fields:
            raise BadRequest(f"the form field {key!r} is repeated")
        fields[key] = value
    return fields


# What approval and callback ids are made of: ASCII only (str.isalnum would also take every
# Unicode letter and digit, then read the table for an id that cannot exist).
WAIT_ID = re.compile(r"[A-Za-z0-9_-]+")


def check_wait_id(wait_id: str) -> str:
    """Rejects ids that cannot be ours before reading the table.

    Raises:
        WaitNotFoundError: If the id is empty, too long or has unexpected characters.
    """
    if len(wait_id) > MAX_WAIT_ID_CHARS or not WAIT_ID.fullmatch(wait_id):
        raise WaitNotFoundError(wait_id[:MAX_WAIT_ID_CHARS])
    return wait_id


def find_wait(kind: str, wait_id: str) -> WaitRecord:
    """The approval or callback with this id.

    Raises:
        WaitNotFoundError: If there is none of this kind.
    """
    record = get_runtime().store.get_wait(check_wait_id(wait_id))
    if record.kind != kind:
        raise WaitNotFoundError(wait_id)
    return record


def wake(run_id: str, reason: str) -> None:
    """Publishes ``Step Ready`` for a run whose wait was settled.

    A failed publish is logged, not raised: the outcome is already recorded and the run is
    RUNNING, so the reconciler re-drives it once it has been idle for ``STALL_AFTER_SECONDS``.
    """
    try:
        get_runtime().publisher.publish([step_ready(run_id, reason)])
    except EventPublishError:
        logger.warning(
            "Step Ready not published; the reconciler will resume the run",
            extra={"run_id": run_id, "reason": reason},
        )


def public_base_url(event: APIGatewayProxyEvent) -> str:
    """Where signed links point: ``PUBLIC_BASE_URL``, else this Api's own execute-api URL.

    Never from request headers (``Host``, ``X-Forwarded-Proto``): whoever sends the minting
    request would choose the scheme and host of a credential handed to people. Without a
    configured URL it is built from what API Gateway itself puts in the request context (the
    Api's id and stage) and the function's region.

    Raises:
        AuthUnavailableError: If ``PUBLIC_BASE_URL`` is not an https URL (http only on a
            loopback host, for local mode) with no credentials, query or fragment, or if it is
            unset and the request context does not name an Api and a stage.
    """
    configured = os.environ.get("PUBLIC_BASE_URL", "").strip().rstrip("/")
    if configured:
        return _checked_base_url(configured)
    context = event.raw_event.get("requestContext") or {}
    api_id, stage = str(context.get("apiId") or ""), str(context.get("stage") or "")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or ""
    if not (_API_ID.fullmatch(api_id) and _STAGE.fullmatch(stage) and _REGION.fullmatch(region)):
        raise AuthUnavailableError(
            "signed links need PUBLIC_BASE_URL (the Api's public https URL) in this deployment"
        )
    return f"https://{api_id}.execute-api.{region}.amazonaws.com/{stage}"


_API_ID = re.compile(r"[a-z0-9]{1,32}")
_STAGE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _checked_base_url(configured: str) -> str:
    parts = urlsplit(configured)
    try:
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        host = ""
    secure = parts.scheme == "https" or (parts.scheme == "http" and host in _LOOPBACK)
    if not (
        secure and host and not (parts.username or parts.password or parts.query or parts.fragment)
    ):
        raise AuthUnavailableError(
            f"PUBLIC_BASE_URL must be an https URL (http only on a loopback host) without "
            f"credentials, query or fragment; {configured[:200]!r} is not"
        )
    return configured


def approval_view(record: WaitRecord) -> dict[str, Any]:
    """The public view of an approval: what is asked, of whom, until when, and the decision."""
    details = record.details
    try:
        request = json.loads(str(details.get("request", "null")))
    except ValueError:
        request = details.get("request")
    outcome = record.outcome or {}
    state = approval_state(record)
    decision = (
        {
            k: outcome.get(k)
            for k in ("approved", "decided_by", "comment", "decided_at", "via", "minted_by")
        }
        if state in ("approved", "rejected")
        else None
    )
    return {
        "approval_id": record.wait_id,
        "status": state,
        "run_id": record.run_id,
        "operation_id": record.operation_id,
        "name": record.name,
        "agent": details.get("agent"),
        "summary": details.get("summary", ""),
        "request": request,
        "approvers": list(details.get("approvers", [])),
        "created_at": iso(record.created_at_ms),
        "deadline": iso(record.deadline_ms),
        "decision": decision,
    }


def callback_view(record: WaitRecord) -> dict[str, Any]:
    """The public view of a callback: its state, deadlines and outcome."""
    return {
        "callback_id": record.wait_id,
        "status": record.status.value.lower(),
        "run_id": record.run_id,
        "operation_id": record.operation_id,
        "name": record.name,
        "created_at": iso(record.created_at_ms),
        "deadline": iso(record.deadline_ms),
        "heartbeat_timeout_seconds": (
            record.heartbeat_timeout_ms / 1000 if record.heartbeat_timeout_ms else None
        ),
        "heartbeat_deadline": iso(record.heartbeat_deadline_ms),
        "outcome": record.outcome,
    }


def wait_view(record: WaitRecord) -> dict[str, Any]:
    """The view of an approval or a callback."""
    return approval_view(record) if record.kind == "approval" else callback_view(record)
