"""durable-agents: a durable execution runtime for long-running AI agents on AWS serverless.

The public API is what this module exports: everything an agent author calls, configures,
returns or catches. Everything else is an implementation detail that may change; the exports
are pinned by ``tests/unit/test_exports.py``.

Importing the package loads nothing of it: each export is imported from its module the first
time it is read (PEP 562), so a handler that needs ``durable_agents.errors`` and
``durable_agents.aws.outbox`` (the Relay) does not pay for the engine, the context and
pydantic at its cold start (docs/benchmarks.md, "Cold start"). ``from durable_agents import
agent`` works as before; type checkers read the imports under ``TYPE_CHECKING``.

Example:
    >>> from durable_agents import agent, AgentRegistry
    >>> registry = AgentRegistry()
    >>> @agent(name="hello", version="1", registry=registry)
    ... def hello(ctx, name: str) -> str:
    ...     greeting = ctx.step(lambda: f"hello, {name}", name="greet")
    ...     ctx.wait(60, name="pause")
    ...     return greeting
"""

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from durable_agents._lazy import lazy_exports
from durable_agents._moved import install

if TYPE_CHECKING:
    from durable_agents.agent import (
        AgentDefinition,
        AgentRegistry,
        agent,
        default_registry,
        register_model_config,
        register_prompt,
    )
    from durable_agents.core.clock import SkipClock
    from durable_agents.core.credentials import CredentialProvider, Secret
    from durable_agents.core.invocation_budget import InvocationBudget
    from durable_agents.core.models import OpKind, RunStatus
    from durable_agents.core.semantics import StepSemantics
    from durable_agents.core.serde import FunctionSerdes, Serdes, SerdesSpec, register_type
    from durable_agents.core.versions import VersionBundle
    from durable_agents.engine.context import DurableContext
    from durable_agents.engine.generations import ContinueAsNewNotAllowedError
    from durable_agents.engine.memory_store import MemoryItem, MemoryPage
    from durable_agents.engine.operations.approval import (
        ApprovalDecision,
        ApprovalTimeoutError,
        ApprovedRequestMismatchError,
    )
    from durable_agents.engine.operations.callback import (
        Callback,
        CallbackFailedError,
        CallbackTimeoutError,
    )
    from durable_agents.engine.operations.condition import (
        ConditionCheckFailedError,
        ConditionNotMetError,
        WaitDecision,
        WaitStrategy,
    )
    from durable_agents.engine.operations.event_wait import EventMessage, EventWaitTimeoutError
    from durable_agents.engine.operations.invoke import (
        ChildRunFailedError,
        SubAgentNotDeployedError,
    )
    from durable_agents.engine.operations.llm import ProviderNotConfiguredError
    from durable_agents.engine.operations.memory import Memory
    from durable_agents.engine.operations.parallel import (
        BatchFailedError,
        BatchResult,
        CompletionPolicy,
    )
    from durable_agents.engine.step_context import StepContext
    from durable_agents.engine.tool_loop import LoopResult, TurnLimitError, run_tool_loop
    from durable_agents.errors import (
        AgentNotFoundError,
        ConfigurationError,
        DurableError,
        EntryConflictError,
        IdempotencyConflictError,
        InfrastructureError,
        InvalidNameError,
        MigrationNotFoundError,
        MigrationRefusedError,
        NestedOperationError,
        PayloadError,
        ReplayDivergedError,
        RunCancelledError,
        RunNotFoundError,
        RunStateConflictError,
        SecretSerializationError,
        StepError,
        StepInterruptedError,
        SuspendExecution,
        VersionNotDeployedError,
        VersionUnavailableError,
        WrapperError,
    )
    from durable_agents.flow_control import (
        Budget,
        BudgetExceededError,
        Concurrency,
        Priority,
        RateLimit,
    )
    from durable_agents.llm.scripted import ScriptedProvider
    from durable_agents.llm.types import (
        ContentBlock,
        LlmProvider,
        LlmRequest,
        LlmResponse,
        Message,
        ModelConfig,
        ModelOutputError,
        ModelRequestError,
        ModelThrottledError,
        ToolSpec,
        Usage,
    )
    from durable_agents.migrations import (
        Migration,
        MigrationPlan,
        RecordedOperation,
        RecordedRun,
        migration,
    )
    from durable_agents.plugins import (
        AttemptEndInfo,
        AttemptStartInfo,
        InvocationEndInfo,
        InvocationStartInfo,
        OperationEndInfo,
        OperationStartInfo,
        Plugin,
    )
    from durable_agents.prompts import NotPinnedError, Prompt
    from durable_agents.retry import (
        DEFAULT_RETRY,
        NO_RETRY,
        Jitter,
        RetryDecision,
        RetryPolicy,
        RetryStrategy,
    )
    from durable_agents.tools import (
        Found,
        NotFound,
        Tool,
        ToolAbandonedError,
        ToolCall,
        ToolGaveUpError,
        ToolNotApprovedError,
        ToolRegistry,
        ToolRejectedError,
        ToolResult,
        Unknown,
        default_tools,
        tool,
    )

# Old import paths (``import durable_agents.models``) resolve, with a warning, for one release.
install()

