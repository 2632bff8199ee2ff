"""Amazon Bedrock's Converse / ConverseStream API as an ``LlmProvider``.

The request and response shapes follow botocore's service model for ``bedrock-runtime``
(``Converse``, ``ConverseStream``), which is the authority for every field name used here.

Errors: throttling, timeouts and 5xx (``ThrottlingException``, ``ModelTimeoutException``,
``InternalServerException``, ``ServiceUnavailableException``, ``ModelNotReadyException``,
``ModelErrorException``, ``modelStreamErrorException``) propagate unchanged as botocore's
``ClientError`` / ``EventStreamError``, so the step's retry policy retries them; throttling
(``ThrottlingException``) raises ``ModelThrottledError`` with the ``Retry-After`` Bedrock sent,
a durable back-off that is not a failed attempt (ADR 0030). Requests that
can never succeed as sent (``ValidationException``, ``AccessDeniedException``,
``ResourceNotFoundException``) raise ``ModelRequestError``; list it in
``RetryPolicy.non_retryable`` (``MODEL_RETRY`` does) so the step fails at once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast, get_args

from pydantic import BaseModel

from durable_agents.llm.types import (
    ContentBlock,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
    ModelOutputError,
    ModelRequestError,
    ModelThrottledError,
    StopReason,
    Usage,
)

_log = logging.getLogger("durable_agents.llm")

_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))
# Newer Converse stop reasons outside our provider-neutral set, mapped to the closest one.
_STOP_REASON_ALIASES = {"model_context_window_exceeded": "max_tokens"}
# Error codes of requests that fail the same way however often they are sent (lower case:
# in-stream errors are spelled ``validationException``).
NON_RETRYABLE_CODES = frozenset(
    {"validationexception", "accessdeniedexception", "resourcenotfoundexception"}
)


# -- request mapping ----------------------------------------------------------------------------


def _tool_result_content(content: Any) -> list[dict[str, Any]]:
    """Maps a tool result's value to Converse ``ToolResultContentBlock`` items."""
    if isinstance(content, BaseModel):
        content = content.model_dump(mode="json")
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, Mapping):
        return [{"json": dict(content)}]
    # Lists, numbers, booleans, null: many models only accept a JSON *object*, so send text.
    return [{"text": json.dumps(content, sort_keys=True, default=str)}]


def to_converse_block(block: ContentBlock) -> dict[str, Any]:
    """Maps one of our content blocks to a Converse ``ContentBlock``.

    Raises:
        ModelRequestError: If a tool block lacks its id or name.
    """
    if block.type == "text":
        return {"text": block.text or ""}
    if block.type == "tool_use":
        if not block.tool_use_id or not block.name:
            raise ModelRequestError("a tool_use block needs tool_use_id and name", code="Invalid")
        return {
            "toolUse": {
                "toolUseId": block.tool_use_id,
                "name": block.name,
                "input": block.input or {},
            }
        }
    if not block.tool_use_id:
        raise ModelRequestError("a tool_result block needs tool_use_id", code="Invalid")
    result: dict[str, Any] = {
        "toolUseId": block.tool_use_id,
        "content": _tool_result_content(block.content),
    }
    if block.status:
        result["status"] = block.status
    return {"toolResult": result}


def to_converse_message(message: Message) -> dict[str, Any]:
    """Maps a message; empty text blocks are dropped (Converse rejects blank text).

    Raises:
        ModelRequestError: If a block cannot be mapped.
    """
    blocks = [b for b in message.content if not (b.type == "text" and not b.text)]
    return {
        "role": message.role,
        "content": [to_converse_block(b) for b in blocks or message.content],
    }


def converse_request(config: ModelConfig, request: LlmRequest) -> dict[str, Any]:
    """The keyword arguments of ``converse`` / ``converse_stream`` for this call.

    Raises:
        ModelRequestError: If a message cannot be mapped.
    """
    kwargs: dict[str, Any] = {
        "modelId": config.model_id,
        "messages": [to_converse_message(m) for m in request.messages],
        "inferenceConfig": {"temperature": config.temperature, "maxTokens": config.max_tokens},
    }
    if config.system_prompt:
        kwargs["system"] = [{"text": config.system_prompt}]
    if request.tools:
        kwargs["toolConfig"] = {
            "tools": [
                {
                    "toolSpec": {
                        "name": tool.name,
                        "description": tool.description,
                        "inputSchema": {"json": tool.input_schema},
                    }
                }
                for tool in request.tools
            ]
        }
    return kwargs


