"""Which agent modules (and model scripts) local mode runs, loaded before it says ``ready``.

Precedence (first that is set wins, and replaces the others — it does not add to them):

1. ``durable-agents local --agents mod[,mod]`` (repeatable);
2. ``AGENT_MODULES`` in the environment of the ``durable-agents local`` command;
3. ``AGENT_MODULES`` as ``template.yaml`` declares it (``Globals.Function.Environment``).

Modules are imported from the functions' ``CodeUri`` (``functions/``), ``PYTHONPATH`` and the
working directory, so an agent module next to where you start local mode needs no packaging.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_agents.agent import AgentDefinition, AgentModuleError, default_registry
from durable_agents.aws.deployment import load_model_scripts

VARIABLE = "AGENT_MODULES"
SOURCE_FLAG = "--agents"
SOURCE_ENVIRONMENT = f"the {VARIABLE} environment variable"
SOURCE_TEMPLATE = "template.yaml"


@dataclass(frozen=True, slots=True)
class AgentModules:
    """The agent modules chosen, and where the choice came from.

    Attributes:
        modules: Module names, in order.
        source: ``--agents``, the environment variable, or ``template.yaml``.
    """

    modules: tuple[str, ...]
    source: str


def _split(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(m.strip() for value in values for m in value.split(",") if m.strip())


def choose_agent_modules(
    flag: Sequence[str], environ: Mapping[str, str], template_env: Mapping[str, str]
) -> AgentModules:
    """Applies the precedence of the module docstring.

    Args:
        flag: The ``--agents`` values (each may list several modules, comma-separated).
        environ: The command's own environment (before local mode sets the functions').
        template_env: The functions' environment as the template declares it.

    Returns:
        The modules and their source (the first source that lists any module).
    """
    for source, modules in (
        (SOURCE_FLAG, _split(flag)),
        (SOURCE_ENVIRONMENT, _split([environ.get(VARIABLE, "")])),
        (SOURCE_TEMPLATE, _split([template_env.get(VARIABLE, "")])),
    ):
        if modules:
            return AgentModules(modules, source)
    return AgentModules((), SOURCE_TEMPLATE)


def put_on_path(code_dirs: Sequence[Path]) -> None:
    """Makes the functions' code importable as in Lambda, before anything names a package.

    The ``code_dirs`` go first on ``sys.path`` (as Lambda's ``/var/task``), the working
    directory last (so it never shadows them or ``PYTHONPATH``). Called before the template's
    ``package:path`` settings (``SCRIPTED_MODEL_FILE: agents:scripts/...``) are resolved.
    """
    for code_dir in code_dirs:
        if str(code_dir) not in sys.path:
            sys.path.insert(0, str(code_dir))
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def load_agents(
    chosen: AgentModules, code_dirs: Sequence[Path] = ()
) -> list[AgentDefinition[Any, Any]]:
    """Imports the chosen modules into the default registry (the one the handlers use).

    The functions' ``code_dirs`` go first on ``sys.path`` (as Lambda's ``/var/task``), the
    working directory last (so it never shadows them or ``PYTHONPATH``).

    Args:
        chosen: The modules and their source.
        code_dirs: The functions' ``CodeUri`` directories.

    Returns:
        The agents those modules registered, by name and version.

    Raises:
        AgentModuleError: If a module cannot be imported; the message names the module, where
            it was configured and the import error.
    """
    put_on_path(code_dirs)
    try:
        return default_registry.import_modules(chosen.modules)
    except AgentModuleError as exc:
        raise AgentModuleError(exc.module, exc.cause, source=chosen.source) from exc.cause


def describe(agents: Sequence[AgentDefinition[Any, Any]], chosen: AgentModules) -> str:
    """The banner's ``agents`` line: each agent with its version, then the modules' source."""
    listed = ", ".join(f"{d.name} {d.version}" for d in agents) or "none"
    return f"{listed} (from {chosen.source}: {', '.join(chosen.modules) or 'no modules'})"


def model_scripts_setting(template_value: str, scripts: Sequence[str]) -> str:
    """``SCRIPTED_MODEL_FILE`` for local mode: the template's, plus ``--model-script`` files.

    The result is loaded once here, so a script that is missing or invalid stops the start
    (instead of failing the first model call).

    Args:
        template_value: ``SCRIPTED_MODEL_FILE`` as the template declares it (may be empty).
        scripts: ``--model-script`` values, each ``[CONFIG=]file``.

    Returns:
        The comma-separated setting.

    Raises:
        ConfigurationError: If a script cannot be read, is invalid, or conflicts with another.
    """
    setting = ",".join(s.strip() for s in [template_value, *scripts] if s.strip())
    if setting:
        load_model_scripts(setting)
    return setting
