"""BedrockProvider.converse against botocore's own service model (Stubber validates every shape).

Request and response are Stubber-verified: botocore validates both against
``bedrock-runtime``'s service-2.json. ``converse_stream`` is ``test_bedrock_stream.py``, the
wiring from settings ``test_bedrock_wiring.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from durable_agents.aws.bedrock import BedrockProvider, converse_request
from durable_agents.core.serde import error_info, rebuild_error
from durable_agents.llm import (
    MODEL_RETRY,
    ContentBlock,
    LlmRequest,
    Message,
    ModelOutputError,
    ModelRequestError,
    ModelThrottledError,
)
from tests.unit.bedrock_stubs import (
    CONFIG,
    EXPECTED_REQUEST,
    MODEL,
    client,
    conversation,
    converse_response,
    stubber,
)

__all__ = ["client", "stubber"]  # the fixtures


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


@pytest.mark.parametrize("retry_after", ["7", None, "Wed, 21 Oct 2026 07:28:00 GMT"])
def test_a_throttle_is_a_durable_back_off_with_the_retry_after_bedrock_sent(
    client: Any, stubber: Stubber, retry_after: str | None
) -> None:
    headers = {} if retry_after is None else {"retry-after": retry_after}
    stubber.add_client_error(
        "converse",
        service_error_code="ThrottlingException",
        http_status_code=429,
        response_meta={"HTTPHeaders": headers},
    )
    with pytest.raises(ModelThrottledError) as caught:
        BedrockProvider(client).converse(CONFIG, conversation())
    assert caught.value.code == "ThrottlingException"
    assert isinstance(caught.value.__cause__, ClientError)
    # Seconds are kept; a date (or nothing) leaves the back-off its own delay.
    assert caught.value.retry_after_seconds == (7.0 if retry_after == "7" else None)
    rebuilt = rebuild_error(error_info(caught.value))
    assert type(rebuilt) is ModelThrottledError
    assert rebuilt.retry_after_seconds == caught.value.retry_after_seconds


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
