"""BedrockProvider against botocore's own service model (Stubber validates every shape).

* ``converse``: request and response are Stubber-verified (botocore validates both against
  ``bedrock-runtime``'s service-2.json).
* ``converse_stream``: Stubber verifies the request; it only accepts a single event dict as the
  response ``stream``, so each test event is validated separately against the
  ``ConverseStreamOutput`` shape with botocore's ParamValidator and the real event list is put
  in place by an ``after-call`` hook, so the provider still goes through
  ``client.converse_stream``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EventStreamError
from botocore.stub import Stubber
from botocore.validate import validate_parameters

from durable_agents import AgentRegistry, ConfigurationError
from durable_agents.deployment import Settings, build_providers, build_runtime
from durable_agents.llm import (
    MODEL_RETRY,
    BedrockProvider,
    ContentBlock,
    LlmRequest,
    Message,
    ModelConfig,
    ModelOutputError,
    ModelRequestError,
    ScriptedProvider,
    ToolSpec,
)
from durable_agents.llm.bedrock import assemble_stream, converse_request
from durable_agents.serde import error_info, rebuild_error

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


# -- converse -----------------------------------------------------------------------------------


def test_request_mapping_messages_tools_system_inference(client: Any, stubber: Stubber) -> None:
    stubber.add_response(
        "converse", converse_response([{"text": "It is 21°C in Paris."}]), EXPECTED_REQUEST
    )
    response = BedrockProvider(client).converse(CONFIG, conversation())
    assert response.text == "It is 21°C in Paris."
    assert response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (40, 9)
    assert response.usage.total_tokens == 49
    assert response.model_id == MODEL


def test_minimal_request_omits_system_and_tools(client: Any, stubber: Stubber) -> None:
    bare = CONFIG.model_copy(update={"system_prompt": ""})
    stubber.add_response(
        "converse",
        converse_response([{"text": "hi"}]),
        {
            "modelId": MODEL,
            "messages": [{"role": "user", "content": [{"text": "hello"}]}],
            "inferenceConfig": {"temperature": 0.2, "maxTokens": 512},
        },
    )
    assert (
        BedrockProvider(client).converse(bare, LlmRequest(messages=[Message.user("hello")])).text
        == "hi"
    )


def test_tool_use_response(client: Any, stubber: Stubber) -> None:
    stubber.add_response(
        "converse",
        converse_response(
            [
                {"text": "Let me check."},
                {
                    "toolUse": {
                        "toolUseId": "tu-9",
                        "name": "get_weather",
                        "input": {"city": "Oslo"},
                    }
                },
                {"reasoningContent": {"reasoningText": {"text": "hmm"}}},  # not modelled: skipped
            ],
            stop="tool_use",
        ),
        EXPECTED_REQUEST,
    )
    response = BedrockProvider(client).converse(CONFIG, conversation())
    assert response.stop_reason == "tool_use"
    assert response.text == "Let me check."
    [call] = response.tool_calls
    assert (call.tool_use_id, call.name, call.input) == ("tu-9", "get_weather", {"city": "Oslo"})
    # The answer goes back into the next request unchanged.
    again = converse_request(
        CONFIG, LlmRequest(messages=[Message.user("x"), response.as_message()])
    )
    assert again["messages"][1]["content"][1] == {
        "toolUse": {"toolUseId": "tu-9", "name": "get_weather", "input": {"city": "Oslo"}}
    }


@pytest.mark.parametrize(
    ("converse_reason", "ours"),
    [
        ("end_turn", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("guardrail_intervened", "guardrail_intervened"),
        ("content_filtered", "content_filtered"),
        ("model_context_window_exceeded", "max_tokens"),
    ],
)
def test_each_stop_reason(client: Any, stubber: Stubber, converse_reason: str, ours: str) -> None:
    stubber.add_response(
        "converse", converse_response([{"text": "…"}], converse_reason), EXPECTED_REQUEST
    )
    assert BedrockProvider(client).converse(CONFIG, conversation()).stop_reason == ours


@pytest.mark.parametrize("reason", ["malformed_model_output", "malformed_tool_use"])
def test_malformed_output_is_a_retryable_output_error(
    client: Any, stubber: Stubber, reason: str
) -> None:
    stubber.add_response("converse", converse_response([{"text": "{"}], reason), EXPECTED_REQUEST)
    with pytest.raises(ModelOutputError) as caught:
        BedrockProvider(client).converse(CONFIG, conversation())
    assert caught.value.code == reason
    assert MODEL_RETRY.should_retry(caught.value, 1)


@pytest.mark.parametrize(
    "code", ["ValidationException", "AccessDeniedException", "ResourceNotFoundException"]
)
def test_refused_requests_are_not_retried(client: Any, stubber: Stubber, code: str) -> None:
    stubber.add_client_error(
        "converse", service_error_code=code, service_message="nope", http_status_code=400
    )
    with pytest.raises(ModelRequestError) as caught:
        BedrockProvider(client).converse(CONFIG, conversation())
    assert caught.value.code == code
    assert isinstance(caught.value.__cause__, ClientError)
    assert not MODEL_RETRY.should_retry(caught.value, 1)
    # The journal records it and a replay raises the same type with the same code.
    rebuilt = rebuild_error(error_info(caught.value))
    assert type(rebuilt) is ModelRequestError
    assert rebuilt.code == code


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ThrottlingException", 429),
        ("ModelTimeoutException", 408),
        ("InternalServerException", 500),
        ("ServiceUnavailableException", 503),
    ],
)
def test_transient_errors_propagate_for_the_retry_policy(
    client: Any, stubber: Stubber, code: str, status: int
) -> None:
    stubber.add_client_error("converse", service_error_code=code, http_status_code=status)
    with pytest.raises(ClientError) as caught:
        BedrockProvider(client).converse(CONFIG, conversation())
    assert caught.value.response["Error"]["Code"] == code
    assert MODEL_RETRY.should_retry(caught.value, 1)


def test_non_json_tool_results_become_text() -> None:
    request = LlmRequest(
        messages=[
            Message(
                role="user",
                content=[
                    ContentBlock.tool_result("a", [1, 2]),
                    ContentBlock.tool_result("b", None),
                ],
            )
        ]
    )
    blocks = converse_request(CONFIG, request)["messages"][0]["content"]
    assert blocks[0]["toolResult"]["content"] == [{"text": "[1, 2]"}]
    assert blocks[1]["toolResult"]["content"] == [{"text": "null"}]


# -- converse_stream ----------------------------------------------------------------------------


def stream_shape(client: Any) -> Any:
    return client.meta.service_model.operation_model("ConverseStream").output_shape.members[
        "stream"
    ]


def stub_stream(client: Any, stubber: Stubber, events: Any, checked: list[dict[str, Any]]) -> None:
    """Stubber checks the request; ``events`` replaces the stream after the call."""
    for event in checked:
        validate_parameters(event, stream_shape(client))  # raises if not a real event shape
    stubber.add_response(
        "converse_stream", {"stream": {"messageStart": {"role": "assistant"}}}, EXPECTED_REQUEST
    )

    def swap(parsed: dict[str, Any], **_: Any) -> None:
        parsed["stream"] = events

    client.meta.events.register_first("after-call.bedrock-runtime.ConverseStream", swap)


TOOL_STREAM: list[dict[str, Any]] = [
    {"messageStart": {"role": "assistant"}},
    {"contentBlockDelta": {"delta": {"text": "Checking "}, "contentBlockIndex": 0}},
    {"contentBlockDelta": {"delta": {"text": "the weather."}, "contentBlockIndex": 0}},
    {"contentBlockStop": {"contentBlockIndex": 0}},
    {
        "contentBlockStart": {
            "start": {"toolUse": {"toolUseId": "tu-1", "name": "get_weather"}},
            "contentBlockIndex": 1,
        }
    },
    {"contentBlockDelta": {"delta": {"toolUse": {"input": '{"ci'}}, "contentBlockIndex": 1}},
    {
        "contentBlockDelta": {
            "delta": {"toolUse": {"input": 'ty": "Oslo"}'}},
            "contentBlockIndex": 1,
        }
    },
    {"contentBlockStop": {"contentBlockIndex": 1}},
    {"messageStop": {"stopReason": "tool_use"}},
    {
        "metadata": {
            "usage": {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19},
            "metrics": {"latencyMs": 80},
        }
    },
]


def test_stream_assembles_text_and_tool_use(client: Any, stubber: Stubber) -> None:
    stub_stream(client, stubber, TOOL_STREAM, TOOL_STREAM)
    chunks: list[str] = []
    response = BedrockProvider(client).converse_stream(CONFIG, conversation(), chunks.append)
    assert chunks == ["Checking ", "the weather."]
    assert response.text == "Checking the weather."
    [call] = response.tool_calls
    assert (call.tool_use_id, call.name, call.input) == ("tu-1", "get_weather", {"city": "Oslo"})
    assert response.stop_reason == "tool_use"
    assert response.usage.total_tokens == 19
    assert response.model_id == MODEL


def test_stream_tool_without_input_and_missing_block_stop() -> None:
    events = [
        {
            "contentBlockStart": {
                "start": {"toolUse": {"toolUseId": "x", "name": "now"}},
                "contentBlockIndex": 0,
            }
        },
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"contentBlockDelta": {"delta": {"text": "tail"}, "contentBlockIndex": 1}},
        {"messageStop": {"stopReason": "max_tokens"}},
    ]
    response = assemble_stream(events, MODEL)
    assert response.content[0].input == {}
    assert response.text == "tail"
    assert response.stop_reason == "max_tokens"
    assert response.usage.total_tokens == 0


def test_stream_without_message_stop_is_an_output_error() -> None:
    with pytest.raises(ModelOutputError):
        assemble_stream([{"messageStart": {"role": "assistant"}}], MODEL)


def test_stream_bad_tool_json_is_an_output_error() -> None:
    events = [
        {
            "contentBlockStart": {
                "start": {"toolUse": {"toolUseId": "x", "name": "f"}},
                "contentBlockIndex": 0,
            }
        },
        {"contentBlockDelta": {"delta": {"toolUse": {"input": "{oops"}}, "contentBlockIndex": 0}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
    ]
    with pytest.raises(ModelOutputError):
        assemble_stream(events, MODEL)


@pytest.mark.parametrize(
    ("code", "expected"),
    [("validationException", ModelRequestError), ("throttlingException", EventStreamError)],
)
def test_in_stream_errors(client: Any, stubber: Stubber, code: str, expected: type) -> None:
    def events() -> Iterator[dict[str, Any]]:
        yield TOOL_STREAM[1]
        raise EventStreamError({"Error": {"Code": code, "Message": "mid-stream"}}, "ConverseStream")

    stub_stream(client, stubber, events(), [TOOL_STREAM[1]])
    chunks: list[str] = []
    with pytest.raises(expected):
        BedrockProvider(client).converse_stream(CONFIG, conversation(), chunks.append)
    assert chunks == ["Checking "]  # what was already streamed stays streamed (per attempt)


def test_raw_exception_events_are_raised() -> None:
    with pytest.raises(ModelRequestError):
        assemble_stream([{"validationException": {"message": "bad"}}], MODEL)
    with pytest.raises(RuntimeError, match="modelStreamErrorException"):
        assemble_stream([{"modelStreamErrorException": {"message": "boom"}}], MODEL)


def test_stream_request_refused_before_streaming(client: Any, stubber: Stubber) -> None:
    stubber.add_client_error(
        "converse_stream", service_error_code="ValidationException", http_status_code=400
    )
    with pytest.raises(ModelRequestError):
        BedrockProvider(client).converse_stream(CONFIG, conversation(), lambda _: None)


def test_request_is_json_only() -> None:
    # What is sent is plain JSON (nothing that only boto3 could serialise).
    json.dumps(converse_request(CONFIG, conversation()))


# -- wiring -------------------------------------------------------------------------------------

BASE_ENV = {"JOURNAL_TABLE": "journal", "EVENT_BUS_NAME": "bus"}
SCRIPT = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "weather.json"


def test_settings_read_model_variables() -> None:
    settings = Settings.from_env(
        {
            **BASE_ENV,
            "SCRIPTED_MODEL_FILE": str(SCRIPT),
            "BEDROCK_REGION": "eu-west-1",
            "BEDROCK_READ_TIMEOUT": "300",
        }
    )
    assert settings.scripted_model_file == str(SCRIPT)
    assert settings.bedrock_region == "eu-west-1"
    assert settings.bedrock_read_timeout_seconds == 300
    plain = Settings.from_env(BASE_ENV)
    assert (plain.scripted_model_file, plain.bedrock_region) == (None, None)
    with pytest.raises(ConfigurationError):
        Settings.from_env({**BASE_ENV, "BEDROCK_READ_TIMEOUT": "soon"})


def test_providers_bedrock_always_scripted_when_configured() -> None:
    session = boto3.session.Session(region_name="us-east-1")
    providers = build_providers(Settings.from_env(BASE_ENV), session)
    assert set(providers) == {"bedrock"}
    bedrock = providers["bedrock"]
    assert isinstance(bedrock, BedrockProvider)
    client = bedrock._client
    assert client.meta.region_name == "us-east-1"
    assert client.meta.config.read_timeout == 120

    settings = Settings.from_env(
        {**BASE_ENV, "SCRIPTED_MODEL_FILE": str(SCRIPT), "BEDROCK_REGION": "eu-west-1"}
    )
    providers = build_providers(settings, session)
    assert set(providers) == {"bedrock", "scripted"}
    assert isinstance(providers["scripted"], ScriptedProvider)
    assert providers["bedrock"]._client.meta.region_name == "eu-west-1"


def test_a_bad_script_file_fails_at_wiring() -> None:
    settings = Settings.from_env({**BASE_ENV, "SCRIPTED_MODEL_FILE": "/nonexistent/script.json"})
    with pytest.raises(ConfigurationError, match="not found"):
        build_providers(settings, boto3.session.Session(region_name="us-east-1"))


def test_build_runtime_wires_the_providers(aws: None) -> None:
    settings = Settings.from_env({**BASE_ENV, "SCRIPTED_MODEL_FILE": str(SCRIPT)})
    runtime = build_runtime(settings, registry=AgentRegistry())
    assert set(runtime.providers) == {"bedrock", "scripted"}
