"""The tool-use loop: read state → the model decides → call tools → append results → repeat.

Every model call is its own recorded operation (``turn-<n>``); every tool call goes through the
side-effect protocol (``ctx.tool``), waiting for approval when the tool requires it. When one
answer asks for several tools, they run as parallel branches — separate invocations on Lambda.
On recovery, recorded turns and recorded tool results are replayed: the model is never asked
again for a turn it already answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from durable_agents.engine.context import DurableContext
from durable_agents.engine.operations.parallel import CompletionPolicy
from durable_agents.errors import DurableError
from durable_agents.llm.types import (
    ContentBlock,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
    ToolSpec,
)
from durable_agents.tools import (
    Tool,
    ToolAbandonedError,
    ToolGaveUpError,
    ToolNotApprovedError,
    ToolRejectedError,
)

# A tool that fails is reported to the model as an error result; the loop goes on.
_EVERY_BRANCH = CompletionPolicy(tolerated_failure_percentage=100)
_REPORTED = (ToolRejectedError, ToolNotApprovedError, ToolAbandonedError, ToolGaveUpError)


class TurnLimitError(DurableError):
    """The model was still asking for tools after ``max_turns`` turns."""

    recorded_fields = ("max_turns",)

    def __init__(self, max_turns: int):
        self.max_turns = max_turns
        super().__init__(f"the model did not finish within {max_turns} turns")


@dataclass(frozen=True)
class LoopResult:
    """How the conversation ended.

    Attributes:
        response: The model's last answer.
        messages: The whole conversation, tool results included.
        turns: How many model calls it took.
    """

    response: LlmResponse
    messages: list[Message]
    turns: int

    @property
    def text(self) -> str:
        """The final answer's text."""
        return self.response.text


def tool_spec(tool: Tool[Any, Any]) -> ToolSpec:
    """Describes a tool to the model (name, first docstring line, the request's JSON schema)."""
    doc = (tool.fn.__doc__ or tool.name).strip().splitlines()[0]
    return ToolSpec(
        name=tool.name, description=doc, input_schema=tool.request_model.model_json_schema()
    )


def run_tool_loop(
    ctx: DurableContext,
    *,
    config: ModelConfig,
    messages: Sequence[Message],
    tools: Sequence[Tool[Any, Any]],
    max_turns: int = 8,
    stream: bool = False,
) -> LoopResult:
    """Runs the loop until the model stops asking for tools.

    Args:
        ctx: The agent's context.
        config: The versioned model configuration.
        messages: The conversation so far (usually one user message).
        tools: The tools the model may call.
        max_turns: The most model calls allowed.
        stream: Stream the model's text to the stream cache.

    Returns:
        The final answer and the conversation.

    Raises:
        TurnLimitError: If the model still wants tools after ``max_turns`` turns.
    """
    by_name = {t.name: t for t in tools}
    specs = [tool_spec(t) for t in tools]
    conversation = list(messages)
    for turn in range(1, max_turns + 1):
        response = ctx.llm(
            f"turn-{turn}",
            LlmRequest(messages=conversation, tools=specs),
            config=config,
            stream=stream,
        )
        conversation.append(response.as_message())
        calls = response.tool_calls
        if response.stop_reason != "tool_use" or not calls:
            return LoopResult(response, conversation, turn)
        if len(calls) == 1:
            results = [_call_tool(ctx, by_name, calls[0])]
        else:
            branches = [_branch(by_name, call) for call in calls]
            batch = ctx.parallel(branches, name=f"tools-{turn}", completion=_EVERY_BRANCH)
            results = [
                item.result
                if item.status == "succeeded"
                else ContentBlock.tool_result(
                    calls[item.index].tool_use_id or "",
                    (item.error or {}).get("message", ""),
                    error=True,
                ).model_dump(mode="json")
                for item in batch.items
            ]
        blocks = [ContentBlock.model_validate(r) for r in results]
        conversation.append(Message(role="user", content=blocks))
    raise TurnLimitError(max_turns)


def _branch(
    by_name: dict[str, Tool[Any, Any]], call: ContentBlock
) -> Callable[[DurableContext], dict[str, Any]]:
    def branch(child: DurableContext) -> dict[str, Any]:
        return _call_tool(child, by_name, call)

    return branch


def _call_tool(
    ctx: DurableContext, by_name: dict[str, Tool[Any, Any]], call: ContentBlock
) -> dict[str, Any]:
    """Calls one tool and returns its ``tool_result`` block (as JSON, for branch results)."""
    use_id = call.tool_use_id or ""
    tool = by_name.get(call.name or "")
    if tool is None:
        return ContentBlock.tool_result(
            use_id, f"unknown tool {call.name!r}", error=True
        ).model_dump(mode="json")
    try:
        request = tool.request_model.model_validate(call.input or {})
    except ValidationError as exc:
        # The model's arguments do not fit: tell it, so its next turn can correct them.
        return ContentBlock.tool_result(
            use_id, f"invalid input: {exc.errors()}", error=True
        ).model_dump(mode="json")
    try:
        result = ctx.tool(tool, request)
    except _REPORTED as exc:
        return ContentBlock.tool_result(use_id, str(exc), error=True).model_dump(mode="json")
    content = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
    json.dumps(content)  # tool results go back to the model as JSON
    return ContentBlock.tool_result(use_id, content).model_dump(mode="json")
