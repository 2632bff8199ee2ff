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

from typing import TYPE_CHECKING, Any

from durable_agents.agent import (
    AgentDefinition,
    AgentRegistry,
    agent,
    default_registry,
    register_model_config,
    register_prompt,
)
from durable_agents.clock import Clock, SkipClock, SystemClock
from durable_agents.context import DurableContext
from durable_agents.credentials import CredentialProvider, Secret
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
from durable_agents.events import EventBridgePublisher, EventPublisher, OutgoingEvent
from durable_agents.generations import ContinueAsNewNotAllowedError
from durable_agents.invocation_budget import InvocationBudget
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore
from durable_agents.llm.bedrock import ModelOutputError, ModelRequestError
from durable_agents.llm.loop import LoopResult, TurnLimitError, run_tool_loop
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.llm.types import (
    ContentBlock,
    LlmProvider,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
    ToolSpec,
    Usage,
)
from durable_agents.memory.ops import Memory
from durable_agents.memory.store import MemoryItem, MemoryPage
from durable_agents.migrations import (
    Migration,
    MigrationNotFoundError,
    MigrationPlan,
    MigrationRefusedError,
    RecordedOperation,
    RecordedRun,
    migration,
)
from durable_agents.models import Entry, EntryType, OpKind, RunHeader, RunStatus
from durable_agents.operations.condition import (
    ConditionCheckFailedError,
    ConditionNotMetError,
    WaitDecision,
    WaitStrategy,
)
from durable_agents.operations.event_wait import EventMessage, EventWaitTimeoutError
from durable_agents.operations.invoke import ChildRunFailedError, SubAgentNotDeployedError
from durable_agents.operations.llm import ProviderNotConfiguredError
from durable_agents.operations.parallel import BatchFailedError, BatchResult, CompletionPolicy
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
from durable_agents.runtime import InputValidationError, InvocationOutcome, OutcomeKind, Runtime
from durable_agents.semantics import StepSemantics
from durable_agents.serde import FunctionSerdes, Serdes, SerdesSpec, register_type
from durable_agents.side_effects.tools import (
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
from durable_agents.step_context import StepContext
from durable_agents.sticky import StickyRuns
from durable_agents.versions import VersionBundle
from durable_agents.waits.approval import (
    ApprovalDecision,
    ApprovalTimeoutError,
    ApprovedRequestMismatchError,
)
from durable_agents.waits.callback import Callback, CallbackFailedError, CallbackTimeoutError

__all__ = [
    "DEFAULT_RETRY",
    "NO_RETRY",
    "AgentDefinition",
    "AgentNotFoundError",
    "AgentRegistry",
    "AgentTestRunner",
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
    "Clock",
    "CompletionPolicy",
    "ConditionCheckFailedError",
    "ConditionNotMetError",
    "ConfigurationError",
    "ContentBlock",
    "ContinueAsNewNotAllowedError",
    "Crash",
    "CredentialProvider",
    "DurableContext",
    "DurableError",
    "Entry",
    "EntryConflictError",
    "EntryType",
    "EventBridgePublisher",
    "EventMessage",
    "EventPublisher",
    "EventWaitTimeoutError",
    "Found",
    "FunctionSerdes",
    "IdempotencyConflictError",
    "InMemoryJournal",
    "InfrastructureError",
    "InputValidationError",
    "InvalidNameError",
    "InvocationBudget",
    "InvocationEndInfo",
    "InvocationOutcome",
    "InvocationStartInfo",
    "Jitter",
    "JournalStore",
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
    "ModelScript",
    "NestedOperationError",
    "NotFound",
    "NotPinnedError",
    "OpKind",
    "OperationEndInfo",
    "OperationStartInfo",
    "OperationView",
    "OutcomeKind",
    "OutgoingEvent",
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
    "RunHeader",
    "RunNotFoundError",
    "RunStateConflictError",
    "RunStatus",
    "Runtime",
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
    "StickyRuns",
    "SubAgentNotDeployedError",
    "SuspendExecution",
    "SystemClock",
    "TestResult",
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


# The test harness is not part of the Lambda layer (layers/runtime/Makefile, LOCAL_ONLY): its
# names resolve on first use, so that importing the package on Lambda never needs it.
_HARNESS = frozenset({"AgentTestRunner", "Crash", "ModelScript", "OperationView", "TestResult"})

if TYPE_CHECKING:
    from durable_agents.testing import (
        AgentTestRunner,
        Crash,
        ModelScript,
        OperationView,
        TestResult,
    )


def __getattr__(name: str) -> Any:
    """Resolves the test harness's names lazily (``from durable_agents import AgentTestRunner``).

    Raises:
        AttributeError: For any other unknown name.
    """
    if name in _HARNESS:
        from durable_agents import testing  # noqa: PLC0415

        return getattr(testing, name)
    raise AttributeError(f"module 'durable_agents' has no attribute {name!r}")
