"""The shapes of a model call, provider-neutral (close to the Bedrock Converse API)."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from durable_agents.errors import DurableError
from durable_agents.retry import RetryPolicy

StopReason = Literal[
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "guardrail_intervened",
    "content_filtered",
]


class ContentBlock(BaseModel):
    """One block of a message: text, a tool call the model makes, or a tool's result."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text", "tool_use", "tool_result"]
    text: str | None = None
    tool_use_id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    content: Any = None
    status: Literal["success", "error"] | None = None

    @classmethod
    def of_text(cls, text: str) -> ContentBlock:
        """A text block."""
        return cls(type="text", text=text)

    @classmethod
    def tool_result(cls, tool_use_id: str, content: Any, *, error: bool = False) -> ContentBlock:
        """The result of a tool call, to send back to the model."""
        return cls(
            type="tool_result",
            tool_use_id=tool_use_id,
            content=content,
            status="error" if error else "success",
        )


class Message(BaseModel):
    """One turn of the conversation."""

    model_config = ConfigDict(frozen=True)

    role: Literal["user", "assistant"]
    content: list[ContentBlock]

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message with one text block."""
        return cls(role="user", content=[ContentBlock.of_text(text)])


class ToolSpec(BaseModel):
    """A tool the model may call (name, description, JSON schema of its input)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    input_schema: dict[str, Any]


class LlmRequest(BaseModel):
    """What is sent to the model (the model configuration is separate and versioned)."""

    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)


class Usage(BaseModel):
    """Token usage of one call."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class LlmResponse(BaseModel):
    """The model's full answer, recorded as the operation's result.

    Attributes:
        content: The assistant's content blocks (text and tool calls).
        stop_reason: Why the model stopped.
        usage: Token usage.
        model_id: The model that answered.
    """

    content: list[ContentBlock]
    stop_reason: StopReason
    usage: Usage = Field(default_factory=Usage)
    model_id: str = ""

    @property
    def text(self) -> str:
        """All text blocks, joined."""
        return "".join(b.text or "" for b in self.content if b.type == "text")

    @property
    def tool_calls(self) -> list[ContentBlock]:
        """The tool calls the model asked for, in order."""
        return [b for b in self.content if b.type == "tool_use"]

    def as_message(self) -> Message:
        """The answer as an assistant message, to append to the conversation."""
        return Message(role="assistant", content=list(self.content))


class ModelConfig(BaseModel):
    """A versioned model configuration (part of the run's version bundle, never loose args).

    Attributes:
        name: A name for this configuration (for example ``support-model``).
        version: Its version; bump it when any field changes.
        provider: Which provider serves it (``bedrock``, ``scripted``).
        model_id: The provider's model id.
        temperature: Sampling temperature.
        max_tokens: Output token limit.
        system_prompt: The system prompt's text (resolved from a versioned prompt).
        prompt_version: The version of that prompt.
        requests_per_minute: Calls per minute every Lambda of the deployment shares (None: no
            limit); a call over it waits for the next minute on a durable timer (ADR 0030).
        tokens_per_minute: Tokens (in and out) per minute, shared the same way (None: none).
        input_usd_per_mtok: Price of a million input tokens, in US dollars, for budgets.
        output_usd_per_mtok: Price of a million output tokens, in US dollars.

    Limits and prices are how the deployment runs the configuration, not what it answers:
    they are not part of its pinned content hash, so changing them moves no run
    (``FLOW_FIELDS``).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    provider: str
    model_id: str
    temperature: float = 0.0
    max_tokens: int = 1024
    system_prompt: str = ""
    prompt_version: str = "none"
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    input_usd_per_mtok: float = Field(default=0.0, ge=0)
    output_usd_per_mtok: float = Field(default=0.0, ge=0)


FLOW_FIELDS = frozenset(
    {"requests_per_minute", "tokens_per_minute", "input_usd_per_mtok", "output_usd_per_mtok"}
)
"""``ModelConfig`` fields that say how the deployment runs it: outside its content hash."""


class LlmProvider(Protocol):
    """Something that answers model calls."""

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        """Returns the model's whole answer."""
        ...

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Any
    ) -> LlmResponse:
        """Streams text deltas to ``on_text(chunk)`` and returns the assembled answer."""
        ...


class StreamSink(Protocol):
    """Where streamed text chunks go (the stream cache). Failures never fail a step."""

    def begin(self, run_id: str, operation_id: str, attempt: int) -> None:
        """Announces a new attempt of an operation (clients restart its text)."""
        ...

    def append(self, run_id: str, operation_id: str, attempt: int, seq: int, text: str) -> None:
        """Stores one chunk."""
        ...

    def end(self, run_id: str, operation_id: str, attempt: int) -> None:
        """Marks the attempt's text complete."""
        ...


class ProviderNotFoundError(Exception):
    """No provider is registered under the configuration's provider name."""


class ModelRequestError(DurableError):
    """The model provider refused the request itself; resending it cannot help.

    Raised for Bedrock's ``ValidationException`` (bad request, unknown tool, context too long),
    ``AccessDeniedException`` and ``ResourceNotFoundException`` (model not enabled or unknown
    model id), and by the scripted provider when a
    script does not fit the conversation. List it in ``RetryPolicy.non_retryable``.

    Attributes:
        code: The provider's error code (``ValidationException``, ``ScriptMismatch``, …).
    """

    recorded_fields = ("code",)

    def __init__(self, message: str, *, code: str = ""):
        self.code = code
        super().__init__(message)


class ModelThrottledError(DurableError):
    """The model provider throttled the call (Bedrock ``ThrottlingException``, an HTTP 429).

    Not the agent's failure, and not a failed attempt: the call is tried again after a durable
    back-off (``retry_after_seconds`` when the provider said, else growing from 2 s to 5
    minutes), holding no compute, however many times it happens; a provider of your own raises
    it on a 429 with the ``Retry-After`` it was given. Each throttle is counted
    (``GET /flow``, the reconciler's metrics; ADR 0030).

    Attributes:
        code: The provider's error code.
        retry_after_seconds: How long the provider asked to wait (None: it did not say).
    """

    recorded_fields = ("code", "retry_after_seconds")

    def __init__(self, message: str, *, code: str = "", retry_after_seconds: float | None = None):
        self.code = code
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message)


class ModelOutputError(DurableError):
    """The model's answer cannot be represented (malformed output, tool input that is not JSON).

    Retryable: sampling differs between attempts, so another call may well succeed.

    Attributes:
        code: What was wrong (the Converse stop reason, ``malformed_tool_use``, ``truncated``).
    """

    recorded_fields = ("code",)

    def __init__(self, message: str, *, code: str = ""):
        self.code = code
        super().__init__(message)


# The retry policy to pass as ``ctx.llm(..., retry=MODEL_RETRY)``: the default LLM backoff,
# except that a refused request fails the step at once.
MODEL_RETRY = RetryPolicy(
    max_attempts=4,
    initial_delay_seconds=2,
    backoff_rate=2,
    jitter=0.5,
    non_retryable=(ModelRequestError,),
)
