"""Re-running finished runs (IAM, SigV4): ``POST /runs/{id}/rerun`` and ``POST /runs/rerun``.

A rerun is a new run of the same agent that replays the original's records before the chosen
operation and reuses every side effect the original (or an earlier rerun of it) already made
with the same request (``durable_agents.engine.reruns``). Authorized as a cancel is: an IAM
caller, within its tenant (another tenant's run is 404, like none).

``POST /runs/{id}/rerun`` answers 201 with the new run (200 for the same request again, which
names the same rerun), the plan (what was copied, the chain, the side effects at or after the
chosen operation: reused when asked for again, or with ``repeat_effects`` repeated), and with
``dry_run`` only the plan (200, nothing written). ``POST /runs/rerun`` does the same for every
run a filter matches, one page at a time (pass back ``cursor``): each run's rerun is made once
however often the request is sent, and the reruns one request made are never matched by it
again (a rerun that fails too is not re-run by the next page or the same request repeated).
"""

from __future__ import annotations

import hashlib
import json
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictBool

from api.routes.common import header, json_body, ok
from api.routes.limits import MAX_CURSOR_CHARS, MAX_KEY_CHARS, BadRequest
from api.routes.run_query import MAX_VERSION_CHARS, list_page, parse_time
from api.routes.tenancy import iam_caller, owned_run
from api.services import get_runtime
from durable_agents.admin.views import run_view
from durable_agents.aws.deferred import DeferredTracer
from durable_agents.core.ids import check_name, check_run_id
from durable_agents.core.models import RunHeader, RunStatus
from durable_agents.core.tenancy import ALL_TENANTS
from durable_agents.engine import reruns
from durable_agents.errors import DurableError

logger = Logger(child=True)
# Made at the first traced call, not at import: it loads the X-Ray SDK (aws.deferred).
tracer = DeferredTracer()
router = Router()  # type: ignore[no-untyped-call]
MAX_FROM_CHARS = 600
MAX_BULK_LIMIT = 25  # each rerun is a few writes and reads: a page stays well within 29 s
RERUNNABLE_NAMES = sorted(s.value for s in reruns.RERUNNABLE)
RerunFrom = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_FROM_CHARS,
        description="An operation as the run's timeline shows it (charge:2), start, or "
        "failed (the operation that failed or never finished).",
    ),
]
"""Where a rerun starts (the JSON routes' and the console form's ``from``)."""


class RerunOptions(BaseModel):
    """What a rerun runs: from where, which version, and whether side effects are repeated."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: RerunFrom = Field(default=reruns.FAILED, alias="from")
    version: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_VERSION_CHARS,
        description="The agent version to run (default: the deployed one).",
    )
    repeat_effects: StrictBool = Field(
        default=False,
        description="Run every side effect again instead of reusing the recorded ones "
        "(listed in the answer; try dry_run first).",
    )
    dry_run: StrictBool = Field(default=False, description="Only say what would happen.")


class RerunRequest(RerunOptions):
    """Body of ``POST /runs/{run_id}/rerun`` (optional: re-run from the failed operation)."""

    input: JsonValue = Field(default=None, description="A replacement input (default: the run's).")


class BulkRerunRequest(RerunOptions):
    """Body of ``POST /runs/rerun``: which runs (the filter) and how (as one rerun)."""

    agent: str = Field(min_length=1, max_length=128, description="The runs' agent.")
    status: RunStatus = Field(default=RunStatus.FAILED, description="Their status.")
    since: str | None = Field(default=None, description="Started at or after (ISO-8601).")
    until: str | None = Field(default=None, description="Started before (ISO-8601).")
    tenant: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Operators (tenant *) only: the tenant whose runs to re-run.",
    )
    limit: int = Field(default=10, ge=1, le=MAX_BULK_LIMIT)
    cursor: str | None = Field(default=None, max_length=MAX_CURSOR_CHARS)


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


@router.post("/runs/<run_id>/rerun")
@tracer.capture_method(capture_response=False)
def rerun(run_id: str) -> Response[str]:
    """Re-runs one finished run of the caller's tenant (see the module docstring)."""
    event = _event()
    principal, tenant = iam_caller(event)
    run_id = check_run_id(run_id)
    body = json_body(event, required=False)
    request = RerunRequest.model_validate({} if body is None else body)
    plan, started, created = rerun_owned(
        principal.display, tenant, run_id, request, header(event, "Idempotency-Key")
    )
    answer = _answer(plan, request.repeat_effects)
    if started is None:
        return ok(HTTPStatus.OK, {"dry_run": True, **answer})
    return ok(
        HTTPStatus.CREATED if created else HTTPStatus.OK,
        {"created": created, "run": run_view(started), **answer},
        headers={"Location": f"/runs/{started.run_id}"},
    )


def rerun_owned(
    caller: str, tenant: str, run_id: str, request: RerunRequest, idempotency_key: str | None
) -> tuple[reruns.RerunPlan, RunHeader | None, bool]:
    """Re-runs (or, with ``dry_run``, plans) one run of ``tenant``.

    The JSON route's and the console's one code path: the tenant checked first, then
    ``Runtime.rerun``; a rerun made is logged with its caller.

    Args:
        caller: Who asks (logged with the new run).
        tenant: The caller's tenant (``ALL_TENANTS``: any run).
        run_id: The run to re-run (already checked as an id).
        request: What to re-run and how.
        idempotency_key: The rerun's key (None: derived from the request).

    Returns:
        ``Runtime.rerun``'s answer: the plan, the new run (None for a dry run), whether this
        call created it.

    Raises:
        RunNotFoundError: If there is no such run, or it is another tenant's (404).
        RerunRefusedError: If it cannot be re-run now (409).
        UnknownOperationError: If ``from`` names no operation of the run (400).
        DurableError: What else ``Runtime.rerun`` raises (a version not deployed, ...).
    """
    owned_run(tenant, run_id)
    replaced = "input" in request.model_fields_set
    plan, started, created = get_runtime().rerun(
        run_id,
        request.from_,
        version=request.version,
        input_value=request.input if replaced else reruns.SAME_INPUT,
        repeat_effects=request.repeat_effects,
        idempotency_key=idempotency_key,
        dry_run=request.dry_run,
    )
    if started is not None:
        logger.info(
            "run re-run" if created else "run re-run (repeated request)",
            extra={"run_id": run_id, "rerun_run_id": started.run_id, "caller": caller},
        )
    return plan, started, created


