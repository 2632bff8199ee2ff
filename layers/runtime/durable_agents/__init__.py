"""durable-agents: a durable execution runtime for long-running AI agents on AWS serverless.

The public API is what this module exports: everything an agent author calls, configures,
returns or catches. Everything else is an implementation detail that may change; the exports
are pinned by ``tests/unit/test_exports.py``. Importing the package stays light (no boto3,
moto, Flask or JWT libraries): those are loaded by the modules that need them.

Example:
    >>> from durable_agents import agent, AgentRegistry
    >>> registry = AgentRegistry()
    >>> @agent(name="hello", version="1", registry=registry)
    ... def hello(ctx, name: str) -> str:
    ...     greeting = ctx.step(lambda: f"hello, {name}", name="greet")
    ...     ctx.wait(60, name="pause")
    ...     return greeting
"""

from typing import Any

from durable_agents._moved import install, moved_attribute
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
from durable_agents.engine.operations.invoke import ChildRunFailedError, SubAgentNotDeployedError
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
    ToolSpec,
    Usage,
)
from durable_agents.migrations import (
    Migration,
    MigrationNotFoundError,
    MigrationPlan,
    MigrationRefusedError,
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
    "Callback",
    "CallbackFailedError",
    "CallbackTimeoutError",
    "ChildRunFailedError",
    "CompletionPolicy",
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
    "NestedOperationError",
    "NotFound",
    "NotPinnedError",
    "OpKind",
    "OperationEndInfo",
    "OperationStartInfo",
    "PayloadError",
    "Plugin",
    "Prompt",
    "ProviderNotConfiguredError",
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


def __getattr__(name: str) -> Any:
    """Names that moved out of the package keep working for one release, with a warning.

    ``from durable_agents import AgentTestRunner`` is ``durable_agents_local.testing`` now (the
    test harness is not in the Lambda layer); see ``durable_agents._moved``.

    Raises:
        AttributeError: For any other unknown name.
    """
    return moved_attribute(__name__, name)
