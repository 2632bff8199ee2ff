"""The run console (``/console``): runs, one run's timeline, pending approvals and reviews.

Server-rendered HTML (``api.console_page``, ``api.console_timeline``) for operators in a
browser; no scripts. Authentication is the Api's: these are IAM routes like every other
(``api.authn`` refuses an event without an IAM caller), so a deployed console is reached
through something that signs the browser's requests (docs/adr/0013-run-console.md); local mode
serves it on 127.0.0.1. Everything is within the caller's tenant (``routes.tenancy``):
another tenant's run is the same 404 as none.

The actions post HTML forms and go through the Api's own code paths and checks: cancel and
terminate are ``run_stops.stop_run`` (``POST /runs/{id}/cancel``, ``/terminate``), redrive and
a start are ``routes.run_starts`` (``POST /runs/{id}/redrive``, ``POST /runs``), a re-run (or
its preview) is ``routes.reruns.rerun_owned`` (``POST /runs/{id}/rerun``), an event is
``run_events.record_event`` (``POST /runs/{id}/events/{name}``), a budget extension is
``engine.flow.extensions.extend_budget`` (``POST /runs/{id}/budget``), an approval decision is
the one ``POST /approvals/{id}`` makes (``routes.approval_decisions``: the caller must match an
``iam:`` approver pattern), a review decision is ``routes.reviews.record_review`` (the tool's
reviewers, else ``REVIEW_OPERATORS``). A form post is accepted only from the console's own
pages (``check_same_origin``: the browser's ``Sec-Fetch-Site``/``Origin``), so another site
cannot make an operator's browser — or the signing proxy in front of it — act. Each action
answers ``303 See Other`` back to its page.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import quote, urlencode

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from pydantic import BaseModel, ConfigDict, Field

from api.console_page import (
    CONSOLE_HEADERS,
    DEFAULT_LIMIT,
    render_pending_page,
    render_runs_page,
    root_of,
)
from api.console_timeline import child_run_ids, render_rerun_preview, render_timeline_page
from api.cross_site import origin_names_host
from api.routes.approval_decisions import DecisionRequest, authorize, decide
from api.routes.common import BadRequest, find_wait, form_or_json_body, header, is_form
from api.routes.limits import MAX_KEY_CHARS, check_key, parse_json
from api.routes.reruns import RerunFrom, RerunRequest, rerun_owned
from api.routes.reviews import ReviewDecisionRequest, record_review
from api.routes.run_events import record_event
from api.routes.run_query import MAX_VERSION_CHARS, list_page, listing_query
from api.routes.run_starts import StartRunRequest, redrive_run, start_in_tenant
from api.routes.run_stops import StopRunRequest, stop_run
from api.routes.tenancy import iam_caller, owned_run, owned_wait, tenant_map
from api.routes.tenant_listing import MAX_LIMIT, ListingQuery, collect
from api.services import get_runtime
from durable_agents.admin.flow_views import flow_overview, run_flow
from durable_agents.core.ids import check_name, check_run_id
from durable_agents.core.models import WaitStatus
from durable_agents.core.tenancy import ALL_TENANTS
from durable_agents.engine import reruns
from durable_agents.engine.cancellation import CANCEL, TERMINATE
from durable_agents.engine.flow.extensions import extend_budget
from durable_agents.engine.operations.approval import KIND
from durable_agents.errors import DurableError, InfrastructureError
from durable_agents.llm.streams import StreamCache, StreamChunk
from durable_agents.tools import default_tools

logger = Logger(child=True)
router = Router()  # type: ignore[no-untyped-call]
MAX_STREAM_PAGES = 4
"""Stream cache pages (of 500 chunks) a timeline reads: the text shown is at most 2,000 chunks."""
MAX_EXTENSION_TOKENS = 10**12  # as POST /runs/{id}/budget's (routes.flow)
MAX_EXTENSION_USD = 10**9
MAX_BUDGET_REASON_CHARS = 500


class ConsoleEventForm(BaseModel):
    """The timeline page's "Send an event" form (``POST /console/runs/{run_id}/events``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=80, description="The event's name.")
    data: str = Field(default="", description="The event's value, as JSON (empty: null).")
    idempotency_key: str = Field(
        default="", max_length=MAX_KEY_CHARS, description="Names the event (sent twice: once)."
    )


