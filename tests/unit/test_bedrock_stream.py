"""BedrockProvider.converse_stream against botocore's own service model.

Stubber verifies the request; it only accepts a single event dict as the response ``stream``,
so each test event is validated separately against the ``ConverseStreamOutput`` shape with
botocore's ParamValidator and the real event list is put in place by an ``after-call`` hook, so
the provider still goes through ``client.converse_stream``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import EventStreamError
from botocore.stub import Stubber
from botocore.validate import validate_parameters

from durable_agents.aws.bedrock import BedrockProvider, assemble_stream, converse_request
from durable_agents.llm import ModelOutputError, ModelRequestError, ModelThrottledError
from tests.unit.bedrock_stubs import (
    CONFIG,
    EXPECTED_REQUEST,
    MODEL,
    client,
    conversation,
    stubber,
)

__all__ = ["client", "stubber"]  # the fixtures


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
    # A throttle inside the stream is a durable back-off (ADR 0030), like one before it.
    [("validationException", ModelRequestError), ("throttlingException", ModelThrottledError)],
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