# Where each export lives. tests/unit/test_exports.py checks that this table, the imports above
# and __all__ name the same things.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "durable_agents.agent": (
        "AgentDefinition",
        "AgentRegistry",
        "agent",
        "default_registry",
        "register_model_config",
        "register_prompt",
    ),
    "durable_agents.core.clock": ("SkipClock",),
    "durable_agents.core.credentials": (
        "CredentialProvider",
        "Secret",
    ),
    "durable_agents.core.invocation_budget": ("InvocationBudget",),
    "durable_agents.core.models": (
        "OpKind",
        "RunStatus",
    ),
    "durable_agents.core.semantics": ("StepSemantics",),
    "durable_agents.core.serde": (
        "FunctionSerdes",
        "Serdes",
        "SerdesSpec",
        "register_type",
    ),
    "durable_agents.core.versions": ("VersionBundle",),
    "durable_agents.engine.context": ("DurableContext",),
    "durable_agents.engine.generations": ("ContinueAsNewNotAllowedError",),
    "durable_agents.engine.memory_store": (
        "MemoryItem",
        "MemoryPage",
    ),
    "durable_agents.engine.operations.approval": (
        "ApprovalDecision",
        "ApprovalTimeoutError",
        "ApprovedRequestMismatchError",
    ),
    "durable_agents.engine.operations.callback": (
        "Callback",
        "CallbackFailedError",
        "CallbackTimeoutError",
    ),
    "durable_agents.engine.operations.condition": (
        "ConditionCheckFailedError",
        "ConditionNotMetError",
        "WaitDecision",
        "WaitStrategy",
    ),
    "durable_agents.engine.operations.event_wait": (
        "EventMessage",
        "EventWaitTimeoutError",
    ),
    "durable_agents.engine.operations.invoke": (
        "ChildRunFailedError",
        "SubAgentNotDeployedError",
    ),
    "durable_agents.engine.operations.llm": ("ProviderNotConfiguredError",),
    "durable_agents.engine.operations.memory": ("Memory",),
    "durable_agents.engine.operations.parallel": (
        "BatchFailedError",
        "BatchResult",
        "CompletionPolicy",
    ),
    "durable_agents.engine.step_context": ("StepContext",),
    "durable_agents.engine.tool_loop": (
        "LoopResult",
        "TurnLimitError",
        "run_tool_loop",
    ),
    "durable_agents.errors": (
        "AgentNotFoundError",
        "ConfigurationError",
        "DurableError",
        "EntryConflictError",
        "IdempotencyConflictError",
        "InfrastructureError",
        "InvalidNameError",
        "MigrationNotFoundError",
        "MigrationRefusedError",
        "NestedOperationError",
        "PayloadError",
        "ReplayDivergedError",
        "RunCancelledError",
        "RunNotFoundError",
        "RunStateConflictError",
        "SecretSerializationError",
        "StepError",
        "StepInterruptedError",
        "SuspendExecution",
        "VersionNotDeployedError",
        "VersionUnavailableError",
        "WrapperError",
    ),
    "durable_agents.flow_control": (
        "Budget",
        "BudgetExceededError",
        "Concurrency",
        "Priority",
        "RateLimit",
    ),
    "durable_agents.llm.scripted": ("ScriptedProvider",),
    "durable_agents.llm.types": (
        "ContentBlock",
        "LlmProvider",
        "LlmRequest",
        "LlmResponse",
        "Message",
        "ModelConfig",
        "ModelOutputError",
        "ModelRequestError",
        "ModelThrottledError",
        "ToolSpec",
        "Usage",
    ),
    "durable_agents.migrations": (
        "Migration",
        "MigrationPlan",
        "RecordedOperation",
        "RecordedRun",
        "migration",
    ),
    "durable_agents.plugins": (
        "AttemptEndInfo",
        "AttemptStartInfo",
        "InvocationEndInfo",
        "InvocationStartInfo",
        "OperationEndInfo",
        "OperationStartInfo",
        "Plugin",
    ),
    "durable_agents.prompts": (
        "NotPinnedError",
        "Prompt",
    ),
    "durable_agents.retry": (
        "DEFAULT_RETRY",
        "NO_RETRY",
        "Jitter",
        "RetryDecision",
        "RetryPolicy",
        "RetryStrategy",
    ),
    "durable_agents.tools": (
        "Found",
        "NotFound",
        "Tool",
        "ToolAbandonedError",
        "ToolCall",
        "ToolGaveUpError",
        "ToolNotApprovedError",
        "ToolRegistry",
        "ToolRejectedError",
        "ToolResult",
        "Unknown",
        "default_tools",
        "tool",
    ),
}

__all__ = [
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
    "InvalidNameError",
    "InvocationBudget",
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
    "RateLimit",
    "RecordedOperation",
    "RecordedRun",
    "ReplayDivergedError",
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
]


# Reads an export from its module the first time (and names that moved out, with a warning:
# ``from durable_agents import AgentTestRunner`` is ``durable_agents_local.testing`` now).
__getattr__ = lazy_exports(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(ModuleType):
    """The package's module type: keeps ``durable_agents.agent`` the decorator.

    Importing the submodule ``durable_agents.agent`` (which any import of the engine does)
    makes the import system bind it as the package's attribute ``agent``. With eager imports
    the package then rebound ``agent`` to the decorator; with lazy ones nothing would, and
    ``from durable_agents import agent`` would give the module. A property on the module's
    type is looked up before the module's own attributes, so the decorator is what is read;
    and the import system's binding of the submodule keeps the decorator in the module's own
    attributes instead, for tools that read ``vars(module)`` (pdoc).
    """

    @property
    def agent(self) -> Any:
        """The ``@agent`` decorator (``durable_agents.agent.agent``)."""
        return importlib.import_module("durable_agents.agent").agent

    @agent.setter
    def agent(self, value: Any) -> None:
        # Only the import system sets it, with the submodule (which stays in sys.modules).
        self.__dict__["agent"] = value.agent if isinstance(value, ModuleType) else value


sys.modules[__name__].__class__ = _Package