class ConsoleStartForm(BaseModel):
    """The runs page's "Start a run" form (``POST /console/runs``)."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=80, description="The agent to run.")
    input: str = Field(default="", description="The run's input, as JSON (empty: null).")
    idempotency_key: str = Field(
        default="", max_length=MAX_KEY_CHARS, description="The form's key: sent twice, one run."
    )


class ConsoleRerunForm(BaseModel):
    """The timeline page's "Re-run" form (``POST /console/runs/{run_id}/rerun``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: RerunFrom = Field(default=reruns.FAILED, alias="from")
    version: str = Field(
        default="", max_length=MAX_VERSION_CHARS, description="Empty: the deployed version."
    )
    repeat_effects: Literal["", "true"] = Field(
        default="", description="true (the checkbox): make every side effect again."
    )
    dry_run: Literal["", "true"] = Field(
        default="", description="true (the Preview button): only show what would happen."
    )


class ConsoleBudgetForm(BaseModel):
    """A BUDGET_EXCEEDED run's "Extend budget" form (``POST /console/runs/{run_id}/budget``).

    The JSON route's limits (``routes.flow.ExtendBudgetRequest``); an amount left blank is 0.
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, allow_inf_nan=False)

    add_tokens: int = Field(default=0, ge=0, le=MAX_EXTENSION_TOKENS, description="Tokens to add.")
    add_cost_usd: float = Field(
        default=0.0, ge=0, le=MAX_EXTENSION_USD, description="Dollars to add."
    )
    reason: str = Field(
        min_length=1, max_length=MAX_BUDGET_REASON_CHARS, description="Why (recorded with it)."
    )


class CrossSiteFormError(DurableError):
    """A console form was posted from another site, or without saying where from (403)."""


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


def _html(page: str) -> Response[str]:
    return Response(
        status_code=HTTPStatus.OK.value,
        content_type="text/html; charset=utf-8",
        body=page,
        headers=CONSOLE_HEADERS,
    )


def _see_other(location: str) -> Response[str]:
    return Response(
        status_code=HTTPStatus.SEE_OTHER.value,
        content_type="text/html; charset=utf-8",
        body="",
        headers={**CONSOLE_HEADERS, "Location": location},
    )


def check_same_origin(event: APIGatewayProxyEvent) -> None:
    """Refuses a form post that did not come from a page of this origin (CSRF).

    A browser says where a request comes from: ``Sec-Fetch-Site`` (every current browser) must
    be ``same-origin``; without it, ``Origin`` must name this host. A request with neither did
    not come from a browser's form: such clients use the JSON routes.

    Raises:
        CrossSiteFormError: If the request is cross-site, or says nothing about its origin.
    """
    site = header(event, "Sec-Fetch-Site")
    if site is not None:
        if site.strip().lower() != "same-origin":
            raise CrossSiteFormError(
                f"console forms are accepted from the console's own pages only (Sec-Fetch-Site: "
                f"{site[:40]!r})"
            )
        return
    origin = header(event, "Origin")
    # The middleware's parsing (api.cross_site): an unreadable Origin ("http://[") matches no
    # host instead of raising.
    if origin and origin_names_host(origin, header(event, "Host")):
        return
    raise CrossSiteFormError(
        "console forms are accepted from the console's own pages only (no Sec-Fetch-Site, and "
        "Origin does not name this host); API clients use the JSON routes"
    )


def _form(event: APIGatewayProxyEvent) -> dict[str, str]:
    check_same_origin(event)
    if not is_form(event):
        raise BadRequest("console actions take an HTML form (application/x-www-form-urlencoded)")
    fields = form_or_json_body(event)
    assert isinstance(fields, dict)
    return fields


@dataclass(frozen=True, slots=True)
class RunsQuery:
    """The runs list's filters, read and checked in one place (``runs_query``).

    Attributes:
        list_kwargs: What ``JournalStore.list_runs`` is called with.
        echo: The filters as the page shows them and keeps them when paging.
    """

    list_kwargs: dict[str, Any]
    echo: dict[str, str]


_FILTERS = ("status", "agent", "since", "children", "limit", "cursor")


def runs_query(params: dict[str, str], scope: str | None) -> RunsQuery:
    """The ``GET /console`` filters, checked like ``GET /runs``'s (``run_query``).

    ``status``, ``agent``, ``since`` (start time, ISO-8601 with a timezone), ``children``,
    ``limit`` and ``cursor``: the one place the console maps its query to ``list_runs``.

    Raises:
        BadRequest: If a filter is malformed (the same 400s as ``GET /runs``).
    """
    echo = {k: params.get(k, "") for k in _FILTERS}
    given = {k: v for k, v in echo.items() if v}
    given.setdefault("limit", str(DEFAULT_LIMIT))
    return RunsQuery(listing_query(given, scope), echo)


@router.get("/console")
def console_runs() -> Response[str]:
    """The runs of the caller's tenant, newest start first, filtered and paged."""
    event = _event()
    _, tenant = iam_caller(event)
    scope = None if tenant == ALL_TENANTS else tenant
    query = runs_query(dict(event.query_string_parameters or {}), scope)
    page = list_page(get_runtime().store, query.list_kwargs)
    # Queues are keyed by tenant too: only operators (tenant *, or a deployment without
    # tenants) see them.
    flow = _flow_overview() if tenant == ALL_TENANTS or not tenant_map().configured else None
    return _html(
        render_runs_page(
            page.runs,
            filters=query.echo,
            next_cursor=page.cursor,
            root=root_of(event.path),
            agents=sorted(get_runtime().registry.names()),
            start_key=f"console-{secrets.token_urlsafe(18)}",
            flow=flow,
        )
    )


