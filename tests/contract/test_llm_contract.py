"""``ctx.llm`` on both journal backends: one model call per recorded turn, replays never ask.

The model is the scripted provider (``tests/fixtures/scripts``), whose call counters say how
many times the model was really asked, per turn.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from durable_agents import AgentRegistry, ConfigurationError, DurableContext, agent
from durable_agents.core.models import EntryType
from durable_agents.journal.store import JournalStore
from durable_agents.llm import (
    MODEL_RETRY,
    ContentBlock,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
    ScriptedProvider,
    ScriptExhaustedError,
    ScriptMismatchError,
    ToolSpec,
)
from durable_agents_local.testing import AgentTestRunner, Crash, CrashPoint

SCRIPTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts"
CONFIG = ModelConfig(
    name="weather-model",
    version="1",
    provider="scripted",
    model_id="scripted-weather-1",
    system_prompt="Answer briefly.",
    prompt_version="weather-prompt@1",
)
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
POINTS: list[CrashPoint] = ["before_claim", "before_execute", "after_execute", "after_record"]


def make_agent(
    seen: list[Any],
    *,
    config: ModelConfig = CONFIG,
    stream: bool = False,
    retry: Any = None,
) -> Any:
    @agent(
        name="weather",
        version="1",
        model_config_version=f"{CONFIG.name}@{CONFIG.version}",
        prompt_version=CONFIG.prompt_version,
        registry=AgentRegistry(),
    )
    def weather(ctx: DurableContext, question: str) -> dict[str, Any]:
        messages = [Message.user(question)]
        first = ctx.llm(
            "turn-1",
            LlmRequest(messages=messages, tools=[WEATHER]),
            config=config,
            stream=stream,
            retry=retry,
        )
        seen.append(first)
        call = first.tool_calls[0]
        reading = ctx.step(lambda: {"city": call.input["city"], "temp_c": 21}, name="get-weather")
        messages += [
            first.as_message(),
            Message(role="user", content=[ContentBlock.tool_result(call.tool_use_id, reading)]),
        ]
        second = ctx.llm(
            "turn-2",
            LlmRequest(messages=messages, tools=[WEATHER]),
            config=config,
            stream=stream,
            retry=retry,
        )
        seen.append(second)
        return {
            "answer": second.text,
            "stop": [first.stop_reason, second.stop_reason],
            "tokens": first.usage.total_tokens + second.usage.total_tokens,
        }

    return weather


def make_runner(
    defn: Any, journal: JournalStore, provider: ScriptedProvider | None, sink: Any = None
) -> AgentTestRunner:
    runner = AgentTestRunner(defn, journal=journal, mode="faithful")
    if provider is not None:
        runner.runtime.providers["scripted"] = provider
    runner.runtime.stream_sink = sink
    return runner


def weather_provider() -> ScriptedProvider:
    return ScriptedProvider.from_file(SCRIPTS / "weather.json")


EXPECTED_OUTPUT = {
    "answer": "It is 21 degrees and sunny in Oslo.",
    "stop": ["tool_use", "end_turn"],
    "tokens": 144,
}


# -- recording and replay -----------------------------------------------------------------------


def test_two_turns_recorded_once_and_replayed_typed(journal: JournalStore) -> None:
    seen: list[Any] = []
    provider = weather_provider()
    result = make_runner(make_agent(seen), journal, provider).run("What is the weather in Oslo?")

    assert result.status == "SUCCEEDED", result.error
    assert result.output == EXPECTED_OUTPUT
    assert provider.calls_by_turn() == {0: 1, 1: 1}
    # Faithful mode replays from the top each invocation: turn-1 came back from the journal
    # several times, always as the same typed response.
    assert all(isinstance(r, LlmResponse) for r in seen)
    firsts = [r for r in seen if r.stop_reason == "tool_use"]
    assert len(firsts) >= 3 and all(r == firsts[0] for r in firsts)
    assert firsts[0].tool_calls[0].input == {"city": "Oslo"}
    assert firsts[0].model_id == CONFIG.model_id

    turn1 = result.operation("turn-1")
    assert (turn1.kind, turn1.status, turn1.attempts) == ("llm", "succeeded", 1)
    assert LlmResponse.model_validate(turn1.result) == firsts[0]
    assert result.header.versions["model_config_version"] == "weather-model@1"


def test_two_runs_share_one_provider(journal: JournalStore) -> None:
    provider = weather_provider()
    runner = make_runner(make_agent([]), journal, provider)
    for _ in range(2):
        assert runner.run("What is the weather in Oslo?").output == EXPECTED_OUTPUT
    # Turns are keyed by the conversation, not by call order: both runs got both turns.
    assert provider.calls_by_turn() == {0: 2, 1: 2}
    assert provider.calls == 4


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("turn", ["turn-1", "turn-2"])
def test_crash_at_each_model_boundary(journal: JournalStore, turn: str, point: CrashPoint) -> None:
    provider = weather_provider()
    result = make_runner(make_agent([]), journal, provider).run(
        "What is the weather in Oslo?", crash=Crash(turn, point)
    )

    assert result.status == "SUCCEEDED", result.error
    assert result.crashes == 1
    assert result.output == EXPECTED_OUTPUT
    index = 0 if turn == "turn-1" else 1
    expected = {0: 1, 1: 1}
    if point == "after_execute":
        # The one at-least-once window: the model answered, the process died before the
        # answer was recorded. The model is asked again; only one answer is recorded.
        expected[index] = 2
    assert provider.calls_by_turn() == expected

    op = result.operation(turn)
    succeeded = [e for e in op.entries if e.type is EntryType.SUCCEEDED]
    assert len(succeeded) == 1
    # A claim that was written before the crash is a started attempt; one before it is not.
    assert op.attempts == (1 if point in ("before_claim", "after_record") else 2)
    other = result.operation("turn-2" if turn == "turn-1" else "turn-1")
    assert other.attempts == 1


# -- streaming ----------------------------------------------------------------------------------


class MemorySink:
    """A stream cache in memory: chunks per (operation, attempt)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.chunks: dict[tuple[str, int], list[tuple[int, str]]] = {}
        self.ended: set[tuple[str, int]] = set()

    def begin(self, run_id: str, operation_id: str, attempt: int) -> None:
        with self.lock:
            self.chunks[(operation_id.split(":")[-2], attempt)] = []

    def append(self, run_id: str, operation_id: str, attempt: int, seq: int, text: str) -> None:
        with self.lock:
            self.chunks[(operation_id.split(":")[-2], attempt)].append((seq, text))

    def end(self, run_id: str, operation_id: str, attempt: int) -> None:
        with self.lock:
            self.ended.add((operation_id.split(":")[-2], attempt))

    def text(self, name: str, attempt: int) -> str:
        return "".join(t for _, t in self.chunks[(name, attempt)])


