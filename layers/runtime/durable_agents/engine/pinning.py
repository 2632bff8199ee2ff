"""Which code continues a run: the version it is pinned to, and resuming it once deployed again.

A run is only ever continued by the code of its ``VersionBundle``
(``durable_agents.core.versions``);
a run whose version is not deployed waits as ``VERSION_UNAVAILABLE`` until it is.
"""

from __future__ import annotations

from typing import Any

from durable_agents.agent import AgentDefinition, AgentRegistry
from durable_agents.core.models import RunChange, RunHeader, RunStatus
from durable_agents.errors import (
    AgentNotFoundError,
    RunRevisionConflictError,
    RunStateConflictError,
    VersionUnavailableError,
)


def resolve_pinned(registry: AgentRegistry, header: RunHeader) -> AgentDefinition[Any, Any]:
    """Returns the code a run is pinned to, after checking its pinned prompts and configs.

    Raises:
        VersionUnavailableError: If the agent, its pinned workflow version, or a pinned prompt
            or model configuration (that version, that content) is not deployed here.
    """
    version = header.versions.get("workflow_version", "")
    try:
        definition = registry.pinned(header.agent, version)
    except AgentNotFoundError as exc:
        raise VersionUnavailableError(header.agent, "agent", version, exc.known) from exc
    registry.prompts.check_pins(header.agent, header.versions)
    return definition


def unavailable_waiting_on(exc: VersionUnavailableError) -> dict[str, Any]:
    """What a ``VERSION_UNAVAILABLE`` run's header says it waits for (the missing version)."""
    return {
        "kind": "version",
        "agent": exc.agent,
        "component": exc.component,
        "version": exc.version,
        "deployed": list(exc.deployed),
    }


def resume_available(store: Any, clock: Any, header: RunHeader) -> RunHeader | None:
    """Moves a ``VERSION_UNAVAILABLE`` run whose version is deployed back to RUNNING.

    Fenced by the revision the caller read.

    Returns:
        The header after the change; None when another writer changed the run first (it
        moved on: that writer publishes what follows).

    Raises:
        RunNotFoundError: If the run is gone.
    """
    change = RunChange(
        expected=frozenset({RunStatus.VERSION_UNAVAILABLE}),
        status=RunStatus.RUNNING,
        updated_at_ms=clock.now_ms(),
        error=None,
        waiting_on=None,
        expected_revision=header.revision,
    )
    try:
        store.commit(header.run_id, [], change)
    except (RunStateConflictError, RunRevisionConflictError):
        return None
    return change.apply(header)
