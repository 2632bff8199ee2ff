"""The tool-use loop: recorded model turns, tools through the sandwich, parallel tool calls."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, ToolCall, ToolRegistry, agent, tool
from durable_agents.engine.tool_loop import run_tool_loop
from durable_agents.journal.store import JournalStore
from durable_agents.llm.types import (
    ContentBlock,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
    Usage,
)
from durable_agents_local.testing import AgentTestRunner, Crash

CONFIG = ModelConfig(name="test-model", version="1", provider="fake", model_id="fake-1")


class Lookup(BaseModel):
    order_id: str


class Refund(BaseModel):
    order_id: str
    cents: int


class FakeModel:
    """Answers by turn index (assistant messages so far); counts every real call."""

    def __init__(self, turns: list[LlmResponse]):
        self.turns = turns
        self.calls: Counter[int] = Counter()
        self.lock = threading.Lock()

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        with self.lock:
            self.calls[turn] += 1
        return self.turns[turn]

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Any
    ) -> LlmResponse:
        response = self.converse(config, request)
        for word in response.text.split(" "):
            on_text(word + " ")
        return response


def use(tool_use_id: str, name: str, **args: Any) -> ContentBlock:
    return ContentBlock(type="tool_use", tool_use_id=tool_use_id, name=name, input=args)


SCRIPT = [
    LlmResponse(
        content=[ContentBlock.of_text("Let me look."), use("t1", "lookup-order", order_id="o-1")],
        stop_reason="tool_use",
        usage=Usage(input_tokens=10, output_tokens=5, total_tokens=15),
        model_id="fake-1",
    ),
    LlmResponse(
        content=[
            use("t2", "refund", order_id="o-1", cents=500),
            use("t3", "lookup-order", order_id="o-2"),
        ],
        stop_reason="tool_use",
        model_id="fake-1",
    ),
    LlmResponse(
        content=[ContentBlock.of_text("Refunded 5.00 EUR for o-1.")],
        stop_reason="end_turn",
        model_id="fake-1",
    ),
]


def build(ledger: Counter[str]) -> tuple[Any, list[Any]]:
    tools = ToolRegistry()
    lock = threading.Lock()

    @tool(name="lookup-order", idempotent=True, registry=tools)
    def lookup_order(request: Lookup, call: ToolCall) -> dict[str, str]:
        """Looks an order up."""
        with lock:
            ledger[f"lookup {request.order_id}"] += 1
        return {"order_id": request.order_id, "status": "delivered"}

    refunded: dict[str, int] = {}

    def find(request: Refund, call: ToolCall) -> Any:
        from durable_agents import Found, NotFound

        return (
            Found({"refunded": refunded[call.idempotency_key]})
            if call.idempotency_key in refunded
            else NotFound()
        )

    @tool(name="refund", lookup=find, registry=tools)
    def refund(request: Refund, call: ToolCall) -> dict[str, int]:
        """Refunds an order."""
        with lock:
            ledger[f"refund {request.order_id}"] += 1
            refunded[call.idempotency_key] = request.cents
        return {"refunded": request.cents}

    @agent(name="support", version="1", registry=AgentRegistry())
    def support(ctx: DurableContext, question: str) -> dict[str, Any]:
        outcome = run_tool_loop(
            ctx,
            config=CONFIG,
            messages=[Message.user(question)],
            tools=[lookup_order, refund],
            stream=True,
        )
        return {"text": outcome.text, "turns": outcome.turns}

    return support, [lookup_order, refund]


def runner_for(
    journal: JournalStore, model: FakeModel, ledger: Counter[str], mode: str
) -> AgentTestRunner:
    support, _ = build(ledger)
    runner = AgentTestRunner(support, journal=journal, mode=mode)  # type: ignore[arg-type]
    runner.runtime.providers["fake"] = model
    return runner


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_the_loop_runs_tools_and_parallel_calls(journal: JournalStore, mode: str) -> None:
    model, ledger = FakeModel(SCRIPT), Counter[str]()
    result = runner_for(journal, model, ledger, mode).run("refund o-1 please")
    assert result.status == "SUCCEEDED", result.error
    assert result.output == {"text": "Refunded 5.00 EUR for o-1.", "turns": 3}
    assert model.calls == {0: 1, 1: 1, 2: 1}
    assert ledger == {"lookup o-1": 1, "refund o-1": 1, "lookup o-2": 1}
    names = [op.op_id.split(":", 1)[1] for op in result.operations]
    assert "turn-1:1" in names and "tools-2:4" in names  # two tool calls → a parallel batch


BOUNDARIES = [
    (op, point)
    for op in ("turn-1", "turn-2", "turn-3", "refund", "lookup-order")
    for point in ("before_claim", "before_execute", "after_execute", "after_record")
]


@pytest.mark.parametrize(("operation", "point"), BOUNDARIES)
def test_a_crash_at_every_boundary_repeats_nothing_recorded(
    journal: JournalStore, operation: str, point: str
) -> None:
    model, ledger = FakeModel(SCRIPT), Counter[str]()
    result = runner_for(journal, model, ledger, "faithful").run(
        "refund o-1 please", crash=Crash(operation, point)
    )  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED", result.error
    assert result.crashes == 1
    recorded_turns = [op for op in result.operations if op.kind == "llm"]
    assert len(recorded_turns) == 3
    # The model answered each recorded turn once — except a turn whose answer arrived and
    # was lost in the crash (after_execute): that one was asked again, and recorded once.
    for turn in range(3):
        lost = operation == f"turn-{turn + 1}" and point == "after_execute"
        assert model.calls[turn] == (2 if lost else 1), (turn, model.calls)
    # Every tool effect happened once (lookups are idempotent reads; refund by lookup).
    assert ledger["refund o-1"] == 1
