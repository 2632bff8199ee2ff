"""The version bundle a run is pinned to (recorded in the run header at start)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class VersionBundle:
    """Everything that may change while a run is suspended, recorded when it starts.

    A run is only ever continued by code of the same ``workflow_version``; an upgrade of an
    in-flight run is an explicit migration, never an accident of deployment.
    """

    workflow_version: str
    state_schema_version: str = "1"
    prompt_version: str = "none"
    model_config_version: str = "none"
    tool_schema_version: str = "none"

    def as_dict(self) -> dict[str, str]:
        """Returns the bundle as the run header stores it."""
        return asdict(self)
