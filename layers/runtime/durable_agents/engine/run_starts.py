"""The header of a new run: its agent's latest version, its validated input, its pins.

``Runtime.start_run`` creates it (conditionally: an idempotency key matches an earlier start)
and publishes its first ``Step Ready``.
"""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from durable_agents.agent import AgentDefinition, AgentRegistry, timeout_to_ms
from durable_agents.core.clock import Clock
from durable_agents.core.ids import check_idempotency_key
from durable_agents.core.models import RunHeader, RunStatus
from durable_agents.core.run_flow import tree_flow
from durable_agents.core.serde import encode
from durable_agents.core.tenancy import check_tenant
from durable_agents.errors import DurableError
from durable_agents.flow_control import Budget, Concurrency, Priority, check_priority
from durable_agents.journal.retention import default_retention_s
from durable_agents.journal.store import input_hash

__all__ = ["InputValidationError", "new_header", "new_run_id", "validate_input"]


class InputValidationError(DurableError):
    """The run input does not match the agent's declared input type."""

    def __init__(self, agent: str, errors: list[dict[str, Any]]):
        self.agent = agent
        self.errors = errors
        super().__init__(f"input does not match agent {agent!r}: {errors}")


def new_run_id() -> str:
    """Returns a fresh run id (``run-`` and 16 hex digits)."""
    return f"run-{secrets.token_hex(8)}"


def validate_input(definition: AgentDefinition[Any, Any], value: Any) -> Any:
    """``value`` as the agent's declared input type (unchanged when it declares none).

    Raises:
        InputValidationError: If it does not match.
    """
    if definition.input_type is None:
        return value
    try:
        return TypeAdapter(definition.input_type).validate_python(value)
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        raise InputValidationError(definition.name, errors) from exc


def run_key(limits: Concurrency, tenant: str, value: Any) -> str:
    """The key a run counts under in its agent's limits: its tenant, or a field of its input.

    The input as JSON reads it, whatever its agent's input type: the key of a queued run is
    computed again from its recorded input, and must come out the same.
    """
    if limits.key == "tenant":
        return tenant
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return limits.key_of(tenant, value)


def new_header(
    registry: AgentRegistry,
    clock: Clock,
    agent_name: str,
    input_value: Any,
    *,
    run_id: str,
    parent_run_id: str | None,
    idempotency_key: str | None,
    tenant: str,
    execution_timeout: float | None,
    version: str | None = None,
    priority: int | None = None,
    budget: Budget | None = None,
    parent: RunHeader | None = None,
) -> RunHeader:
    """The header a run of ``agent_name`` starts with: its latest version, or ``version``.

    Raises:
        AgentNotFoundError: If no such agent is registered.
        VersionNotDeployedError: If ``version`` is given and not deployed.
        InputValidationError: If the input does not match the agent's input type.
        PayloadError: If the input cannot be recorded (for example it holds a secret).
        InvalidNameError: If ``idempotency_key`` is empty, too long or not printable
            (``core.ids.check_idempotency_key``).
        ValueError: If ``tenant`` is not a valid tenant name, the timeout not positive, or
            ``priority`` not from 1 to 5.

    ``priority`` and ``budget`` are flow control's (ADR 0030): a sub-agent (``parent`` its
    parent's header) runs at its parent's priority unless given one, and counts against its
    parent's tree's budget; a root run gets ``budget``, else its agent's own.
    """
    check_tenant(tenant)
    if priority is not None:
        check_priority(priority)
    if idempotency_key is not None:
        # Before any journal sees it: each backend would fail differently (or not at all).
        check_idempotency_key(idempotency_key)
    limit_ms = timeout_to_ms(execution_timeout)
    definition = (
        registry.latest(agent_name) if version is None else registry.pinned(agent_name, version)
    )
    value = validate_input(definition, input_value)
    input_json = encode(value, definition.input_type)
    now = clock.now_ms()
    chosen = budget or definition.budget  # a root's budget: the caller's, else its agent's
    flow = tree_flow(parent, priority, None if chosen is None else chosen.to_dict())
    status, waiting_on = RunStatus.RUNNING, None
    if definition.concurrency is not None:
        # Its agent's runs take a slot first (ADR 0030): it starts in line, in the order of
        # its arrival; ``start_run`` puts it in its key's queue and grants free slots.
        key = run_key(definition.concurrency, tenant, value)
        status = RunStatus.QUEUED
        waiting_on = {
            "kind": "queue",
            "key": key,
            "priority": int((flow or {}).get("priority", Priority.NORMAL)),
            "queued_at_ms": now,
        }
    return RunHeader(
        run_id=run_id,
        agent=definition.name,
        # The bundle, plus the exact prompt and model-config versions (and content hashes)
        # this run will use for its whole life.
        versions=definition.versions.as_dict()
        | registry.prompts.pin(definition.prompts, definition.model_configs),
        status=status,
        waiting_on=waiting_on,
        input=input_json,
        created_at_ms=now,
        updated_at_ms=now,
        parent_run_id=parent_run_id,
        idempotency_key=idempotency_key,
        input_hash=input_hash(definition.name, input_json),
        tenant=tenant,
        execution_timeout_ms=definition.execution_timeout_ms if limit_ms is None else limit_ms,
        retention_s=definition.retention_s or default_retention_s(),
        flow=flow,
    )