def _flow_overview() -> Mapping[str, Any]:
    """``GET /flow``'s figures for the runs page; unreadable ones never fail the page."""
    rt = get_runtime()
    try:
        return flow_overview(rt.store, rt.registry, default_tools, rt.clock.now_ms())
    except (Exception, InfrastructureError):
        logger.warning("the console's flow overview could not be read", exc_info=True)
        return {"unavailable": True}


def timeline_response(event: APIGatewayProxyEvent, run_id: str) -> Response[str]:
    """The timeline page of one of the caller's tenant's runs (also ``GET /runs/{id}/history``).

    Raises:
        InvalidNameError: If ``run_id`` cannot be a run id (400).
        RunNotFoundError: If there is no such run, or it is another tenant's (404).
    """
    _, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    owned_run(tenant, run_id)
    rt = get_runtime()
    snapshot = rt.store.load(run_id)
    chunks: list[StreamChunk] = []
    cache = rt.stream_sink
    if isinstance(cache, StreamCache):
        after: str | None = None
        for _ in range(MAX_STREAM_PAGES):
            page = cache.read(run_id, after=after)
            chunks += page.chunks
            if not page.chunks or page.cursor == after:
                break
            after = page.cursor
    params = event.query_string_parameters or {}
    return _html(
        render_timeline_page(
            snapshot,
            streamed_texts(chunks),
            root=root_of(event.path),
            children=child_run_ids(snapshot),
            done=params.get("done"),
            follow=params.get("follow") == "1",
            flow=run_flow(rt.store, snapshot.header, rt.clock.now_ms()),
        )
    )


def streamed_texts(chunks: list[StreamChunk]) -> list[tuple[str, str]]:
    """Each streaming operation's text as a reader sees it, in the order they began.

    A ``begin`` chunk (re)starts an operation's text (attempt 2: its step crashed mid-stream
    and the text starts over); ``text`` chunks append. As ``durable_agents_local.console``'s,
    which the Api's package does not include.
    """
    texts: dict[str, str] = {}
    for chunk in chunks:
        if chunk.kind == "begin":
            texts[chunk.operation_id] = ""
        elif chunk.kind == "text":
            texts[chunk.operation_id] = texts.get(chunk.operation_id, "") + (chunk.text or "")
    return list(texts.items())


@router.get("/console/runs/<run_id>")
def console_run(run_id: str) -> Response[str]:
    """One run: its state, every operation in order, its children and what it streamed."""
    return timeline_response(_event(), run_id)


def _back_to_run(event: APIGatewayProxyEvent, run_id: str, done: str) -> Response[str]:
    """303 to the run's timeline page (relative to the action's path) with a ``done`` notice."""
    return _see_other(f"{root_of(event.path)}console/runs/{quote(run_id, safe='')}?done={done}")


@router.post("/console/runs/<run_id>/cancel")
def console_cancel(run_id: str) -> Response[str]:
    """Cancels a run from its timeline page (``POST /runs/{id}/cancel``'s code path)."""
    return _console_stop(run_id, CANCEL, "cancel-requested")


@router.post("/console/runs/<run_id>/terminate")
def console_terminate(run_id: str) -> Response[str]:
    """Terminates a run from its timeline page (``POST /runs/{id}/terminate``'s code path)."""
    return _console_stop(run_id, TERMINATE, "terminate-requested")


def _console_stop(run_id: str, mode: str, done: str) -> Response[str]:
    event = _event()
    check_same_origin(event)
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    fields = _form(event)
    request = StopRunRequest.model_validate({"reason": fields.get("reason", "")})
    stop_run(principal, tenant, run_id, mode, request)
    return _back_to_run(event, run_id, done)