def test_streaming_records_chunks_per_attempt(journal: JournalStore) -> None:
    provider, sink = weather_provider(), MemorySink()
    result = make_runner(make_agent([], stream=True), journal, provider, sink).run(
        "What is the weather in Oslo?", crash=Crash("turn-2", "after_execute")
    )
    assert result.status == "SUCCEEDED", result.error
    assert result.output == EXPECTED_OUTPUT  # streaming changes nothing in what is recorded
    assert sorted(sink.chunks) == [("turn-1", 1), ("turn-2", 1), ("turn-2", 2)]
    assert sink.text("turn-1", 1) == "Let me check the weather in Oslo."
    # Each attempt streamed the whole text again under its own attempt number, seq from 1.
    for attempt in (1, 2):
        chunks = sink.chunks[("turn-2", attempt)]
        assert [seq for seq, _ in chunks] == list(range(1, len(chunks) + 1))
        assert len(chunks) == len(EXPECTED_OUTPUT["answer"].split())  # type: ignore[union-attr]
        assert sink.text("turn-2", attempt) == EXPECTED_OUTPUT["answer"]
    assert sink.ended == set(sink.chunks)
    assert provider.calls_by_turn() == {0: 1, 1: 2}


class BrokenSink:
    def __init__(self, fail_on: str) -> None:
        self.fail_on = fail_on
        self.calls = 0

    def _maybe(self, method: str) -> None:
        self.calls += 1
        if method == self.fail_on:
            raise ConnectionError("stream cache is down")

    def begin(self, *_: Any) -> None:
        self._maybe("begin")

    def append(self, *_: Any) -> None:
        self._maybe("append")

    def end(self, *_: Any) -> None:
        self._maybe("end")


@pytest.mark.parametrize("fail_on", ["begin", "append", "end"])
def test_a_failing_stream_cache_never_fails_the_step(journal: JournalStore, fail_on: str) -> None:
    provider, sink = weather_provider(), BrokenSink(fail_on)
    result = make_runner(make_agent([], stream=True), journal, provider, sink).run(
        "What is the weather in Oslo?"
    )
    assert result.status == "SUCCEEDED", result.error
    assert result.output == EXPECTED_OUTPUT
    assert provider.calls_by_turn() == {0: 1, 1: 1}
    assert all(op.attempts == 1 for op in result.operations)
    assert sink.calls > 0


# -- errors -------------------------------------------------------------------------------------


