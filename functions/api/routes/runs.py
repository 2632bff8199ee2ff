"""Runs (IAM, SigV4): start, list, show, history, redrive and migrate — within the caller's tenant.

Cancel and terminate are in ``routes.run_stops``.

A run belongs to the tenant of the caller who started it (``routes.tenancy``); every route that
names a run of another tenant answers 404 exactly as for a run that does not exist, and the
listing holds only the caller's tenant's runs (the operators' tenant ``*``: all).
"""

from __future__ import annotations

import re
from http import HTTPStatus

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from api.routes import console
from api.routes.common import BadRequest, header, json_body, ok, wants_html
from api.routes.run_query import MAX_VERSION_CHARS, list_page, listing_query
from api.routes.run_starts import StartRunRequest, redrive_run, start_in_tenant
from api.routes.tenancy import iam_caller, owned_run
from api.services import get_runtime
from durable_agents.admin.flow_views import run_flow
from durable_agents.admin.views import history, run_view
from durable_agents.aws.deferred import DeferredTracer
from durable_agents.core.ids import check_run_id
from durable_agents.core.models import RunHeader
from durable_agents.core.tenancy import ALL_TENANTS

logger = Logger(child=True)
# Made at the first traced call, not at import: it loads the X-Ray SDK (aws.deferred).
tracer = DeferredTracer()
router = Router()  # type: ignore[no-untyped-call]


class MigrateRunRequest(BaseModel):
    """Body of ``POST /runs/{run_id}/migrate``."""

    model_config = ConfigDict(extra="forbid")

    to_version: str = Field(min_length=1, max_length=MAX_VERSION_CHARS)
    dry_run: StrictBool = False


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


def caller_name(event: APIGatewayProxyEvent) -> str:
    """Who sent the request, for the log line (the ARN API Gateway verified)."""
    identity = event.request_context.identity
    return str(identity.user_arn or identity.caller or identity.source_ip or "unknown")


@router.post("/runs")
@tracer.capture_method(capture_response=False)
def start_run() -> Response[str]:
    """Starts a run in the caller's tenant; the same idempotency key returns the same run.

    Idempotency keys are per tenant: another tenant's key never names (or reveals) a run of
    this one. The operators' tenant ``*`` owns no runs: its starts go to the default tenant.
    """
    event = _event()
    _, tenant = iam_caller(event)
    request = StartRunRequest.model_validate(json_body(event))
    run, created = start_in_tenant(
        tenant, request, header(event, "Idempotency-Key"), caller_name(event)
    )
    return ok(
        HTTPStatus.CREATED if created else HTTPStatus.OK,
        {"created": created, "run": run_view(run)},
        headers={"Location": f"/runs/{run.run_id}"},
    )


@router.get("/runs")
@tracer.capture_method(capture_response=False)
def list_runs() -> Response[str]:
    """Lists the caller's tenant's runs, newest start first (``routes.run_query``, ADR 0012).

    Filters: ``status``, ``agent``, ``version``, ``since``/``until`` (start time, ISO-8601 with
    a timezone), ``children`` (sub-agent runs too) or ``parent`` (one run's sub-agent runs);
    ``limit`` ≤ 100. Every page carries ``cursor`` (null only at the end; a filtered page
    may be short and still carry one); a cursor of another query or tenant is refused.
    """
    event = _event()
    _, tenant = iam_caller(event)
    scope = None if tenant == ALL_TENANTS else tenant
    query = listing_query(event.query_string_parameters or {}, scope)
    page = list_page(get_runtime().store, query)
    return ok(HTTPStatus.OK, {"runs": [run_view(h) for h in page.runs], "cursor": page.cursor})


@router.get("/runs/<run_id>")
@tracer.capture_method(capture_response=False)
def get_run(run_id: str) -> Response[str]:
    """Returns a run's status, result or error, and what it is waiting on.

    ``flow``: its flow control (ADR 0030): priority, its wait in its agent's queue when it is
    QUEUED, and its tree's budget with this run's own share of the use.
    """
    _, tenant = iam_caller(_event())
    run = owned_run(tenant, check_run_id(run_id))
    rt = get_runtime()
    return ok(HTTPStatus.OK, {**run_view(run), "flow": run_flow(rt.store, run, rt.clock.now_ms())})


