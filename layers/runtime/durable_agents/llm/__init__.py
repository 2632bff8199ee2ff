"""Recorded model calls: types, model configuration, the scripted provider and the stream cache.

The Bedrock provider is an AWS adapter: ``durable_agents.aws.bedrock.BedrockProvider`` (not
imported here, so a handler that never calls a model never loads it).
"""

from durable_agents._moved import moved_attribute
from durable_agents.llm.scripted import (
    Script,
    ScriptedModelBusyError,
    ScriptedProvider,
    ScriptExhaustedError,
    ScriptMismatchError,
    ScriptTurn,
)
from durable_agents.llm.types import (
    MODEL_RETRY,
    ContentBlock,
    LlmProvider,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
    ModelOutputError,
    ModelRequestError,
    ProviderNotFoundError,
    StopReason,
    StreamSink,
    ToolSpec,
    Usage,
)

__all__ = [
    "MODEL_RETRY",
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


def __getattr__(name: str) -> object:
    # Names that moved out of this package keep working for one release (durable_agents._moved).
    return moved_attribute(__name__, name)
