"""The public API is what durable_agents exports; this pins it so changes are deliberate."""

from __future__ import annotations

import durable_agents

EXPECTED = {
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
    "RunHeader",
    "RunCancelledError",
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
}


def test_public_exports_are_pinned() -> None:
    assert set(durable_agents.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(durable_agents, name) is not None


def test_suspension_cannot_be_swallowed_by_agent_code() -> None:
    assert not issubclass(durable_agents.SuspendExecution, Exception)
