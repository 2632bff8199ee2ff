"""Recorded model calls: types, model configuration, the scripted provider and the stream cache.

The Bedrock provider is an AWS adapter: ``durable_agents.aws.bedrock.BedrockProvider`` (not
imported here, so a handler that never calls a model never loads it). The exports are imported
on first read (``durable_agents._lazy``): ``durable_agents.llm.types``, which every agent
module reaches through ``ModelConfig``, does not load the scripted provider.
"""

from typing import TYPE_CHECKING

from durable_agents._lazy import lazy_exports

if TYPE_CHECKING:
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
        ModelThrottledError,
        ProviderNotFoundError,
        StopReason,
        StreamSink,
        ToolSpec,
        Usage,
    )

# Where each export lives (tests/unit/test_exports.py keeps it, the imports above and __all__
# in step).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "durable_agents.llm.scripted": (
        "Script",
        "ScriptedModelBusyError",
        "ScriptedProvider",
        "ScriptExhaustedError",
        "ScriptMismatchError",
        "ScriptTurn",
    ),
    "durable_agents.llm.types": (
        "MODEL_RETRY",
        "ContentBlock",
        "LlmProvider",
        "LlmRequest",
        "LlmResponse",
        "Message",
        "ModelConfig",
        "ModelOutputError",
        "ModelRequestError",
        "ModelThrottledError",
        "ProviderNotFoundError",
        "StopReason",
        "StreamSink",
        "ToolSpec",
        "Usage",
    ),
}

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
    "ModelThrottledError",
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

# Reads an export from its module the first time; names that moved out of this package keep
# working for one release (durable_agents._moved).
__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
