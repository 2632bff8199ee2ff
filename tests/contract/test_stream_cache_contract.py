"""The stream cache: resume after a refresh; a crashed attempt's text restarts; never fatal."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, SkipClock, agent
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.llm.streams import DynamoDBStreamCache, InMemoryStreamCache, StreamCache
from durable_agents.llm.types import (
    ContentBlock,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
)
from durable_agents_local.testing import AgentTestRunner, SimulatedCrash
from tests.conftest import TEMPLATE

CONFIG = ModelConfig(name="m", version="1", provider="words", model_id="words-1")
ANSWER = "durable execution keeps the run going after a crash"


class WordModel:
    """Streams the answer word by word; can die after some words (a process crash)."""

    def __init__(self, die_after: int | None = None):
        self.die_after = die_after
        self.calls = 0

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        raise AssertionError("this test streams")

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Any
    ) -> LlmResponse:
        self.calls += 1
        for n, word in enumerate(ANSWER.split(" ")):
            if self.die_after is not None and n == self.die_after and self.calls == 1:
                raise SimulatedCrash("the process died mid-stream")
            on_text(word if n == 0 else " " + word)
        return LlmResponse(
            content=[ContentBlock.of_text(ANSWER)], stop_reason="end_turn", model_id="words-1"
        )


@agent(name="streamer", version="1", registry=AgentRegistry())
def streamer(ctx: DurableContext, question: str) -> str:
    return ctx.llm(
        "answer", LlmRequest(messages=[Message.user(question)]), config=CONFIG, stream=True
    ).text


@pytest.fixture(params=["memory", "dynamodb"])
def cache(request: pytest.FixtureRequest, clock: SkipClock) -> StreamCache:
    if request.param == "memory":
        return InMemoryStreamCache(clock)
    request.getfixturevalue("aws")
    client = boto3.client("dynamodb", region_name="us-east-1")
    from durable_agents_local.template import load_template, table_definition

    client.create_table(
        TableName="streams", **table_definition(load_template(TEMPLATE), "StreamTable")
    )
    return DynamoDBStreamCache(client, "streams", clock=clock)


def run(cache: StreamCache, clock: SkipClock, model: WordModel) -> Any:
    runner = AgentTestRunner(streamer, journal=InMemoryJournal(), mode="faithful", clock=clock)
    runner.runtime.providers["words"] = model
    runner.runtime.stream_sink = cache
    return runner.run("what is it?")


def text_of(chunks: list[Any]) -> dict[str, str]:
    """What a client shows: per operation, the text of its latest attempt."""
    shown: dict[str, str] = {}
    for chunk in chunks:
        if chunk.kind == "begin":
            shown[chunk.operation_id] = ""
        elif chunk.kind == "text":
            shown[chunk.operation_id] += chunk.text
    return shown


def test_a_refreshed_client_resumes_exactly_where_it_was(
    cache: StreamCache, clock: SkipClock
) -> None:
    result = run(cache, clock, WordModel())
    everything = cache.read(result.run_id).chunks
    assert everything[0].kind == "begin" and everything[-1].kind == "end"
    first = cache.read(result.run_id, limit=4)  # the browser got 4 chunks, then refreshed
    rest = cache.read(result.run_id, after=first.cursor)
    assert first.chunks + rest.chunks == everything
    assert text_of(everything) == {f"{result.run_id}:answer:1": ANSWER}
    assert cache.read(result.run_id, after=rest.cursor).chunks == []


def test_a_crash_mid_stream_restarts_that_operations_text(
    cache: StreamCache, clock: SkipClock
) -> None:
    model = WordModel(die_after=3)
    result = run(cache, clock, model)
    assert result.status == "SUCCEEDED" and model.calls == 2
    chunks = cache.read(result.run_id).chunks
    begins = [(c.attempt, c.kind) for c in chunks if c.kind == "begin"]
    assert begins == [(1, "begin"), (2, "begin")]  # the client is told: attempt 2 restarts
    assert text_of(chunks) == {f"{result.run_id}:answer:1": ANSWER}
    # A client that had read attempt 1 halfway continues and sees the restart marker.
    halfway = [c for c in chunks if c.attempt == 1][-1].cursor
    after = cache.read(result.run_id, after=halfway).chunks
    assert after[0].kind == "begin" and after[0].attempt == 2


def test_expired_chunks_are_not_served(cache: StreamCache, clock: SkipClock) -> None:
    result = run(cache, clock, WordModel())
    clock.advance(cache.ttl_seconds * 1000 + 1)
    assert cache.read(result.run_id).chunks == []


def test_a_failing_stream_cache_never_fails_the_step(clock: SkipClock) -> None:
    class Broken(InMemoryStreamCache):
        def _put(self, run_id: str, chunk: Any) -> None:
            raise ConnectionError("stream table unavailable")

    result = run(Broken(clock), clock, WordModel())
    assert result.status == "SUCCEEDED"
    assert result.output == ANSWER