@router.post("/console/runs/<run_id>/budget")
def console_extend_budget(run_id: str) -> Response[str]:
    """Extends a run tree's budget from its page (``POST /runs/{id}/budget``'s code path).

    The form's ``add_tokens``, ``add_cost_usd`` (empty: 0) and ``reason``; the extension
    records the IAM caller as who. The runs the budget paused go on.

    Raises:
        CrossSiteFormError: If the form was not posted from the console's own pages (403).
        RunNotFoundError: If there is no such run, or it is another tenant's (404).
        NoBudgetError: If the run's tree has no budget.
        ValidationError: If an amount is negative or not a number, or the reason is empty (422).
    """
    event = _event()
    check_same_origin(event)
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    fields = {k: v for k, v in _form(event).items() if k == "reason" or v.strip()}
    request = ConsoleBudgetForm.model_validate(fields)
    owned_run(tenant, run_id)
    rt = get_runtime()
    extend_budget(
        rt.store, rt.clock, rt.publisher, run_id,
        add_tokens=request.add_tokens, add_cost_usd=request.add_cost_usd,
        by=principal.display, reason=request.reason,
    )  # fmt: skip
    logger.info("run budget extended", extra={"run_id": run_id, "caller": principal.display})
    return _back_to_run(event, run_id, "budget-extended")


@router.post("/console/runs/<run_id>/redrive")
def console_redrive(run_id: str) -> Response[str]:
    """Re-drives a run from its timeline page (``POST /runs/{id}/redrive``'s code path)."""
    event = _event()
    check_same_origin(event)
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    _form(event)  # a form, from this origin; it carries no field
    redrive_run(tenant, run_id, principal.display)
    return _back_to_run(event, run_id, "redriven")


@router.post("/console/runs/<run_id>/rerun")
def console_rerun(run_id: str) -> Response[str]:
    """Re-runs a finished run from its timeline page (``POST /runs/{id}/rerun``'s code path).

    The form's ``from``, ``version`` (empty: the deployed one) and ``repeat_effects``; its
    Preview button (``dry_run``) answers a page saying what would be copied and which side
    effects would be reused or made again, with a form to make the rerun, and writes nothing.
    A rerun answers 303 to the new run's page. The same options twice name the same rerun
    (its key is derived from the request, as the JSON route's is without a key).

    Raises:
        CrossSiteFormError: If the form was not posted from the console's own pages (403).
        RunNotFoundError: If there is no such run, or it is another tenant's (404).
        RerunRefusedError: If the run has not finished, or a call of its chain is not
            settled (409).
        UnknownOperationError: If ``from`` names no operation of the run (400).
    """
    event = _event()
    check_same_origin(event)
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    fields = ConsoleRerunForm.model_validate(_form(event))
    request = RerunRequest.model_validate(
        {
            "from": fields.from_.strip(),
            "version": fields.version.strip() or None,
            "repeat_effects": fields.repeat_effects == "true",
            "dry_run": fields.dry_run == "true",
        }
    )
    plan, started, created = rerun_owned(principal.display, tenant, run_id, request, None)
    if started is None:
        return _html(
            render_rerun_preview(
                run_id,
                plan.describe(),
                from_=request.from_,
                version=request.version,
                repeat_effects=request.repeat_effects,
                root=root_of(event.path),
            )
        )
    done = "rerun-started" if created else "rerun-repeated"
    return _see_other(
        f"{root_of(event.path)}console/runs/{quote(started.run_id, safe='')}?done={done}"
    )


@router.post("/console/runs/<run_id>/events")
def console_send_event(run_id: str) -> Response[str]:
    """Sends an event to a run (``POST /runs/{id}/events/{name}``'s checks and recording).

    The form's ``name`` is the event's name and ``data`` its JSON value (empty: null), under
    the Api's JSON limits; invalid JSON is a 400 that says why. ``idempotency_key``, when
    given, names the event as the ``Idempotency-Key`` header does.
    """
    event = _event()
    check_same_origin(event)
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    fields = ConsoleEventForm.model_validate(_form(event))
    name = check_name(fields.name.strip(), "event")
    key = fields.idempotency_key.strip()
    if key:
        check_key(key, "idempotency_key")
    payload = _json_text(fields.data, "data")
    record_event(principal, tenant, run_id, name, payload, key or None)
    return _back_to_run(event, run_id, "event-sent")


