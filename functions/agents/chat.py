"""The chat example: one run holds a whole conversation, fed by messages sent into it.

The first message is the run's input; the agent answers it with one model call, then waits
for follow-ups with ``ctx.wait_for_event("message", timeout=...)`` — each one a
``POST /runs/{id}/events/message`` with ``{"text": "..."}`` — and answers each in turn. While
it waits the run holds no compute; a message sent while it is busy answering (or before it got
to its wait) is kept and answered next, each once, in the order they arrived. After every
answer it publishes ``{"turns": n, "last_answer": ...}`` with ``ctx.set_status``, which
``GET /runs/{id}/status-value`` shows. It ends on "bye" or when no message came for
``idle_timeout_seconds``.

The model is scripted (``agents:scripts/chat.json``) so the example runs offline and
deterministically.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from durable_agents import DurableContext, EventWaitTimeoutError, agent
from durable_agents.agent import register_model_config
from durable_agents.llm.types import LlmRequest, Message, ModelConfig

register_model_config(
    ModelConfig(
        name="chat-model",
        version="1",
        provider="scripted",
        model_id="scripted-chat",
        max_tokens=512,
    )
)
GOODBYE = "bye"
MAX_TEXT_CHARS = 4_000


class ChatRequest(BaseModel):
    """The opening message, and how long to wait for the next one."""

    message: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    idle_timeout_seconds: int = Field(default=900, ge=1, le=7 * 24 * 3600)


class ChatTurn(BaseModel):
    """One message and its answer."""

    message: str
    answer: str
    event_id: str | None = None  # None for the opening message (the run's input)


class ChatTranscript(BaseModel):
    """The conversation, and why it ended."""

    turns: list[ChatTurn]
    ended: Literal["bye", "timeout"]


def _text(payload: Any) -> str:
    """The message text of an event: ``{"text": ...}`` or a bare string; anything else: ""."""
    if isinstance(payload, dict):
        payload = payload.get("text")
    return payload[:MAX_TEXT_CHARS] if isinstance(payload, str) else ""


@agent(name="example-chat", version="1", model_configs=["chat-model"])
def chat(ctx: DurableContext, request: ChatRequest) -> ChatTranscript:
    """Answers the opening message, then every follow-up sent into the run, until "bye"."""
    model = ctx.model_config("chat-model")
    conversation = [Message.user(request.message)]
    turns: list[ChatTurn] = []
    message, event_id = request.message, None
    while True:
        reply = ctx.llm("answer", LlmRequest(messages=conversation), config=model)
        conversation.append(reply.as_message())
        turns.append(ChatTurn(message=message, answer=reply.text, event_id=event_id))
        ctx.set_status({"turns": len(turns), "last_answer": reply.text, "ended": None})
        try:
            event = ctx.wait_for_event("message", timeout=request.idle_timeout_seconds)
        except EventWaitTimeoutError:
            ended: Literal["bye", "timeout"] = "timeout"
            break
        message, event_id = _text(event.payload), event.event_id
        if message.strip().lower() == GOODBYE:
            ended = "bye"
            break
        conversation.append(Message.user(message or "(empty message)"))
    ctx.set_status({"turns": len(turns), "last_answer": turns[-1].answer, "ended": ended})
    return ChatTranscript(turns=turns, ended=ended)
