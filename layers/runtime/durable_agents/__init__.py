"""durable-agents: a durable execution runtime for long-running AI agents on AWS serverless.

The public API is what this module exports; everything else is an implementation detail.

Example:
    >>> from durable_agents import agent, AgentRegistry
    >>> registry = AgentRegistry()
    >>> @agent(name="hello", version="1", registry=registry)
    ... def hello(ctx, name: str) -> str:
    ...     greeting = ctx.step(lambda: f"hello, {name}", name="greet")
    ...     ctx.wait(60, name="pause")
    ...     return greeting
"""

from durable_agents.agent import AgentDefinition, AgentRegistry, agent, default_registry
from durable_agents.clock import Clock, SkipClock, SystemClock
from durable_agents.context import DurableContext
from durable_agents.credentials import CredentialProvider, Secret
from durable_agents.errors import (
    AgentNotFoundError,
    ConfigurationError,
    DurableError,
    EntryConflictError,
    IdempotencyConflictError,
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
)
from durable_agents.events import EventBridgePublisher, EventPublisher, OutgoingEvent
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore
from durable_agents.models import Entry, EntryType, OpKind, RunHeader, RunStatus
from durable_agents.operations.condition import (
    ConditionCheckFailedError,
    ConditionNotMetError,
    WaitDecision,
)
from durable_agents.plugins import Plugin
from durable_agents.retry import NO_RETRY, Jitter, RetryDecision, RetryPolicy
from durable_agents.runtime import InputValidationError, InvocationOutcome, OutcomeKind, Runtime
from durable_agents.semantics import StepSemantics
from durable_agents.serde import Serdes, register_type
from durable_agents.side_effects.tools import (
    Found,
    NotFound,
    Tool,
    ToolAbandonedError,
    ToolCall,
    ToolGaveUpError,
    ToolRegistry,
    ToolRejectedError,
    ToolResult,
    Unknown,
    default_tools,
    tool,
)
from durable_agents.step_context import StepContext
from durable_agents.versions import VersionBundle

__all__ = [
    "NO_RETRY",
    "AgentDefinition",
    "AgentNotFoundError",
    "AgentRegistry",
    "Clock",
    "ConditionCheckFailedError",
    "ConditionNotMetError",
    "ConfigurationError",
    "CredentialProvider",
    "DurableContext",
    "DurableError",
    "Entry",
    "EntryConflictError",
    "EntryType",
    "EventBridgePublisher",
    "EventPublisher",
    "Found",
    "IdempotencyConflictError",
    "InMemoryJournal",
    "InputValidationError",
    "InvalidNameError",
    "InvocationOutcome",
    "Jitter",
    "JournalStore",
    "NestedOperationError",
    "NotFound",
    "OpKind",
    "OutcomeKind",
    "OutgoingEvent",
    "PayloadError",
    "Plugin",
    "ReplayDivergedError",
    "RetryDecision",
    "RetryPolicy",
    "RunCancelledError",
    "RunHeader",
    "RunNotFoundError",
    "RunStateConflictError",
    "RunStatus",
    "Runtime",
    "Secret",
    "SecretSerializationError",
    "Serdes",
    "SkipClock",
    "StepContext",
    "StepError",
    "StepInterruptedError",
    "StepSemantics",
    "SuspendExecution",
    "SystemClock",
    "Tool",
    "ToolAbandonedError",
    "ToolCall",
    "ToolGaveUpError",
    "ToolRegistry",
    "ToolRejectedError",
    "ToolResult",
    "Unknown",
    "VersionBundle",
    "VersionNotDeployedError",
    "WaitDecision",
    "agent",
    "default_registry",
    "default_tools",
    "register_type",
    "tool",
]