def _answer(plan: reruns.RerunPlan, repeat: bool) -> dict[str, Any]:
    """The plan, and the side effects it repeats or may reuse, listed first."""
    described = plan.describe()
    effects = described.pop("effects_after")
    key = "repeated_effects" if repeat else "reusable_effects"
    return {key: effects, "rerun": described}


@router.post("/runs/rerun")
@tracer.capture_method(capture_response=False)
def rerun_many() -> Response[str]:
    """Re-runs one page of the runs a filter matches (see the module docstring)."""
    event = _event()
    principal, tenant = iam_caller(event)
    request = BulkRerunRequest.model_validate(json_body(event))
    if request.status not in reruns.RERUNNABLE:
        raise BadRequest(f"status must be one of {', '.join(RERUNNABLE_NAMES)}")
    if request.tenant is not None and tenant != ALL_TENANTS:
        raise BadRequest("only operators (tenant *) name a tenant; yours is implied")
    scope = request.tenant if tenant == ALL_TENANTS else tenant
    query: dict[str, Any] = {
        "tenant": scope,
        "status": request.status,
        "agent": check_name(request.agent, "agent"),
        "limit": request.limit,
        "cursor": request.cursor,
    }
    for name in ("since", "until"):
        value = getattr(request, name)
        if value is not None:
            query[f"{name}_ms"] = parse_time(value, name)
    if query.get("since_ms", 0) >= query.get("until_ms", 10**13):
        raise BadRequest("since must be before until")
    explicit = header(event, "Idempotency-Key")
    if explicit is not None and len(explicit) > MAX_KEY_CHARS:
        raise BadRequest(f"Idempotency-Key must be at most {MAX_KEY_CHARS} characters")
    bulk = bulk_key(request, scope, explicit)
    page = list_page(get_runtime().store, query)
    results = [_one(run, request, bulk, explicit) for run in page.runs]
    logger.info(
        "runs re-run" if not request.dry_run else "runs re-run (dry run)",
        extra={
            "matched": len(results),
            "started": sum(r["outcome"] == "started" for r in results),
            "caller": principal.display,
        },
    )
    return ok(
        HTTPStatus.OK,
        {
            "dry_run": request.dry_run,
            "results": results,
            "cursor": page.cursor,
            "counts": {
                outcome: sum(r["outcome"] == outcome for r in results)
                for outcome in ("started", "existing", "planned", "refused", "skipped")
            },
        },
    )


def bulk_key(request: BulkRerunRequest, scope: str | None, explicit: str | None) -> str:
    """What a bulk request's reruns are marked with (``rerun.bulk``): its options, or its key.

    The time range is left out: ``--since 1d`` is another instant at every call, and the
    same command sent again must not re-run what it already re-ran.
    """
    if explicit is not None:
        return f"key:{hashlib.sha256(explicit.encode()).hexdigest()[:32]}"
    fields = request.model_dump(
        mode="json", exclude={"cursor", "limit", "dry_run", "since", "until"}
    )
    digest = hashlib.sha256(json.dumps([fields, scope], sort_keys=True).encode()).hexdigest()
    return f"bulk:{digest[:32]}"


def _one(
    run: RunHeader, request: BulkRerunRequest, bulk: str, explicit: str | None
) -> dict[str, Any]:
    """One matched run's rerun (or plan), or why it was refused; never an exception.

    A run's rerun is named by the run and the options (as ``POST /runs/{id}/rerun`` names it,
    or by the request's ``Idempotency-Key``), so sending the request again, with any time
    range, finds the reruns it made. A run a bulk request made is never matched by one: its
    original is what bulk reruns re-run (a failed rerun would otherwise be re-run beside it).
    """
    try:
        # On a consistent read: a listed header is read from an index and may be behind.
        current = get_runtime().store.get_run(run.run_id)
        made = current.rerun or {}
        if made.get("bulk"):
            return {
                "run_id": run.run_id,
                "outcome": "skipped",
                "reason": f"a rerun made by a bulk request (of {made.get('of')}): re-run its "
                "original, or this run alone",
            }
        key = None if explicit is None else reruns.rerun_key(run.run_id, {"bulk": bulk})
        plan, started, created = get_runtime().rerun(
            run.run_id,
            request.from_,
            version=request.version,
            repeat_effects=request.repeat_effects,
            dry_run=request.dry_run,
            bulk=bulk,
            idempotency_key=key,
        )
    except DurableError as exc:  # refused, diverged, unknown operation: said, and the next
        return {
            "run_id": run.run_id,
            "outcome": "refused",
            "error": {"type": type(exc).__name__, "message": str(exc)},
        }
    out: dict[str, Any] = {"run_id": run.run_id, **_answer(plan, request.repeat_effects)}
    if started is None:
        return {**out, "outcome": "planned"}
    return {
        **out,
        "outcome": "started" if created else "existing",
        "rerun_run_id": started.run_id,
        "status": started.status.value,
    }