def test_missing_provider_pauses_the_run_with_a_clear_reason(journal: JournalStore) -> None:
    """A deployment question, not the agent's error: paused (redrivable), nothing recorded."""
    nowhere = CONFIG.model_copy(update={"provider": "nowhere"})
    result = make_runner(make_agent([], config=nowhere), journal, weather_provider()).run(
        "What is the weather in Oslo?"
    )
    assert result.status == "PAUSED"
    assert result.error is not None
    assert result.error.type == "ProviderNotConfiguredError"
    assert "no model provider 'nowhere'" in result.error.message
    assert "scripted" in result.error.message  # it says what is registered
    assert all(op.kind != "llm" for op in result.operations)  # no claim left behind


def test_drifted_script_fails_at_once_with_model_retry(journal: JournalStore) -> None:
    provider = ScriptedProvider.from_turns([{"expect": "refund", "text": "Refunded."}])
    result = make_runner(make_agent([], retry=MODEL_RETRY), journal, provider).run(
        "What is the weather in Oslo?"
    )
    assert result.status == "FAILED"
    assert result.error is not None and result.error.type == ScriptMismatchError.__name__
    assert result.operation("turn-1").attempts == 1  # a refused request is not retried
    assert provider.calls == 1


def test_transient_model_errors_are_retried_and_recorded_once(journal: JournalStore) -> None:
    turns = ScriptedProvider.from_file(SCRIPTS / "weather.json").scripts[0].turns
    provider = ScriptedProvider.from_turns(
        [turns[0].model_copy(update={"fail_first": 2}), turns[1]]
    )
    result = make_runner(make_agent([], retry=MODEL_RETRY), journal, provider).run(
        "What is the weather in Oslo?"
    )
    assert result.status == "SUCCEEDED", result.error
    assert provider.calls_by_turn() == {0: 3, 1: 1}
    op = result.operation("turn-1")
    assert op.attempts == 3
    assert len([e for e in op.entries if e.type is EntryType.SUCCEEDED]) == 1


# -- the scripted provider itself ---------------------------------------------------------------


def test_scripts_are_selected_by_opening_message_and_turn_index() -> None:
    provider = ScriptedProvider.from_file(SCRIPTS / "support.json")
    config = CONFIG.model_copy(update={"name": "support-model"})
    refund = [Message.user("I want a refund for A-1001")]
    first = provider.converse(config, LlmRequest(messages=refund))
    [call] = first.tool_calls
    assert call.tool_use_id == "tooluse-refund-0-0"  # generated, stable
    assert first.stop_reason == "tool_use"
    second = provider.converse(
        config,
        LlmRequest(
            messages=[
                *refund,
                first.as_message(),
                Message(
                    role="user",
                    content=[ContentBlock.tool_result(call.tool_use_id, {"order": "A-1001"})],
                ),
            ]
        ),
    )
    assert second.text.startswith("Order A-1001 qualifies")
    assert second.usage.total_tokens == second.usage.input_tokens + second.usage.output_tokens > 0
    hello = provider.converse(config, LlmRequest(messages=[Message.user("hello")]))
    assert hello.text.startswith("I can help")
    assert provider.calls_by_turn("refund") == {0: 1, 1: 1}
    assert provider.calls_by_turn() == {0: 1}  # the fallback script
    with pytest.raises(ScriptExhaustedError):
        provider.converse(
            config,
            LlmRequest(messages=[Message.user("hello"), hello.as_message(), Message.user("more")]),
        )


def test_scripted_stream_chunks_join_to_the_text() -> None:
    provider = ScriptedProvider.from_turns([{"text": "  Hello,  durable\nworld. "}])
    chunks: list[str] = []
    response = provider.converse_stream(
        CONFIG, LlmRequest(messages=[Message.user("hi")]), chunks.append
    )
    assert "".join(chunks) == response.text == "  Hello,  durable\nworld. "
    assert len(chunks) == 3


def test_scripted_provider_is_thread_safe() -> None:
    provider = ScriptedProvider.from_turns([{"text": "ok"}])
    request = LlmRequest(messages=[Message.user("hi")])
    threads = [
        threading.Thread(target=lambda: [provider.converse(CONFIG, request) for _ in range(200)])
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert provider.calls_by_turn() == {0: 1600}


@pytest.mark.parametrize(
    "bad",
    [{"turns": []}, [{"expect": "x"}], [{"text": "x", "stop_reason": "bored"}], [{"txt": "x"}]],
)
def test_invalid_scripts_are_configuration_errors(bad: Any, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(__import__("json").dumps(bad))
    with pytest.raises(ConfigurationError):
        ScriptedProvider.from_file(path)


def test_unreadable_script_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        ScriptedProvider.from_file(tmp_path / "missing.json")
