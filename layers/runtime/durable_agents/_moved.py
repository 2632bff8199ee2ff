"""Import paths that moved in 0.2 (the package layout of ``docs/architecture.md``), for one release.

``import durable_agents.models`` still works in 0.2 and warns (``DeprecationWarning``) with the
new path; 0.3 removes this module. Three tables:

- ``MODULES``: a module's old dotted path and where it lives now. A finder on ``sys.meta_path``
  (installed by ``durable_agents/__init__.py``) answers the old path with the new module itself,
  so ``mock.patch("durable_agents.models.X")`` patches the module the code uses.
- ``ATTRIBUTES``: names a package exported that now live elsewhere (``durable_agents.llm`` no
  longer loads Bedrock: ``BedrockProvider`` is in ``durable_agents.aws.bedrock``).
- ``CLASSES``: exception classes whose module changed although their old module still exists.

Journals keep old module paths: an error recorded as ``durable_agents.side_effects.tools:
ToolRejectedError`` before 0.2 must rebuild as that class on replay, so the serializer asks
``current_class_path`` (this module is below every other one: it imports none of them, only
``importlib`` on demand, so it cannot take part in an import cycle).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from functools import partial
from types import ModuleType

REMOVED_IN = "0.3"

MODULES: dict[str, str] = {
    "durable_agents.agent_carriers": "durable_agents.engine.sticky.carriers",
    "durable_agents.agent_drive": "durable_agents.engine.drive",
    "durable_agents.api_client": "durable_agents_local.cli.api_client",
    "durable_agents.aws_credentials": "durable_agents.aws.credentials",
    "durable_agents.aws_faults": "durable_agents.core.faults",
    "durable_agents.cancellation": "durable_agents.engine.cancellation",
    "durable_agents.cli": "durable_agents_local.cli.main",
    "durable_agents.cli_remote": "durable_agents_local.cli.remote",
    "durable_agents.cli_tables": "durable_agents_local.cli.tables",
    "durable_agents.cli_watch": "durable_agents_local.cli.watch",
    "durable_agents.clock": "durable_agents.core.clock",
    "durable_agents.console_proxy": "durable_agents_local.cli.console_proxy",
    "durable_agents.context": "durable_agents.engine.context",
    "durable_agents.context_scope": "durable_agents.engine.context_scope",
    "durable_agents.context_values": "durable_agents.engine.context",
    "durable_agents.context_waits": "durable_agents.engine.context",
    "durable_agents.crash_budget": "durable_agents.engine.crash_budget",
    "durable_agents.credentials": "durable_agents.core.credentials",
    "durable_agents.deployment": "durable_agents.aws.deployment",
    "durable_agents.effect_wait_records": "durable_agents.core.effect_wait_records",
    "durable_agents.events": "durable_agents.engine.events",
    "durable_agents.fingerprints": "durable_agents.engine.fingerprints",
    "durable_agents.follow_ups": "durable_agents.engine.follow_ups",
    "durable_agents.gauges": "durable_agents.admin.gauges",
    "durable_agents.generations": "durable_agents.engine.generations",
    "durable_agents.ids": "durable_agents.core.ids",
    "durable_agents.invocation": "durable_agents.engine.invocation",
    "durable_agents.invocation_budget": "durable_agents.core.invocation_budget",
    "durable_agents.lambda_telemetry": "durable_agents.aws.telemetry",
    "durable_agents.leases": "durable_agents.core.leases",
    "durable_agents.llm.bedrock": "durable_agents.aws.bedrock",
    "durable_agents.llm.loop": "durable_agents.engine.tool_loop",
    "durable_agents.local.agents_loading": "durable_agents_local.agents_loading",
    "durable_agents.local.aws": "durable_agents_local.aws",
    "durable_agents.local.console": "durable_agents_local.console",
    "durable_agents.local.crash": "durable_agents_local.crash",
    "durable_agents.local.durable_store": "durable_agents_local.durable_store",
    "durable_agents.local.event_router": "durable_agents_local.event_router",
    "durable_agents.local.functions": "durable_agents_local.functions",
    "durable_agents.local.http_api": "durable_agents_local.http_api",
    "durable_agents.local.identity": "durable_agents_local.identity",
    "durable_agents.local.invoke": "durable_agents_local.invoke",
    "durable_agents.local.isolated_moto": "durable_agents_local.isolated_moto",
    "durable_agents.local.lambda_context": "durable_agents_local.lambda_context",
    "durable_agents.local.log_keys": "durable_agents_local.log_keys",
    "durable_agents.local.moto_server": "durable_agents_local.moto_server",
    "durable_agents.local.oidc": "durable_agents_local.oidc",
    "durable_agents.local.patterns": "durable_agents_local.patterns",
    "durable_agents.local.processes": "durable_agents_local.processes",
    "durable_agents.local.provision": "durable_agents_local.provision",
    "durable_agents.local.reattach": "durable_agents_local.reattach",
    "durable_agents.local.runs": "durable_agents_local.runs",
    "durable_agents.local.runs_migrate": "durable_agents_local.runs_migrate",
    "durable_agents.local.runs_start": "durable_agents_local.runs_start",
    "durable_agents.local.runs_stop": "durable_agents_local.runs_stop",
    "durable_agents.local.scheduler": "durable_agents_local.scheduler",
    "durable_agents.local.secrets": "durable_agents_local.secrets",
    "durable_agents.local.services": "durable_agents_local.services",
    "durable_agents.local.services.__main__": "durable_agents_local.services.__main__",
    "durable_agents.local.services.email": "durable_agents_local.services.email",
    "durable_agents.local.services.payments": "durable_agents_local.services.payments",
    "durable_agents.local.services.server": "durable_agents_local.services.server",
    "durable_agents.local.services.tickets": "durable_agents_local.services.tickets",
    "durable_agents.local.stream_router": "durable_agents_local.stream_router",
    "durable_agents.local.template": "durable_agents_local.template",
    "durable_agents.local.verify": "durable_agents_local.verify",
    "durable_agents.local.wal": "durable_agents_local.wal",
    "durable_agents.local.worker": "durable_agents_local.worker",
    "durable_agents.local.worker_environment": "durable_agents_local.worker_environment",
    "durable_agents.local.worker_options": "durable_agents_local.worker_options",
    "durable_agents.log_context": "durable_agents.core.log_context",
    "durable_agents.local": "durable_agents_local",
    "durable_agents.memory.dynamodb": "durable_agents.aws.memory_table",
    "durable_agents.memory.ops": "durable_agents.engine.operations.memory",
    "durable_agents.memory.store": "durable_agents.engine.memory_store",
    "durable_agents.migration_commit": "durable_agents.admin.migration_commit",
    "durable_agents.migration_records": "durable_agents.core.migration_records",
    "durable_agents.models": "durable_agents.core.models",
    "durable_agents.observability": "durable_agents.core.observability",
    "durable_agents.operations": "durable_agents.engine.operations",
    "durable_agents.operations.batch_result": "durable_agents.engine.operations.batch_result",
    "durable_agents.operations.child": "durable_agents.engine.operations.child",
    "durable_agents.operations.condition": "durable_agents.engine.operations.condition",
    "durable_agents.operations.emit": "durable_agents.engine.operations.emit",
    "durable_agents.operations.event_wait": "durable_agents.engine.operations.event_wait",
    "durable_agents.operations.invoke": "durable_agents.engine.operations.invoke",
    "durable_agents.operations.llm": "durable_agents.engine.operations.llm",
    "durable_agents.operations.now": "durable_agents.engine.operations.now",
    "durable_agents.operations.parallel": "durable_agents.engine.operations.parallel",
    "durable_agents.operations.step": "durable_agents.engine.operations.step",
    "durable_agents.operations.tool": "durable_agents.engine.operations.tool",
    "durable_agents.operations.wait": "durable_agents.engine.operations.wait",
    "durable_agents.outbox": "durable_agents.aws.outbox",
    "durable_agents.outcomes": "durable_agents.engine.outcomes",
    "durable_agents.parked_turn": "durable_agents.engine.sticky.parked_turn",
    "durable_agents.plugin_calls": "durable_agents.engine.plugin_calls",
    "durable_agents.reconciler": "durable_agents.admin.reconciler",
    "durable_agents.reconciler_effects": "durable_agents.admin.stale_effects",
    "durable_agents.reconciler_runs": "durable_agents.admin.stalled_runs",
    "durable_agents.replay_flags": "durable_agents.engine.replay_flags",
    "durable_agents.replay_index": "durable_agents.engine.replay_index",
    "durable_agents.retention": "durable_agents.journal.retention",
    "durable_agents.run_events": "durable_agents.engine.run_events",
    "durable_agents.run_inbox": "durable_agents.engine.inbox",
    "durable_agents.run_starts": "durable_agents.engine.run_starts",
    "durable_agents.runtime": "durable_agents.engine.runtime",
    "durable_agents.runtime_parts": "durable_agents.engine.runtime_parts",
    "durable_agents.scrub": "durable_agents.core.scrub",
    "durable_agents.semantics": "durable_agents.core.semantics",
    "durable_agents.serde": "durable_agents.core.serde",
    "durable_agents.serde_errors": "durable_agents.core.serde_errors",
    "durable_agents.serde_values": "durable_agents.core.serde_values",
    "durable_agents.side_effects.compensation": "durable_agents.engine.effects.compensation",
    "durable_agents.side_effects.protocol": "durable_agents.engine.effects.protocol",
    "durable_agents.side_effects.records": "durable_agents.engine.effects.records",
    "durable_agents.side_effects.review": "durable_agents.admin.review",
    "durable_agents.side_effects.tools": "durable_agents.tools",
    "durable_agents.side_effects.writes": "durable_agents.engine.effects.writes",
    "durable_agents.step_context": "durable_agents.engine.step_context",
    "durable_agents.sticky": "durable_agents.engine.sticky.parking",
    "durable_agents.stop_requests": "durable_agents.engine.stop_requests",
    "durable_agents.streams": "durable_agents.llm.streams",
    "durable_agents.sweeping": "durable_agents.admin.sweeping",
    "durable_agents.tenancy": "durable_agents.core.tenancy",
    "durable_agents.testing": "durable_agents_local.testing",
    "durable_agents.testing_views": "durable_agents_local.testing_views",
    "durable_agents.time_limits": "durable_agents.engine.time_limits",
    "durable_agents.versions": "durable_agents.core.versions",
    "durable_agents.views": "durable_agents.admin.views",
    "durable_agents.waits.approval": "durable_agents.engine.operations.approval",
    "durable_agents.waits.auth": "durable_agents.auth.deciders",
    "durable_agents.waits.callback": "durable_agents.engine.operations.callback",
    "durable_agents.waits.jwks": "durable_agents.auth.jwks",
    "durable_agents.waits.jwt_verifier": "durable_agents.auth.jwt",
    "durable_agents.waits.links": "durable_agents.auth.links",
    "durable_agents.waits.principals": "durable_agents.core.principals",
    "durable_agents.waits.records": "durable_agents.engine.wait_records",
    "durable_agents.waits.schedules": "durable_agents.aws.scheduler",
    "durable_agents.waits.tokens": "durable_agents.auth.tokens",
}

ATTRIBUTES: dict[tuple[str, str], str] = {
    **{
        ("durable_agents", name): "durable_agents_local.testing"
        for name in ("AgentTestRunner", "Crash", "ModelScript", "OperationView", "TestResult")
    },
    ("durable_agents.llm", "BedrockProvider"): "durable_agents.aws.bedrock",
    # Engine and operator types: the root exports what agent authors use.
    ("durable_agents", "Runtime"): "durable_agents.engine.runtime",
    ("durable_agents", "InvocationOutcome"): "durable_agents.engine.outcomes",
    ("durable_agents", "OutcomeKind"): "durable_agents.engine.outcomes",
    ("durable_agents", "StickyRuns"): "durable_agents.engine.sticky.parking",
    ("durable_agents", "EventBridgePublisher"): "durable_agents.aws.eventbridge",
    ("durable_agents", "EventPublisher"): "durable_agents.engine.events",
    ("durable_agents", "OutgoingEvent"): "durable_agents.engine.events",
    ("durable_agents", "InMemoryJournal"): "durable_agents.journal.memory",
    ("durable_agents", "JournalStore"): "durable_agents.journal.store",
    ("durable_agents", "Entry"): "durable_agents.core.models",
    ("durable_agents", "EntryType"): "durable_agents.core.models",
    ("durable_agents", "RunHeader"): "durable_agents.core.models",
    ("durable_agents", "Clock"): "durable_agents.core.clock",
    ("durable_agents", "SystemClock"): "durable_agents.core.clock",
    ("durable_agents", "InputValidationError"): "durable_agents.engine.run_starts",
    # The errors the Api answers with live with the other domain errors, so that the Api maps
    # them without loading the migration machinery at init (MigrationRefusedError is still
    # importable from durable_agents.migrations, which raises it).
    ("durable_agents.migrations", "MigrationNotFoundError"): "durable_agents.errors",
    # auth.deciders (the old durable_agents.waits.auth) re-exported the JWT stack; it keeps
    # only the IAM caller, so that importing it does not load PyJWT and cryptography.
    **{
        ("durable_agents.auth.deciders", name): "durable_agents.auth.jwt"
        for name in (
            "JWKS_LIFESPAN_SECONDS",
            "JWKS_REFETCH_SECONDS",
            "LEEWAY_SECONDS",
            "MAX_JWKS_LIFESPAN_SECONDS",
            "MAX_JWT_CHARS",
            "USER_CLAIMS",
            "JwtVerifier",
            "jwt_verifier_from_env",
        )
    },
    # Handlers import the settings at init and the wiring at their first invocation.
    ("durable_agents.aws.deployment", "import_agent_modules"): "durable_agents.aws.settings",
    ("durable_agents.aws.deployment", "agent_modules_from_env"): "durable_agents.aws.settings",
    ("durable_agents.auth.deciders", "ALGORITHMS"): "durable_agents.auth.jwks",
    ("durable_agents.auth.deciders", "fetch_json"): "durable_agents.auth.jwks",
    **{
        ("durable_agents.auth.deciders", name): "durable_agents.auth.tokens"
        for name in (
            "AuthUnavailableError",
            "AuthenticationError",
            "NotAnApproverError",
            "b64encode",
            "bearer_token",
        )
    },
}

# Packages that are gone: the old path is an empty package whose names are those of the module
# it exported them from, so both ``durable_agents.memory.store`` and ``durable_agents.memory.X``
# still resolve.
PACKAGES: dict[str, str | None] = {
    "durable_agents.memory": "durable_agents.engine.memory_store",
    "durable_agents.waits": None,
    "durable_agents.side_effects": None,
}

CLASSES: dict[tuple[str, str], str] = {
    ("durable_agents.llm.bedrock", "ModelRequestError"): "durable_agents.llm.types",
    ("durable_agents.llm.bedrock", "ModelOutputError"): "durable_agents.llm.types",
    ("durable_agents.aws.bedrock", "ModelRequestError"): "durable_agents.llm.types",
    ("durable_agents.aws.bedrock", "ModelOutputError"): "durable_agents.llm.types",
    ("durable_agents.migrations", "MigrationRefusedError"): "durable_agents.errors",
    ("durable_agents.migrations", "MigrationNotFoundError"): "durable_agents.errors",
}


def current_module(name: str) -> str:
    """The module ``name`` is now (itself when it did not move)."""
    return MODULES.get(name, name)


def current_class_path(module: str, qualname: str) -> str:
    """The module that defines the class recorded as ``module:qualname`` today."""
    return CLASSES.get((module, qualname.split(".", maxsplit=1)[0])) or current_module(module)


def _warn(old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(
        f"{old} moved to {new}; the old path is removed in durable-agents {REMOVED_IN}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def moved_attribute(package: str, name: str) -> object:
    """A package's ``__getattr__`` for a name that moved out of it (warns, then returns it).

    Raises:
        AttributeError: If ``name`` is not a moved name of ``package``.
    """
    home = ATTRIBUTES.get((package, name))
    if home is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name}", f"{home}.{name}", stacklevel=4)
    return getattr(importlib.import_module(home), name)


def _exported_by(package: str, module: str, name: str) -> object:
    """A gone package's attribute: the name its old ``__init__`` took from ``module``."""
    home = importlib.import_module(module)
    if name.startswith("_") or not hasattr(home, name):
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name}", f"{module}.{name}")
    return getattr(home, name)


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: ModuleType) -> None:
        self._target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._target

    def exec_module(self, module: ModuleType) -> None:
        # The module is the new one, already executed: nothing to run again.
        return None


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Answers an old import path with the module that lives at the new one."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in PACKAGES:
            package = ModuleType(fullname, f"moved in 0.2: see {__name__}")
            package.__path__ = []
            exported = PACKAGES[fullname]
            if exported is not None:
                package.__getattr__ = partial(_exported_by, fullname, exported)  # type: ignore[method-assign]
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(package), is_package=True)
        new = MODULES.get(fullname)
        if new is None:
            return None
        _warn(fullname, new)
        module = importlib.import_module(new)
        is_package = hasattr(module, "__path__")
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module), is_package=is_package)


def install() -> None:
    """Puts the finder on ``sys.meta_path`` once (idempotent)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        # First: an old package aliases the new one, whose __path__ would otherwise let the path
        # finder load a submodule a second time under its old name (two classes for one).
        sys.meta_path.insert(0, MovedModuleFinder())
