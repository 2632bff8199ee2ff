"""Recorded model calls: types, model configuration, providers and the stream cache interface."""

from durable_agents.llm.bedrock import (
    MODEL_RETRY,
    BedrockProvider,
    ModelOutputError,
    ModelRequestError,
)
from durable_agents.llm.scripted import (
    Script,
    ScriptedModelBusyError,
    ScriptedProvider,
    ScriptExhaustedError,
    ScriptMismatchError,
    ScriptTurn,
)
from durable_agents.llm.types import (
    ContentBlock,
    LlmProvider,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
    ProviderNotFoundError,
    StopReason,
    StreamSink,
    ToolSpec,
    Usage,
)

__all__ = [
    "MODEL_RETRY",
    "BedrockProvider",
    "ContentBlock",
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "Message",
    "ModelConfig",
    "ModelOutputError",
    "ModelRequestError",
    "ProviderNotFoundError",
    "Script",
    "ScriptExhaustedError",
    "ScriptMismatchError",
    "ScriptTurn",
    "ScriptedModelBusyError",
    "ScriptedProvider",
    "StopReason",
    "StreamSink",
    "ToolSpec",
    "Usage",
]
