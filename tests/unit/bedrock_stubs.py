"""Shared by the Bedrock provider tests: the model config, a conversation, its Converse request.

``client`` and ``stubber`` are fixtures (a real ``bedrock-runtime`` client and botocore's
Stubber on it); test modules take them by importing them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from durable_agents.llm import ContentBlock, LlmRequest, Message, ModelConfig, ToolSpec

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
CONFIG = ModelConfig(
    name="support",
    version="3",
    provider="bedrock",
    model_id=MODEL,
    temperature=0.2,
    max_tokens=512,
    system_prompt="You are a support agent.",
    prompt_version="p7",
)
WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
def client() -> Any:
    return boto3.client("bedrock-runtime", region_name="us-east-1")


@pytest.fixture
def stubber(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stub:
        yield stub
        stub.assert_no_pending_responses()


def conversation() -> LlmRequest:
    return LlmRequest(
        messages=[
            Message.user("Weather in Paris?"),
            Message(
                role="assistant",
                content=[
                    ContentBlock.of_text("Checking."),
                    ContentBlock(
                        type="tool_use",
                        tool_use_id="t-1",
                        name="get_weather",
                        input={"city": "Paris"},
                    ),
                ],
            ),
            Message(
                role="user",
                content=[
                    ContentBlock.tool_result("t-1", {"temp_c": 21}),
                    ContentBlock.tool_result("t-2", "timeout", error=True),
                ],
            ),
        ],
        tools=[WEATHER],
    )


EXPECTED_REQUEST = {
    "modelId": MODEL,
    "messages": [
        {"role": "user", "content": [{"text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"text": "Checking."},
                {
                    "toolUse": {
                        "toolUseId": "t-1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    }
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "t-1",
                        "content": [{"json": {"temp_c": 21}}],
                        "status": "success",
                    }
                },
                {
                    "toolResult": {
                        "toolUseId": "t-2",
                        "content": [{"text": "timeout"}],
                        "status": "error",
                    }
                },
            ],
        },
    ],
    "system": [{"text": "You are a support agent."}],
    "inferenceConfig": {"temperature": 0.2, "maxTokens": 512},
    "toolConfig": {
        "tools": [
            {
                "toolSpec": {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "inputSchema": {
                        "json": {"type": "object", "properties": {"city": {"type": "string"}}}
                    },
                }
            }
        ]
    },
}


def converse_response(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": 40, "outputTokens": 9, "totalTokens": 49},
        "metrics": {"latencyMs": 321},
    }