def _json_text(text: str, name: str) -> Any:
    """A form field holding JSON, parsed under the Api's limits (empty: null).

    Raises:
        BadRequest: If it is not JSON within the limits, saying which field and why.
    """
    if not text.strip():
        return None
    try:
        return parse_json(text)
    except BadRequest as exc:
        raise BadRequest(f"the {name} field: {exc}") from exc


@router.post("/console/runs")
def console_start_run() -> Response[str]:
    """Starts a run from the runs page (``POST /runs``'s code path), then shows it.

    The form's ``agent``, ``input`` (JSON; empty: null) and ``idempotency_key``: the page puts
    a fresh one in each form it renders, so a form sent twice starts one run.
    """
    event = _event()
    check_same_origin(event)
    principal, tenant = iam_caller(event)
    fields = ConsoleStartForm.model_validate(_form(event))
    request = StartRunRequest.model_validate(
        {
            "agent": fields.agent.strip(),
            "input": _json_text(fields.input, "input"),
            "idempotency_key": fields.idempotency_key.strip() or None,
        }
    )
    run, created = start_in_tenant(tenant, request, None, principal.display)
    done = "run-started" if created else "run-start-repeated"
    return _see_other(f"{root_of(event.path)}console/runs/{quote(run.run_id, safe='')}?done={done}")


@router.get("/console/approvals")
def console_pending() -> Response[str]:
    """Pending approvals and tool calls in review of the caller's tenant, with their actions.

    Each list is paged on its own (``approvals_cursor``, ``reviews_cursor``: the cursors of
    ``GET /approvals`` and ``GET /reviews``), so another tenant's backlog never hides one.
    """
    event = _event()
    _, tenant = iam_caller(event)
    params = event.query_string_parameters or {}
    store = get_runtime().store
    cursors = {name: params.get(name) or None for name in ("approvals_cursor", "reviews_cursor")}
    approvals = collect(
        ListingQuery("approvals", tenant, {"status": "pending"}),
        cursors["approvals_cursor"],
        lambda cursor, size, tenant: store.waits_page(
            KIND, WaitStatus.PENDING, limit=size, cursor=cursor, tenant=tenant
        ),
        lambda r: r.tenant,
        MAX_LIMIT,
    )
    reviews = collect(
        ListingQuery("reviews", tenant),
        cursors["reviews_cursor"],
        lambda cursor, size, tenant: store.reviews_page(limit=size, cursor=cursor, tenant=tenant),
        lambda r: r.tenant,
        MAX_LIMIT,
    )

    def following(name: str, cursor: str | None) -> str | None:
        # The other list stays on its page.
        if cursor is None:
            return None
        kept = {k: v for k, v in cursors.items() if v and k != name}
        return "approvals?" + urlencode({**kept, name: cursor})

    return _html(
        render_pending_page(
            approvals.items,
            reviews.items,
            root=root_of(event.path),
            done=params.get("done"),
            more_approvals=following("approvals_cursor", approvals.cursor),
            more_reviews=following("reviews_cursor", reviews.cursor),
            paged=any(cursors.values()),
        )
    )


@router.post("/console/approvals/<approval_id>")
def console_decide_approval(approval_id: str) -> Response[str]:
    """Approves or rejects as the IAM caller (``POST /approvals/{id}``'s checks and recording)."""
    event = _event()
    check_same_origin(event)  # before anything is read: a cross-site post learns nothing
    principal, tenant = iam_caller(event)
    record = owned_wait(tenant, find_wait(KIND, approval_id))
    authorize(principal, record)
    request = DecisionRequest.model_validate(_form(event))
    decide(record, request, decided_by=principal.display, via="iam")
    verdict = "approved" if request.decision == "approve" else "rejected"
    return _see_other(f"{root_of(event.path)}console/approvals?done=approval-{verdict}")


@router.post("/console/reviews/<operation_id>")
def console_decide_review(operation_id: str) -> Response[str]:
    """Decides a tool call in review (``POST /reviews/{id}``'s checks and recording)."""
    event = _event()
    reviewer, tenant = iam_caller(event)
    fields = _form(event)
    result_text = fields.get("result", "").strip()
    # Under the Api's JSON limits (depth, number length), like a JSON body.
    result = parse_json(result_text) if result_text else None
    body = ReviewDecisionRequest.model_validate(
        {
            "decision": fields.get("decision", ""),
            "comment": fields.get("comment", ""),
            "result": result,
            "external_id": fields.get("external_id") or None,
        }
    )
    record_review(reviewer, tenant, operation_id, body)
    return _see_other(f"{root_of(event.path)}console/approvals?done=review-decided")
