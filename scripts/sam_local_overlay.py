"""The template `make sam-local` builds and runs: template.yaml, with what moto needs declared.

`sam local` passes a function only the environment variables its template declares (an
`--env-vars` file can change their values, not add names), and the handlers need a few that the
deployed template rightly does not declare: the moto store's endpoint (`AWS_ENDPOINT_URL`), the
fake services' URLs, and the session's caller for SAM's Api emulation (`api.sam_emulator`). So
the target runs an overlay of template.yaml that differs from it in two things only, both
checked by tests/template/test_sam_local_overlay.py:

* **variables**: each function declares the names its `--env-vars` entry sets, with an empty
  default (their values come from the `--env-vars` file, never from the template);
* **architecture**: the functions and the layer are built for this machine's architecture
  (x86_64 here; the deployed template says arm64): ADR 0028 says why, and that on an arm64 machine
  (Graviton, Apple silicon) nothing changes.

Code paths are made absolute, so the overlay can live under .aws-sam/ beside its build. It is
written as JSON (CloudFormation's long form of the short-form tags), which SAM reads as it reads
YAML.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FUNCTION_TYPE = "AWS::Serverless::Function"
LAYER_TYPE = "AWS::Serverless::LayerVersion"


def overlay(
    template: Mapping[str, Any],
    *,
    template_dir: Path,
    architecture: str,
    declared: Mapping[str, Iterable[str]],
) -> dict[str, Any]:
    """The overlay of ``template`` (not changed itself).

    Args:
        template: template.yaml, parsed (``durable_agents_local.template.load_template``).
        template_dir: The directory CodeUri and ContentUri are relative to.
        architecture: ``x86_64`` or ``arm64``: the functions' and the layer's.
        declared: Function logical id -> the variable names to declare for it.

    Returns:
        The overlay template.

    Raises:
        KeyError: If ``declared`` names a function the template does not have.
    """
    result: dict[str, Any] = copy.deepcopy(dict(template))
    globals_function = result.setdefault("Globals", {}).setdefault("Function", {})
    globals_function["Architectures"] = [architecture]
    resources: dict[str, Any] = result["Resources"]
    for resource in resources.values():
        properties = resource.setdefault("Properties", {})
        if resource.get("Type") == LAYER_TYPE:
            properties["CompatibleArchitectures"] = [architecture]
            properties["ContentUri"] = str((template_dir / properties["ContentUri"]).resolve())
        elif resource.get("Type") == FUNCTION_TYPE:
            if "CodeUri" in properties:
                properties["CodeUri"] = str((template_dir / properties["CodeUri"]).resolve())
            if "Architectures" in properties:
                properties["Architectures"] = [architecture]
    for logical_id, names in declared.items():
        resource = resources[logical_id]
        if resource.get("Type") != FUNCTION_TYPE:
            raise KeyError(f"{logical_id} is not a function of the template")
        variables = resource["Properties"].setdefault("Environment", {}).setdefault("Variables", {})
        inherited = (globals_function.get("Environment") or {}).get("Variables") or {}
        for name in names:
            if name not in variables and name not in inherited:
                variables[name] = ""
    return result


def write_overlay(overlay_template: Mapping[str, Any], path: Path) -> Path:
    """Writes the overlay as JSON to ``path`` (directories created); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(overlay_template, indent=1, sort_keys=False), encoding="utf-8")
    return path