@router.get("/runs/<run_id>/history")
@tracer.capture_method(capture_response=False)
def get_history(run_id: str) -> Response[str]:
    """Returns the run's journal as events in program order (a browser: the console's page).

    ``?format=json`` asks for the JSON whatever ``Accept`` says: the console's link to it.
    """
    wanted_format = (_event().query_string_parameters or {}).get("format")
    if wanted_format not in (None, "json"):
        raise BadRequest(f"format must be json (or absent); got {wanted_format[:20]!r}")
    if wanted_format is None and wants_html(_event()):
        return console.timeline_response(_event(), run_id)
    _, tenant = iam_caller(_event())
    run = owned_run(tenant, check_run_id(run_id))
    # ``?generation=N``: an earlier generation of a run that continued as new (ADR 0016).
    wanted = _generation((_event().query_string_parameters or {}).get("generation"), run)
    snapshot = get_runtime().store.load_generation(run_id, wanted)
    return ok(
        HTTPStatus.OK,
        {"run_id": run_id, "generation": wanted, "events": history(snapshot)},
    )


def _generation(text: str | None, run: RunHeader) -> int:
    """The generation asked for (the current one by default).

    Raises:
        BadRequest: If it is not a whole number from 0 to the run's current generation.
    """
    if text is None:
        return run.generation
    # ASCII digits, and few of them: ``str.isdigit`` takes "²" (``int`` then raises) and
    # ``int`` takes "٣" or 5,000 digits (a ValueError past 4,300): a 500 either way.
    if _GENERATION.fullmatch(text) is None or int(text) > run.generation:
        raise BadRequest(
            f"generation must be a whole number from 0 to {run.generation} in ASCII digits; "
            f"got {text[:20]!r}"
        )
    return int(text)


_GENERATION = re.compile(r"[0-9]{1,9}")


@router.post("/runs/<run_id>/redrive")
@tracer.capture_method(capture_response=False)
def redrive(run_id: str) -> Response[str]:
    """Resumes a PAUSED run after a fix was deployed, or nudges a stalled one."""
    event = _event()
    _, tenant = iam_caller(event)
    header_ = redrive_run(tenant, check_run_id(run_id), caller_name(event))
    return ok(HTTPStatus.ACCEPTED, run_view(header_))


@router.post("/runs/<run_id>/migrate")
@tracer.capture_method(capture_response=False)
def migrate(run_id: str) -> Response[str]:
    """Moves a SUSPENDED, PAUSED or VERSION_UNAVAILABLE run to another version of its agent.

    The deployed migration says what changes; the new code is replayed over the journal first
    and a divergence refuses it (409, with the reason). ``dry_run`` checks everything and
    writes nothing. Unknown migration or undeployed version: 409 naming what is missing (the
    run exists; what it asks for does not). Another tenant's run: 404, like none.
    """
    event = _event()
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    request = MigrateRunRequest.model_validate(json_body(event))
    owned_run(tenant, run_id)
    # Imported by the first migration, not at init: an operator's rare action, and the module
    # replays agents (docs/benchmarks.md, "Cold start").
    from durable_agents.admin.migration_commit import migrate_run  # noqa: PLC0415 - cold start

    result = migrate_run(
        get_runtime(), run_id, request.to_version, by=principal.display, dry_run=request.dry_run
    )
    logger.info(
        "run migrated" if result.committed else "run migration checked (dry run)",
        extra={
            "run_id": run_id,
            "from_version": result.record["from"].get("workflow_version"),
            "to_version": request.to_version,
            "caller": caller_name(event),
        },
    )
    return ok(
        HTTPStatus.OK,
        {"run": run_view(result.run), "migration": result.record, "committed": result.committed},
    )