# -- response mapping ---------------------------------------------------------------------------


def from_converse_block(block: Mapping[str, Any]) -> ContentBlock | None:
    """Maps a Converse output block back; kinds we do not model (reasoning, …) give ``None``."""
    if "text" in block:
        return ContentBlock.of_text(block["text"])
    if "toolUse" in block:
        use = block["toolUse"]
        return ContentBlock(
            type="tool_use", tool_use_id=use["toolUseId"], name=use["name"], input=use["input"]
        )
    _log.debug("ignoring a Converse content block of kind %s", sorted(block))
    return None


def map_stop_reason(reason: str) -> StopReason:
    """Maps Converse's ``stopReason`` onto ours.

    Raises:
        ModelOutputError: If the model produced malformed output (``malformed_model_output``,
            ``malformed_tool_use``) or a reason unknown to this runtime.
    """
    reason = _STOP_REASON_ALIASES.get(reason, reason)
    if reason in _STOP_REASONS:
        return cast(StopReason, reason)
    raise ModelOutputError(f"the model stopped with {reason!r}", code=reason)


def map_usage(usage: Mapping[str, Any] | None) -> Usage:
    """Maps Converse's ``TokenUsage``."""
    usage = usage or {}
    return Usage(
        input_tokens=int(usage.get("inputTokens", 0)),
        output_tokens=int(usage.get("outputTokens", 0)),
        total_tokens=int(usage.get("totalTokens", 0)),
    )


def from_converse_response(response: Mapping[str, Any], model_id: str) -> LlmResponse:
    """Maps a ``ConverseResponse`` to an ``LlmResponse``.

    Raises:
        ModelOutputError: If the stop reason cannot be represented.
    """
    message = response.get("output", {}).get("message", {})
    blocks = [from_converse_block(b) for b in message.get("content", [])]
    return LlmResponse(
        content=[b for b in blocks if b is not None],
        stop_reason=map_stop_reason(response["stopReason"]),
        usage=map_usage(response.get("usage")),
        model_id=model_id,
    )


class StreamAssembler:
    """Builds an ``LlmResponse`` from ConverseStream events, forwarding text as it arrives.

    Events are the dicts botocore's ``EventStream`` yields (``{"contentBlockDelta": {...}}``).

    Args:
        model_id: The model id to record.
        on_text: Called with each text delta.
    """

    def __init__(self, model_id: str, on_text: Callable[[str], Any] | None = None):
        self._model_id = model_id
        self._on_text = on_text
        self._texts: dict[int, list[str]] = {}
        self._tools: dict[int, dict[str, Any]] = {}
        self._done: dict[int, ContentBlock] = {}
        self._stop: str | None = None
        self._usage = Usage()

    def feed(self, event: Mapping[str, Any]) -> None:
        """Consumes one event.

        Raises:
            ModelRequestError: For an in-stream ``validationException``.
            ModelOutputError: For tool input that is not JSON.
            RuntimeError: For any other in-stream error event (retryable).
        """
        for kind, body in event.items():
            if kind == "contentBlockStart":
                tool = body.get("start", {}).get("toolUse")
                if tool is not None:
                    self._tools[body["contentBlockIndex"]] = {
                        "id": tool["toolUseId"],
                        "name": tool["name"],
                        "input": [],
                    }
            elif kind == "contentBlockDelta":
                self._delta(body["contentBlockIndex"], body.get("delta", {}))
            elif kind == "contentBlockStop":
                self._close(body["contentBlockIndex"])
            elif kind == "messageStop":
                self._stop = body["stopReason"]
            elif kind == "metadata":
                self._usage = map_usage(body.get("usage"))
            elif kind.endswith("Exception"):
                message = f"{kind}: {body.get('message', '')}"
                if kind.lower() in NON_RETRYABLE_CODES:
                    raise ModelRequestError(message, code=kind)
                raise RuntimeError(message)
            # messageStart and unknown events carry nothing we record.

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        if "text" in delta:
            self._texts.setdefault(index, []).append(delta["text"])
            if self._on_text is not None and delta["text"]:
                self._on_text(delta["text"])
        elif "toolUse" in delta and index in self._tools:
            self._tools[index]["input"].append(delta["toolUse"].get("input", ""))

    def _close(self, index: int) -> None:
        if index in self._tools:
            tool = self._tools.pop(index)
            raw = "".join(tool["input"])
            try:
                parsed = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                raise ModelOutputError(
                    f"tool {tool['name']!r} input is not JSON: {raw[:200]!r}",
                    code="malformed_tool_use",
                ) from exc
            self._done[index] = ContentBlock(
                type="tool_use", tool_use_id=tool["id"], name=tool["name"], input=parsed
            )
        elif index in self._texts:
            self._done[index] = ContentBlock.of_text("".join(self._texts.pop(index)))

    def result(self) -> LlmResponse:
        """The assembled response (blocks in index order).

        Raises:
            ModelOutputError: If the stream ended without ``messageStop`` or with a stop reason
                that cannot be represented.
        """
        for index in list(self._texts) + list(self._tools):
            self._close(index)  # a block whose contentBlockStop never came
        if self._stop is None:
            raise ModelOutputError("the stream ended without messageStop", code="truncated")
        return LlmResponse(
            content=[self._done[i] for i in sorted(self._done)],
            stop_reason=map_stop_reason(self._stop),
            usage=self._usage,
            model_id=self._model_id,
        )


