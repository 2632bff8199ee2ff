"""A failing log, trace, metrics or stream sink never fails a step (LESSONS; issue 13 item 7).

Each sink is made to raise — a logging handler in ``emit``, the metrics flush, the tracer, the
stream cache's write — in the test harness and in the StepRunner handler on moto; the step
still commits and the run completes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.llm.types import LlmRequest, Message, ModelConfig
from durable_agents_local.testing import AgentTestRunner
from tests.unit.conftest import Deployment, FakeLambdaContext
from tests.unit.test_step_runner import step_event

MODEL = ModelConfig(name="sink-model", version="1", provider="scripted", model_id="sink-m")


class SinkDownError(Exception):
    """What every broken sink raises."""


class RaisingHandler(logging.Handler):
    """A log handler whose ``emit`` raises (a broken log shipper), for every record."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.calls = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.calls += 1
        raise SinkDownError("the log sink is down")


class RaisingStreamSink:
    """A stream cache whose every write raises (throttled, unreachable)."""

    def __init__(self) -> None:
        self.calls = 0

    def _fail(self, *_: Any) -> None:
        self.calls += 1
        raise SinkDownError("ProvisionedThroughputExceededException")

    begin = append = end = _fail


@pytest.fixture
def broken_logging() -> Iterator[RaisingHandler]:
    """A raising handler on the runtime's loggers (``durable_agents.*``), at DEBUG.

    Not on the root logger: botocore's own debug lines would raise before any request.
    """
    handler = RaisingHandler()
    loggers = [logging.getLogger("durable_agents")]
    levels = [each.level for each in loggers]
    for each in loggers:
        each.addHandler(handler)
        each.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for each, level in zip(loggers, levels, strict=True):
            each.removeHandler(handler)
            each.setLevel(level)


@agent(name="sink-talker", version="1", registry=AgentRegistry())
def sink_talker(ctx: DurableContext, question: str) -> str:
    ctx.logger.info("asking %s", question)
    answer = ctx.llm(
        "say", LlmRequest(messages=[Message.user(question)]), config=MODEL, stream=True
    ).text
    ctx.logger.warning("answered")
    return ctx.step(lambda: answer.upper(), name="shout")


def test_harness_a_raising_stream_cache_and_log_handler_fail_no_step(
    broken_logging: RaisingHandler,
) -> None:
    runner = AgentTestRunner(
        sink_talker,
        mode="faithful",
        model_script=ScriptedProvider.from_turns([{"text": "hello there"}]),
    )
    sink = RaisingStreamSink()
    runner.runtime.stream_sink = sink
    result = runner.run("hi")
    assert result.status == "SUCCEEDED"
    assert result.output == "HELLO THERE"
    assert sink.calls == 1  # the first write failed; the call went on without the cache
    assert broken_logging.calls >= 1  # the broken handler was reached (and raised)
    assert result.operation("say").attempts == 1  # not failed (and retried) by the sinks


# -- the StepRunner handler on moto -------------------------------------------------------------


def _drive(run_id: str, limit: int = 20) -> list[str]:
    from step_runner.app import handler

    outcomes = []
    for _ in range(limit):
        outcomes.append(handler(step_event(run_id), FakeLambdaContext())["outcome"])
        if outcomes[-1] in ("succeeded", "failed", "paused"):
            break
    return outcomes


def _start_talker() -> str:
    from step_runner.app import get_runtime

    runtime = get_runtime()
    runtime.registry.add(sink_talker)
    runtime.providers["scripted"] = ScriptedProvider.from_turns([{"text": "hello there"}])
    header, _ = runtime.start_run("sink-talker", "hi")
    return header.run_id


def _status(run_id: str) -> str:
    from step_runner.app import get_runtime

    return str(get_runtime().store.get_run(run_id).status)


@pytest.fixture
def step_runner(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from step_runner import app

    monkeypatch.setattr(app, "_runtime", None)  # built in this test's moto account
    yield app
    app._runtime = None


def test_handler_a_raising_metrics_flush_fails_no_invocation(
    step_runner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def flush(*_: Any, **__: Any) -> None:
        raise SinkDownError("stdout closed")

    monkeypatch.setattr(step_runner.metrics.provider, "flush_metrics", flush)
    run_id = _start_talker()
    assert _drive(run_id)[-1] == "succeeded"
    assert _status(run_id) == "SUCCEEDED"
    # Nothing unflushed (nor its agent dimension) is left for the next invocation.
    assert step_runner.metrics.provider.metric_set == {}
    assert "agent" not in step_runner.metrics.provider.dimension_set


def test_handler_a_raising_tracer_log_handler_and_stream_cache_fail_no_step(
    step_runner: Any, monkeypatch: pytest.MonkeyPatch, broken_logging: RaisingHandler
) -> None:
    def annotate(*_: Any, **__: Any) -> None:
        raise SinkDownError("the X-Ray daemon is gone")

    monkeypatch.setattr(step_runner.tracer, "put_annotation", annotate)
    step_runner.logger.addHandler(broken_logging)
    try:
        run_id = _start_talker()
        sink = RaisingStreamSink()
        step_runner.get_runtime().stream_sink = sink
        assert _drive(run_id)[-1] == "succeeded"
    finally:
        step_runner.logger.removeHandler(broken_logging)
    assert _status(run_id) == "SUCCEEDED"
    assert sink.calls == 1
    assert broken_logging.calls >= 1


def test_handler_a_tracer_that_cannot_open_its_segment_fails_no_invocation(
    step_runner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def in_subsegment(*_: Any, **__: Any) -> None:
        raise SinkDownError("the X-Ray SDK has no context")

    monkeypatch.setattr(step_runner.tracer.provider, "in_subsegment", in_subsegment)
    run_id = _start_talker()
    assert _drive(run_id)[-1] == "succeeded"
    assert _status(run_id) == "SUCCEEDED"
