"""The public API is what durable_agents exports; this pins it so changes are deliberate.

Every error an agent author can catch and every type they configure an operation with is
exported from the package root; the errors that stay in their modules are listed below with
the reason, so a new error class has to be placed on one side or the other.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import durable_agents
import durable_agents.journal
import durable_agents.llm
from durable_agents.errors import DurableError

EXPECTED = {
    "DEFAULT_RETRY",
    "NO_RETRY",
    "AgentDefinition",
    "AgentNotFoundError",
    "AgentRegistry",
    "ApprovalDecision",
    "ApprovalTimeoutError",
    "ApprovedRequestMismatchError",
    "AttemptEndInfo",
    "AttemptStartInfo",
    "BatchFailedError",
    "BatchResult",
    "Budget",
    "BudgetExceededError",
    "Callback",
    "CallbackFailedError",
    "CallbackTimeoutError",
    "ChildRunFailedError",
    "CompletionPolicy",
    "Concurrency",
    "ConditionCheckFailedError",
    "ConditionNotMetError",
    "ConfigurationError",
    "ContentBlock",
    "ContinueAsNewNotAllowedError",
    "CredentialProvider",
    "DurableContext",
    "DurableError",
    "EntryConflictError",
    "EventMessage",
    "EventWaitTimeoutError",
    "Found",
    "FunctionSerdes",
    "IdempotencyConflictError",
    "InfrastructureError",
    "InvocationBudget",
    "InvalidNameError",
    "InvocationEndInfo",
    "InvocationStartInfo",
    "Jitter",
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "LoopResult",
    "Memory",
    "MemoryItem",
    "MemoryPage",
    "Message",
    "Migration",
    "MigrationNotFoundError",
    "MigrationPlan",
    "MigrationRefusedError",
    "ModelConfig",
    "ModelOutputError",
    "ModelRequestError",
    "ModelThrottledError",
    "NestedOperationError",
    "NotFound",
    "NotPinnedError",
    "OpKind",
    "OperationEndInfo",
    "OperationStartInfo",
    "PayloadError",
    "Plugin",
    "Priority",
    "Prompt",
    "ProviderNotConfiguredError",
    "RecordedOperation",
    "RecordedRun",
    "ReplayDivergedError",
    "RateLimit",
    "RetryDecision",
    "RetryPolicy",
    "RetryStrategy",
    "RunCancelledError",
    "RunNotFoundError",
    "RunStateConflictError",
    "RunStatus",
    "ScriptedProvider",
    "Secret",
    "SecretSerializationError",
    "Serdes",
    "SerdesSpec",
    "SkipClock",
    "StepContext",
    "StepError",
    "StepInterruptedError",
    "StepSemantics",
    "SubAgentNotDeployedError",
    "SuspendExecution",
    "Tool",
    "ToolAbandonedError",
    "ToolCall",
    "ToolGaveUpError",
    "ToolNotApprovedError",
    "ToolRegistry",
    "ToolRejectedError",
    "ToolResult",
    "ToolSpec",
    "TurnLimitError",
    "Unknown",
    "Usage",
    "VersionBundle",
    "VersionNotDeployedError",
    "VersionUnavailableError",
    "WaitDecision",
    "WaitStrategy",
    "WrapperError",
    "agent",
    "default_registry",
    "default_tools",
    "migration",
    "register_model_config",
    "register_prompt",
    "register_type",
    "run_tool_loop",
    "tool",
}


def test_public_exports_are_pinned() -> None:
    assert set(durable_agents.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(durable_agents, name) is not None


def test_suspension_cannot_be_swallowed_by_agent_code() -> None:
    assert not issubclass(durable_agents.SuspendExecution, Exception)


# The modules agent authors meet (ctx operations, their options and their errors, the harness).
USER_FACING_MODULES = (
    "durable_agents.errors",
    "durable_agents.engine.operations.condition",
    "durable_agents.engine.operations.event_wait",
    "durable_agents.engine.operations.invoke",
    "durable_agents.engine.operations.llm",
    "durable_agents.engine.operations.parallel",
    "durable_agents.engine.operations.approval",
    "durable_agents.engine.operations.callback",
    "durable_agents.tools",
    "durable_agents.aws.bedrock",
    "durable_agents.engine.tool_loop",
    "durable_agents.migrations",
    "durable_agents.prompts",
    "durable_agents.engine.runtime",
)

# Errors that agent code never sees: they are raised to the Api, the operators' tooling or the
# handlers' edge, and exported from their own modules for those.
NOT_EXPORTED_ERRORS = {
    "EffectConflictError": "a side-effect record's conditional write lost (the protocol retries)",
    "EffectNotFoundError": "the Api's review routes (404)",
    "WaitNotFoundError": "the Api's approval and callback routes (404)",
    "WaitConflictError": "the Api's approval and callback routes (409)",
    "RunRevisionConflictError": "the journal's fencing of run changes (the runtime re-reads)",
    "InvocationRetryError": "the handlers' edge, turning InfrastructureError into a retry",
    "InvalidCursorError": "the Api's listings (400): a cursor the listing did not hand out",
}


def _errors_defined_in(module_name: str) -> dict[str, type[BaseException]]:
    module = importlib.import_module(module_name)
    return {
        name: obj
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, DurableError)
        and obj.__module__ == module_name
        and not name.startswith("_")
    }


def test_every_error_agents_meet_is_exported_or_placed() -> None:
    for module_name in USER_FACING_MODULES:
        for name, cls in _errors_defined_in(module_name).items():
            if name in NOT_EXPORTED_ERRORS:
                assert name not in EXPECTED, f"{name} is both exported and listed as internal"
                continue
            assert name in EXPECTED, f"{module_name}.{name} is neither exported nor placed"
            assert getattr(durable_agents, name) is cls


def test_exports_are_documented() -> None:
    # The API reference (docs/api) is generated from these docstrings.
    for name in EXPECTED:
        obj = getattr(durable_agents, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"


def test_importing_the_package_stays_light() -> None:
    # A Lambda cold start imports durable_agents: the test harness is in-process and cheap,
    # but boto3, moto, Flask and the JWT stack must only load where they are used.
    heavy = ("boto3", "moto", "flask", "werkzeug", "jwt", "yaml", "hypothesis", "pytest")
    code = f"import sys, durable_agents\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout.strip()
    assert out == "", f"importing durable_agents loaded {out}"


def _type_checking_imports(package: ModuleType) -> dict[str, str]:
    """Each name ``package`` imports under TYPE_CHECKING, with the module it is imported from."""
    source = Path(package.__file__ or "").read_text(encoding="utf-8")
    block = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return {
        alias.name: node.module or ""
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


@pytest.mark.parametrize(
    "package",
    [durable_agents, durable_agents.llm, durable_agents.journal],
    ids=lambda p: p.__name__,
)
def test_the_lazy_table_the_typed_imports_and_all_agree(package: ModuleType) -> None:
    # Type checkers read the imports, the runtime reads the table: one drifting from the other
    # would give a name a type it does not have, or one that cannot be imported.
    table = {name: module for module, names in package._EXPORTS.items() for name in names}
    assert _type_checking_imports(package) == table
    assert set(table) == set(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is getattr(importlib.import_module(table[name]), name)


def _modules_loaded_by(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(','.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout.strip()
    return set(out.split(","))


def test_a_module_of_the_package_loads_only_what_it_imports() -> None:
    # The Relay imports durable_agents.errors, core and aws.outbox; before the exports were
    # lazy, any of them ran the package's __init__, which loaded the engine and pydantic.
    loaded = _modules_loaded_by("import durable_agents.errors, durable_agents.core.scrub")
    assert not {m for m in loaded if m.startswith(("durable_agents.engine", "pydantic"))}
    assert "durable_agents.agent" not in loaded
    # Every agent module reaches llm.types (ModelConfig); the scripted provider is not for all.
    assert "durable_agents.llm.scripted" not in _modules_loaded_by(
        "import durable_agents.llm.types"
    )
    # Every handler reaches the journal package through the agent's retention; none deployed
    # uses the in-memory journal.
    assert "durable_agents.journal.memory" not in _modules_loaded_by("import durable_agents.agent")


def test_agent_is_the_decorator_after_its_module_is_imported() -> None:
    # Importing the submodule durable_agents.agent binds it on the package; the package's type
    # keeps the name for the decorator, as eager imports did.
    import durable_agents.agent as module_or_decorator

    assert callable(durable_agents.agent)
    assert durable_agents.agent.__module__ == "durable_agents.agent"
    assert module_or_decorator is durable_agents.agent
    assert "agent" in dir(durable_agents)