def assemble_stream(
    events: Iterable[Mapping[str, Any]],
    model_id: str,
    on_text: Callable[[str], Any] | None = None,
) -> LlmResponse:
    """Assembles a whole ConverseStream event sequence (see ``StreamAssembler``).

    Raises:
        ModelRequestError: For non-retryable in-stream errors.
        ModelOutputError: For output that cannot be represented.
        RuntimeError: For other in-stream error events.
    """
    assembler = StreamAssembler(model_id, on_text)
    for event in events:
        assembler.feed(event)
    return assembler.result()


THROTTLING_CODES = frozenset({"throttlingexception", "toomanyrequestsexception"})
"""Bedrock's answers that mean "too many calls now" (``ModelThrottledError``: a durable
back-off, not a failed attempt)."""


def _retry_after(exc: Exception) -> float | None:
    """The ``Retry-After`` the service sent with a throttle, in seconds (None: none)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return None
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}) or {}
    value = headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the back-off's own delay is as good
    return None if seconds is None or seconds < 0 else min(seconds, 3600.0)


def _refined(exc: Exception) -> Exception | None:
    """What a Bedrock error means to the step.

    Returns:
        ``ModelRequestError`` (it cannot succeed), ``ModelThrottledError`` (a throttle), or
        None (raised as it is: the retry policy decides).
    """
    code = _error_code(exc)
    if code.lower() in NON_RETRYABLE_CODES:
        return ModelRequestError(f"{code}: {exc}", code=code)
    if code.lower() in THROTTLING_CODES:
        return ModelThrottledError(
            f"{code}: {exc}", code=code, retry_after_seconds=_retry_after(exc)
        )
    return None


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


class BedrockProvider:
    """Answers model calls with Bedrock's Converse API.

    Args:
        client: A boto3 ``bedrock-runtime`` client (made once per process and reused).
    """

    def __init__(self, client: Any):
        self._client = client

    def _call(self, method: str, kwargs: dict[str, Any]) -> Any:
        try:
            return getattr(self._client, method)(**kwargs)
        except Exception as exc:
            refined = _refined(exc)
            if refined is not None:
                raise refined from exc
            raise

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        """Calls ``Converse`` and returns the whole answer.

        Raises:
            ModelRequestError: If Bedrock refused the request (validation, access, unknown model).
            ModelOutputError: If the answer cannot be represented (retryable).
            botocore.exceptions.ClientError: For throttling, timeouts and server errors.
        """
        response = self._call("converse", converse_request(config, request))
        return from_converse_response(response, config.model_id)

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Callable[[str], Any]
    ) -> LlmResponse:
        """Calls ``ConverseStream``, forwards text deltas to ``on_text`` and assembles the answer.

        Raises:
            ModelRequestError: If Bedrock refused the request (before or inside the stream).
            ModelOutputError: If the answer cannot be represented (retryable).
            botocore.exceptions.ClientError: For throttling, timeouts and server errors
                (``EventStreamError`` when they arrive inside the stream).
        """
        response = self._call("converse_stream", converse_request(config, request))
        assembler = StreamAssembler(config.model_id, on_text)
        try:
            for event in response["stream"]:
                assembler.feed(event)
        except ModelRequestError:
            raise
        except Exception as exc:
            refined = _refined(exc)
            if refined is not None:
                raise refined from exc
            raise
        return assembler.result()
