"""Rate limits on model configurations and tools, on every journal (ADR 0030).

A burst over a model configuration's requests per minute is slowed, not failed: the calls
over the limit wait on durable timers for the next minute (the driver fires them from the
skip-clock; no invocation waits), and no minute ever sees more calls than the limit.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.flow_views import provider_throttles
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import EntryType, RunStatus
from durable_agents.engine.flow.rates import RateLimits, model_rate_limit
from durable_agents.engine.outcomes import InvocationOutcome, OutcomeKind
from durable_agents.engine.runtime import Runtime
from durable_agents.flow_control import RateLimit
from durable_agents.journal.store import JournalStore
from durable_agents.llm import LlmRequest, LlmResponse, Message, ModelConfig
from durable_agents.llm.types import ContentBlock, ModelThrottledError, Usage
from durable_agents.tools import ToolCall, ToolRegistry, tool
from tests.contract.flow_driver import FlowDriver

RPM = 2
CONFIG = ModelConfig(
    name="slow-model",
    version="1",
    provider="clocked",
    model_id="clocked-1",
    requests_per_minute=RPM,
)


class ClockedProvider:
    """A model that notes the (skip-clock) time of every call."""

    def __init__(self, clock: SkipClock):
        self.clock = clock
        self.at: list[int] = []

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        self.at.append(self.clock.now_ms())
        return LlmResponse(
            content=[ContentBlock.of_text("ok")],
            stop_reason="end_turn",
            usage=Usage(input_tokens=5, output_tokens=5, total_tokens=10),
        )

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Any
    ) -> LlmResponse:
        return self.converse(config, request)


def test_a_burst_over_requests_per_minute_is_slowed_not_failed(journal: JournalStore) -> None:
    clock = SkipClock()
    model = ClockedProvider(clock)
    registry = AgentRegistry()

    @agent(name="asker", version="1", registry=registry)
    def asker(ctx: DurableContext, n: int) -> int:
        ctx.llm("ask", LlmRequest(messages=[Message.user(str(n))]), config=CONFIG)
        return n

    runtime = Runtime(journal, registry=registry, clock=clock, providers={"clocked": model})
    ids = [runtime.start_run("asker", n, priority=3)[0].run_id for n in range(7)]
    waited: list[dict[str, Any]] = []

    def check(outcome: InvocationOutcome) -> None:
        if outcome.kind is OutcomeKind.SUSPENDED:
            waiting = journal.get_run(outcome.run_id).waiting_on
            assert waiting is not None and waiting["kind"] == "rate_limit", waiting
            waited.append(waiting)

    started = clock.now_ms()
    FlowDriver(runtime, clock).drain(check)
    assert all(journal.get_run(run_id).status is RunStatus.SUCCEEDED for run_id in ids)
    assert len(model.at) == 7  # every call made once: waiting recorded nothing, repeated none
    per_minute = Counter(at // 60_000 for at in model.at)
    assert max(per_minute.values()) <= RPM, per_minute
    assert len(per_minute) == 4  # 7 calls at 2 a minute: four minutes
    assert waited and {w["limiter"] for w in waited} == {"model#slow-model"}
    assert max(model.at) - started >= 3 * 60_000 - 60_000


def test_tokens_per_minute_hold_calls_once_the_minute_is_spent(journal: JournalStore) -> None:
    clock = SkipClock()
    limits = RateLimits(journal.flow_items())
    limit = model_rate_limit(None, 25)
    assert limit is not None
    now = clock.now_ms()
    first = limits.take("model#x", limit, "a", 3, now)
    assert not isinstance(first, int)
    limits.add_tokens(first, 30)  # a call that used more than the minute allows
    later = limits.take("model#x", limit, "b", 3, now + 1)
    assert isinstance(later, int) and later >= (now // 60_000 + 1) * 60_000
    # Lower priorities are woken later within the next minute than higher ones.
    low = limits.take("model#x", limit, "c", 5, now + 2)
    high = limits.take("model#x", limit, "d", 1, now + 2)
    assert isinstance(low, int) and isinstance(high, int) and high < low


class Send(BaseModel):
    to: str


def test_a_tool_rate_limit_spaces_its_calls(journal: JournalStore) -> None:
    clock = SkipClock()
    sent: list[int] = []
    tools = ToolRegistry()

    @tool(name="send", idempotent=True, registry=tools, rate_limit=RateLimit(1, per_seconds=1))
    def send(request: Send, call: ToolCall) -> str:
        sent.append(clock.now_ms())
        return request.to

    registry = AgentRegistry()

    @agent(name="mailer", version="1", registry=registry)
    def mailer(ctx: DurableContext, count: int) -> int:
        for n in range(count):
            ctx.tool(send, Send(to=f"u{n}"), name=f"send-{n}")
        return count

    runtime = Runtime(journal, registry=registry, clock=clock)
    header, _ = runtime.start_run("mailer", 4)
    FlowDriver(runtime, clock).drain()
    assert journal.get_run(header.run_id).status is RunStatus.SUCCEEDED
    assert len(sent) == 4
    assert len({at // 1000 for at in sent}) == 4  # one a second


class ThrottlingProvider:
    """A provider that throttles the first calls (some with a Retry-After), then answers."""

    def __init__(self, clock: SkipClock, throttles: int):
        self.clock = clock
        self.throttles = throttles
        self.at: list[int] = []

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        self.at.append(self.clock.now_ms())
        if len(self.at) <= self.throttles:
            after = 30.0 if len(self.at) % 2 else None  # every other one says how long
            raise ModelThrottledError("429", code="TooManyRequests", retry_after_seconds=after)
        return LlmResponse(content=[ContentBlock.of_text("ok")], stop_reason="end_turn")

    def converse_stream(self, config: ModelConfig, request: LlmRequest, on_text: Any) -> Any:
        return self.converse(config, request)


def test_a_providers_throttles_back_off_durably_and_never_fail_the_call(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    # More throttles than the call's retry policy has attempts: throttles are not failures.
    model = ThrottlingProvider(clock, throttles=6)
    config = ModelConfig(name="busy", version="1", provider="busy", model_id="busy-1")
    registry = AgentRegistry()
    registry.prompts.add_model_config(config)

    @agent(name="patient", version="1", registry=registry)
    def patient(ctx: DurableContext, n: int) -> str:
        answer = ctx.llm("ask", LlmRequest(messages=[Message.user("hi")]), config=config)
        return answer.text

    runtime = Runtime(journal, registry=registry, clock=clock, providers={"busy": model})
    header, _ = runtime.start_run("patient", 1)
    FlowDriver(runtime, clock).drain()
    assert journal.get_run(header.run_id).status is RunStatus.SUCCEEDED
    assert len(model.at) == 7
    entries = journal.load(header.run_id).entries
    backoffs = [e for e in entries if e.type is EntryType.ATTEMPT_FAILED]
    assert len(backoffs) == 6 and all(e.meta.get("throttled") for e in backoffs)
    # A Retry-After was waited exactly; the others waited a growing back-off, durably.
    gaps = [b - a for a, b in zip(model.at, model.at[1:], strict=False)]
    assert gaps[0] == gaps[2] == 30_000
    assert 0 < gaps[1] < gaps[3] <= 300_000
    counted = provider_throttles(journal, registry, clock.now_ms())
    assert counted == [{"provider": "busy", "model_id": "busy-1", "throttled_today": 6}]
