"""What the OpenAPI document says of each route beyond what Powertools' generator sees.

``operations()`` names every route of the Api by (method, OpenAPI path): its security, request
body model, parameters, success status, error statuses and content types. ``api.openapi``
refuses to build a document for a resolver with a route this table does not name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel

from api.routes.approval_decisions import DecisionRequest
from api.routes.approvals import LinkDecisionRequest, MintLinkRequest
from api.routes.callbacks import CallbackFailureRequest
from api.routes.console import (
    ConsoleBudgetForm,
    ConsoleEventForm,
    ConsoleRerunForm,
    ConsoleStartForm,
)
from api.routes.flow import ExtendBudgetRequest
from api.routes.limits import MAX_CURSOR_CHARS, MAX_KEY_CHARS
from api.routes.reruns import BulkRerunRequest, RerunRequest
from api.routes.reviews import ReviewDecisionRequest
from api.routes.run_query import MAX_VERSION_CHARS
from api.routes.run_starts import StartRunRequest
from api.routes.run_stops import StopRunRequest
from api.routes.runs import MigrateRunRequest
from durable_agents.core.models import RunStatus

Security = Literal["sigv4", "jwt", "link"]


@dataclass(frozen=True)
class Param:
    """A query or header parameter."""

    name: str
    schema: dict[str, Any]
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """What the document says about one route beyond what Powertools sees."""

    success: int = 200
    # Another success status and what it means (POST /runs: 200 for a repeated request).
    also: tuple[int, str] | None = None
    security: Security = "sigv4"
    body: type[BaseModel] | Literal["any"] | None = None
    body_required: bool = True
    form: bool = False
    query: tuple[Param, ...] = ()
    headers: tuple[Param, ...] = ()
    errors: tuple[int, ...] = ()
    html: bool = False
    # A console page or action: answers HTML only (errors: JSON or HTML), takes forms only.
    html_only: bool = False
    event_stream: bool = False
    example: Any = None
    tags: tuple[str, ...] = field(default=())


_DECISION = {"decision": "approve", "comment": "within policy"}
_LIMIT = Param("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "Page size.")
_LISTING_CURSOR = Param(
    "cursor",
    {"type": "string", "maxLength": MAX_CURSOR_CHARS},
    "From a page, with the same filters: every page carries one (null only at the end); a "
    "page may hold fewer than limit, even none, and still carry one.",
)


def operations() -> dict[tuple[str, str], Operation]:
    """Every route of the Api, keyed by (method, OpenAPI path)."""
    statuses = [s.value for s in RunStatus]
    decided = (404, 409, 410, 413, 422)
    return {
        ("POST", "/runs"): Operation(
            201,
            also=(200, "The run this idempotency key started before (created: false)"),
            body=StartRunRequest,
            example={"agent": "example-research", "input": {"topic": "durable execution"}},
            headers=(
                Param(
                    "Idempotency-Key",
                    {"type": "string", "maxLength": MAX_KEY_CHARS},
                    "Same as the body's idempotency_key (they must agree when both are sent).",
                ),
            ),
            errors=(404, 409, 413, 422),
            tags=("runs",),
        ),
        ("GET", "/runs"): Operation(
            query=(
                Param("status", {"type": "string", "enum": statuses}, "Only runs in this status."),
                Param(
                    "agent",
                    {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$"},
                    "Only runs of this agent.",
                ),
                Param(
                    "version",
                    {"type": "string", "minLength": 1, "maxLength": MAX_VERSION_CHARS},
                    "Only runs pinned to this workflow version. With any filter, a page may "
                    "hold fewer than limit runs and still carry a cursor.",
                ),
                Param(
                    "since",
                    {"type": "string", "format": "date-time"},
                    "Only runs started at or after this ISO-8601 time (with a timezone).",
                ),
                Param(
                    "until",
                    {"type": "string", "format": "date-time"},
                    "Only runs started before this ISO-8601 time (with a timezone).",
                ),
                Param(
                    "children",
                    {"type": "boolean", "default": False},
                    "Sub-agent runs too (hidden by default; each names its parent_run_id).",
                ),
                Param(
                    "parent",
                    {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"},
                    "Only the sub-agent runs of this run.",
                ),
                _LIMIT,
                Param(
                    "cursor",
                    {"type": "string", "maxLength": MAX_CURSOR_CHARS},
                    "From a page, with the same filters (null only at the listing's end).",
                ),
            ),
            tags=("runs",),
        ),
        ("GET", "/runs/{run_id}"): Operation(errors=(404,), tags=("runs",)),
        # A browser (Accept prefers text/html) gets the console's timeline page.
        ("GET", "/runs/{run_id}/history"): Operation(
            errors=(400, 404),
            html=True,
            query=(
                Param(
                    "generation",
                    {"type": "integer", "minimum": 0},
                    "Which generation of a run that continued as new (default: the current).",
                ),
                Param(
                    "format",
                    {"type": "string", "enum": ["json"]},
                    "json: the JSON history whatever Accept prefers (the console links to it).",
                ),
            ),
            tags=("runs",),
        ),
        ("GET", "/runs/{run_id}/stream"): Operation(
            query=(
                Param("after", {"type": "string", "maxLength": MAX_KEY_CHARS}, "Stream cursor."),
                Param("wait", {"type": "number", "minimum": 0, "maximum": 10}, "Long-poll, s."),
            ),
            headers=(Param("Last-Event-ID", {"type": "string"}, "EventSource's cursor."),),
            errors=(404,),
            event_stream=True,
            tags=("runs",),
        ),
        ("POST", "/runs/{run_id}/redrive"): Operation(202, errors=(404, 409), tags=("runs",)),
        ("POST", "/runs/{run_id}/migrate"): Operation(
            body=MigrateRunRequest,
            example={"to_version": "2", "dry_run": True},
            errors=(404, 409, 413, 422),
            tags=("runs",),
        ),
        ("POST", "/runs/{run_id}/rerun"): Operation(
            201,
            also=(200, "The same request again (the same rerun), or a dry run (nothing made)"),
            body=RerunRequest,
            body_required=False,
            example={"from": "charge:2", "version": "2", "repeat_effects": False},
            headers=(
                Param(
                    "Idempotency-Key",
                    {"type": "string", "maxLength": MAX_KEY_CHARS},
                    "The rerun's key (default: derived from the request: the same request "
                    "names the same rerun).",
                ),
            ),
            errors=(400, 404, 409, 413, 422),
            tags=("runs",),
        ),
        ("POST", "/runs/rerun"): Operation(
            body=BulkRerunRequest,
            example={"agent": "refund", "status": "FAILED", "since": "2026-12-01T00:00:00Z"},
            headers=(
                Param(
                    "Idempotency-Key",
                    {"type": "string", "maxLength": MAX_KEY_CHARS},
                    "The bulk request's key (default: derived from its filter and options).",
                ),
            ),
            errors=(400, 413, 422),
            tags=("runs",),
        ),
        ("POST", "/runs/{run_id}/cancel"): Operation(
            202,
            body=StopRunRequest,
            body_required=False,
            example={"reason": "the customer withdrew the request"},
            errors=(404, 409, 413, 422),
            tags=("runs",),
        ),
        ("POST", "/runs/{run_id}/terminate"): Operation(
            202,
            body=StopRunRequest,
            body_required=False,
            example={"reason": "runaway loop"},
            errors=(404, 409, 413, 422),
            tags=("runs",),
        ),
        ("POST", "/runs/{run_id}/events/{name}"): Operation(
            202,
            also=(200, "The event this Idempotency-Key recorded before (duplicate: true)"),
            body="any",
            body_required=False,
            example={"text": "and in French?"},
            headers=(
                Param(
                    "Idempotency-Key",
                    {"type": "string", "maxLength": MAX_KEY_CHARS},
                    "The client's event id: the same id records the event once.",
                ),
            ),
            errors=(400, 404, 409, 413, 503),
            tags=("runs",),
        ),
        ("GET", "/runs/{run_id}/status-value"): Operation(errors=(404,), tags=("runs",)),
        # A bad body is 400 here (not 422): each wrong field is named in the message.
        ("POST", "/runs/{run_id}/budget"): Operation(
            body=ExtendBudgetRequest,
            example={"add_tokens": 20000, "reason": "the report needs a second pass"},
            errors=(404, 409, 413),
            tags=("runs", "flow"),
        ),
        ("GET", "/flow"): Operation(tags=("flow",)),
        ("GET", "/reviews"): Operation(query=(_LIMIT, _LISTING_CURSOR), tags=("reviews",)),
        ("POST", "/reviews/{operation_id}"): Operation(
            body=ReviewDecisionRequest,
            example={"decision": "committed", "comment": "charged by hand", "external_id": "ch_1"},
            errors=(404, 409, 413, 422),
            tags=("reviews",),
        ),
        ("GET", "/approvals"): Operation(
            query=(
                Param(
                    "status",
                    {"type": "string", "enum": ["pending", "approved", "rejected", "expired"]},
                ),
                _LIMIT,
                _LISTING_CURSOR,
            ),
            tags=("approvals",),
        ),
        ("GET", "/approvals/{approval_id}"): Operation(
            errors=(404,), html=True, tags=("approvals",)
        ),
        ("POST", "/approvals/{approval_id}"): Operation(
            body=DecisionRequest,
            form=True,
            example=_DECISION,
            errors=decided,
            html=True,
            tags=("approvals",),
        ),
        ("POST", "/approvals/{approval_id}/links"): Operation(
            201,
            body=MintLinkRequest,
            example={"approver": "user:ada@example.com", "ttl_seconds": 3600},
            errors=decided,
            html=True,
            tags=("approvals",),
        ),
        ("GET", "/people/approvals/{approval_id}"): Operation(
            security="jwt", errors=(404,), html=True, tags=("approvals",)
        ),
        ("POST", "/people/approvals/{approval_id}"): Operation(
            security="jwt",
            body=DecisionRequest,
            form=True,
            example=_DECISION,
            errors=decided,
            html=True,
            tags=("approvals",),
        ),
        ("GET", "/links/approvals/{approval_id}"): Operation(
            security="link",
            query=(Param("token", {"type": "string"}, "The signed link's token."),),
            errors=(404,),
            html=True,
            tags=("approvals",),
        ),
        ("POST", "/links/approvals/{approval_id}"): Operation(
            security="link",
            body=LinkDecisionRequest,
            form=True,
            query=(Param("token", {"type": "string"}, "The signed link's token."),),
            errors=decided,
            html=True,
            tags=("approvals",),
        ),
        ("POST", "/callbacks/{callback_id}/success"): Operation(
            body="any",
            body_required=False,
            example={"charge_id": "ch_1"},
            errors=(404, 409, 410, 413),
            tags=("callbacks",),
        ),
        ("POST", "/callbacks/{callback_id}/failure"): Operation(
            body=CallbackFailureRequest,
            example={"error_type": "PaymentDeclined", "error_message": "card expired"},
            errors=(404, 409, 410, 413, 422),
            tags=("callbacks",),
        ),
        ("POST", "/callbacks/{callback_id}/heartbeat"): Operation(
            errors=(404, 409, 410), tags=("callbacks",)
        ),
        ("GET", "/openapi.json"): Operation(tags=("meta",)),
        **_console_operations(statuses),
    }


def _console_operations(statuses: list[str]) -> dict[tuple[str, str], Operation]:
    """The run console's pages (HTML) and form actions (303 back to a page)."""
    page = Operation(html_only=True, errors=(404,), tags=("console",))
    action = Operation(303, html_only=True, form=True, tags=("console",))
    return {
        ("GET", "/console"): Operation(
            html_only=True,
            query=(
                Param("status", {"type": "string", "enum": statuses}, "Only runs in this status."),
                Param("agent", {"type": "string", "maxLength": 80}, "Only runs of this agent."),
                Param("order", {"type": "string", "enum": ["newest", "oldest"]}, "By change."),
                _LIMIT,
                Param("cursor", {"type": "string", "maxLength": MAX_CURSOR_CHARS}, "Next page."),
            ),
            tags=("console",),
        ),
        ("GET", "/console/runs/{run_id}"): Operation(
            html_only=True,
            query=(
                Param("follow", {"type": "string", "enum": ["1"]}, "Reload every 3 s."),
                Param("done", {"type": "string"}, "The action to confirm."),
            ),
            errors=(404,),
            tags=("console",),
        ),
        ("POST", "/console/runs/{run_id}/cancel"): replace(
            action, body=StopRunRequest, body_required=False, errors=(404, 409, 413, 422)
        ),
        ("POST", "/console/runs/{run_id}/terminate"): replace(
            action, body=StopRunRequest, body_required=False, errors=(404, 409, 413, 422)
        ),
        ("POST", "/console/runs/{run_id}/redrive"): replace(
            action, body_required=False, errors=(400, 404, 409, 413)
        ),
        ("POST", "/console/runs/{run_id}/rerun"): replace(
            action,
            also=(200, "Preview (dry_run): what the re-run would do, nothing written (HTML)"),
            body=ConsoleRerunForm,
            body_required=False,
            errors=(400, 404, 409, 413, 422),
        ),
        ("POST", "/console/runs/{run_id}/events"): replace(
            action, body=ConsoleEventForm, errors=(400, 404, 409, 413, 422, 503)
        ),
        ("POST", "/console/runs/{run_id}/budget"): replace(
            action, body=ConsoleBudgetForm, errors=(400, 404, 409, 413, 422)
        ),
        ("POST", "/console/runs"): replace(
            action, body=ConsoleStartForm, errors=(400, 404, 409, 413, 422)
        ),
        ("GET", "/console/approvals"): replace(
            page,
            query=(
                Param("approvals_cursor", {"type": "string", "maxLength": MAX_CURSOR_CHARS}),
                Param("reviews_cursor", {"type": "string", "maxLength": MAX_CURSOR_CHARS}),
                Param("done", {"type": "string"}, "The action to confirm."),
            ),
        ),
        ("POST", "/console/approvals/{approval_id}"): replace(
            action, body=DecisionRequest, errors=(404, 409, 410, 413, 422)
        ),
        ("POST", "/console/reviews/{operation_id}"): replace(
            action, body=ReviewDecisionRequest, errors=(404, 409, 413, 422)
        ),
    }
