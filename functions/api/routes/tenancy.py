"""Whose runs a caller sees: the caller's tenant, and 404 for everything of another tenant.

``durable_agents.core.tenancy`` says what a tenant is; this is where the Api applies it. Something
of another tenant is refused with exactly the error a non-existent one gets (same type, same
message but for the id the caller sent), so a caller cannot tell "not yours" from "none".
"""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from api.services import get_runtime
from durable_agents.auth.deciders import principal_from_iam
from durable_agents.auth.tokens import AuthUnavailableError
from durable_agents.core.models import RunHeader, WaitRecord
from durable_agents.core.principals import Principal
from durable_agents.core.tenancy import (
    ALL_TENANTS,
    DEFAULT_TENANT,
    TenantMap,
    check_tenant,
    visible,
)
from durable_agents.errors import (
    DurableError,
    EffectNotFoundError,
    RunNotFoundError,
    WaitNotFoundError,
)
from durable_agents.journal.generation_keys import locate


class TenantNotMappedError(DurableError):
    """The caller is authenticated but belongs to no tenant (403).

    Only once tenants are configured (``TENANT_MAP``): an IAM caller the map does not name, or
    a JWT without a tenant claim (or one claiming every tenant, which only operators have).
    """


def tenant_map() -> TenantMap:
    """``TENANT_MAP``, read on every request (cheap; a changed setting applies at once).

    Raises:
        AuthUnavailableError: If it is malformed (503: refused for everyone, never ignored).
    """
    try:
        return TenantMap.from_env(os.environ)
    except ValueError as exc:
        raise AuthUnavailableError(str(exc)) from exc


def tenant_of(principal: Principal) -> str:
    """The tenant of an authenticated caller: ``TENANT_MAP`` for IAM, a claim for a JWT.

    Without a map every caller is in the default tenant.

    Raises:
        TenantNotMappedError: If tenants are configured and the caller is in none.
        AuthUnavailableError: If ``TENANT_MAP`` is malformed.
    """
    mapping = tenant_map()
    if not mapping.configured:
        return DEFAULT_TENANT
    if principal.via == "iam":
        tenant = mapping.tenant_of(principal.identity)
        if tenant is None:
            raise TenantNotMappedError(
                f"{principal.identity} is in no tenant: TENANT_MAP (the template's TenantMap "
                "parameter) does not name it"
            )
        return tenant
    claim = os.environ.get("JWT_TENANT_CLAIM", "").strip() or "tenant"
    try:
        # A person is always in one tenant: "*" is the operators' (IAM) tenant only.
        return check_tenant(principal.tenant or "")
    except ValueError as exc:
        raise TenantNotMappedError(
            f"the JWT names no tenant: its claim {claim!r} is missing or not a tenant name"
        ) from exc


def iam_caller(event: APIGatewayProxyEvent) -> tuple[Principal, str]:
    """The SigV4 caller and its tenant.

    Raises:
        AuthenticationError: If the request is not signed (no caller ARN).
        TenantNotMappedError: If tenants are configured and the caller is in none.
        AuthUnavailableError: If ``TENANT_MAP`` is malformed.
    """
    principal = principal_from_iam(event.raw_event)
    return principal, tenant_of(principal)


def run_tenant(run_id: str) -> str | None:
    """The tenant of a run, or None if there is no such run."""
    try:
        return get_runtime().store.get_run(run_id).tenant
    except RunNotFoundError:
        return None


def owned_run(tenant: str, run_id: str) -> RunHeader:
    """The run's header, if the caller's tenant may see it (strongly consistent read).

    Raises:
        RunNotFoundError: If there is no such run, or it is another tenant's.
    """
    header = get_runtime().store.get_run(run_id)
    if not visible(tenant, header.tenant):
        raise RunNotFoundError(run_id)
    return header


def owned_wait(tenant: str, record: WaitRecord) -> WaitRecord:
    """The approval or callback, if its run is one the caller's tenant may see.

    Raises:
        WaitNotFoundError: If its run is another tenant's (or gone).
    """
    if tenant != ALL_TENANTS:
        owner = run_tenant(record.run_id)
        if owner is None or not visible(tenant, owner):
            raise WaitNotFoundError(record.wait_id)
    return record


def check_effect_owner(tenant: str, operation_id: str) -> None:
    """Refuses a review decision on another tenant's run like one on no recorded call.

    Raises:
        EffectNotFoundError: If the operation id names no run, or another tenant's run (the
            error ``get_effect`` raises when nothing is recorded there).
    """
    if tenant == ALL_TENANTS:
        return
    run_id, position = locate(operation_id)
    owner = run_tenant(run_id)
    if owner is None or not visible(tenant, owner):
        raise EffectNotFoundError(f"{run_id}@{position}")
