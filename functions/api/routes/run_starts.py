"""Starting and re-driving runs, for ``POST /runs``, ``POST /runs/{id}/redrive`` and the console.

The console's forms (``routes.console``) go through the same code paths as the JSON routes.

Kept apart from ``routes.runs`` (which imports the console for its HTML history), so the
console can call them without an import cycle.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from pydantic import BaseModel, ConfigDict, Field

from api.routes.common import BadRequest
from api.routes.limits import check_key
from api.routes.tenancy import owned_run
from api.services import get_runtime
from durable_agents.core.models import RunHeader
from durable_agents.core.tenancy import ALL_TENANTS, DEFAULT_TENANT

logger = Logger(child=True)
MAX_TIMEOUT_SECONDS = 366 * 24 * 3600


class StartRunRequest(BaseModel):
    """Body of ``POST /runs``."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=80)
    input: Any = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    execution_timeout: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_SECONDS)
    """This run's time limit in seconds (replaces the agent's ``execution_timeout``)."""


def start_in_tenant(
    tenant: str, request: StartRunRequest, header_key: str | None, caller: str
) -> tuple[RunHeader, bool]:
    """Starts a run in the caller's tenant (``POST /runs``'s and the console's).

    Idempotency keys are per tenant: another tenant's key never names (or reveals) a run of
    this one. The operators' tenant ``*`` owns no runs: its starts go to the default tenant.

    Returns:
        The run and whether this call created it (False: the key named an earlier start).

    Raises:
        BadRequest: If the header's and the body's keys differ, or a key is malformed.
    """
    if header_key and request.idempotency_key and header_key != request.idempotency_key:
        raise BadRequest("the Idempotency-Key header and the body's idempotency_key differ")
    if header_key:
        check_key(header_key, "the Idempotency-Key header")
    if request.idempotency_key:
        check_key(request.idempotency_key, "idempotency_key")
    key = request.idempotency_key or header_key
    owner = DEFAULT_TENANT if tenant == ALL_TENANTS else tenant
    run, created = get_runtime().start_run(
        request.agent,
        request.input,
        idempotency_key=key,
        tenant=owner,
        execution_timeout=request.execution_timeout,
    )
    logger.info(
        "run started" if created else "run start repeated",
        extra={"run_id": run.run_id, "agent": run.agent, "tenant": run.tenant, "caller": caller},
    )
    return run, created


def redrive_run(tenant: str, run_id: str, caller: str) -> RunHeader:
    """Resumes a PAUSED run or nudges a stalled one (``POST /runs/{id}/redrive``, the console).

    Raises:
        RunNotFoundError: If there is no such run, or it is another tenant's (404).
        RunStateConflictError: If the run has finished (409).
    """
    owned_run(tenant, run_id)
    header = get_runtime().redrive(run_id)
    logger.info("run re-driven", extra={"run_id": run_id, "caller": caller})
    return header
