"""Every log line of an invocation names its run, agent, operation and attempt (issue 13 item 7).

``ctx.logger``'s and a step's ``step.logger``'s lines carry the keys and the agent's own source
line as their location; the runtime's own lines get them from ``LogContextFilter``. Keys never
outlive the invocation (a warm execution environment) nor cross threads (local mode).
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools import Logger

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, StepContext, agent
from durable_agents.core.log_context import (
    LogContextFilter,
    current_log_keys,
    invocation_log_context,
    note_operation,
)
from durable_agents_local.testing import AgentTestRunner

REGISTRY = AgentRegistry()


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Iterator[Capture]:
    handler = Capture()
    handler.addFilter(LogContextFilter())
    logger = logging.getLogger("durable_agents.agent")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def fetch(step: StepContext, url: str) -> str:
    if step.attempt == 1:
        raise ConnectionError("the first attempt fails")
    step.logger.info("fetching %s", url)  # STEP LINE
    return url


@agent(name="logging-agent", version="1", registry=REGISTRY)
def logging_agent(ctx: DurableContext, url: str) -> str:
    ctx.logger.info("starting")  # AGENT LINE 1
    got = ctx.step(fetch, url, retry=RetryPolicy(max_attempts=2))
    ctx.logger.warning("fetched %s", got)  # AGENT LINE 2
    return got


def _line_of(fn: Any, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    (offset,) = [i for i, text in enumerate(lines) if marker in text]
    return first + offset


def test_agent_and_step_lines_carry_the_keys_and_the_agents_own_location(
    captured: Capture,
) -> None:
    result = AgentTestRunner(logging_agent, mode="faithful").run("https://example.com")
    assert result.status == "SUCCEEDED"
    by_message = {r.getMessage(): r for r in captured.records}
    # Replays of later invocations write nothing again: each line exactly once.
    messages = [r.getMessage() for r in captured.records]
    assert messages == ["starting", "fetching https://example.com", "fetched https://example.com"]

    starting = by_message["starting"]
    assert starting.funcName == "logging_agent"
    assert starting.lineno == _line_of(logging_agent.fn, "AGENT LINE 1")
    assert starting.filename == "test_log_context.py"
    assert (starting.run_id, starting.agent, starting.tenant) == (  # type: ignore[attr-defined]
        result.run_id,
        "logging-agent",
        "default",
    )

    step_line = by_message["fetching https://example.com"]
    assert step_line.funcName == "fetch"
    assert step_line.lineno == _line_of(fetch, "STEP LINE")
    op_id = f"{result.run_id}:fetch:1"
    assert step_line.operation_id == op_id  # type: ignore[attr-defined]
    assert step_line.operation_name == "fetch"  # type: ignore[attr-defined]
    assert step_line.attempt == 2  # type: ignore[attr-defined]
    assert step_line.agent == "logging-agent"  # type: ignore[attr-defined]

    after = by_message["fetched https://example.com"]
    assert after.lineno == _line_of(logging_agent.fn, "AGENT LINE 2")
    assert after.operation_id == op_id  # type: ignore[attr-defined] # the last one taken up
    assert current_log_keys() == {}  # nothing outlives the invocation


def test_powertools_logger_lines_name_the_agents_file_function_and_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    powertools = Logger(service="log-context-test", location="%(filename)s:%(funcName)s:%(lineno)d")
    runner = AgentTestRunner(logging_agent)
    runner.runtime.logger = powertools
    result = runner.run("u")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    starting = next(line for line in lines if line["message"] == "starting")
    line = _line_of(logging_agent.fn, "AGENT LINE 1")
    assert starting["location"] == f"test_log_context.py:logging_agent:{line}"
    assert starting["run_id"] == result.run_id and starting["agent"] == "logging-agent"
    fetching = next(line for line in lines if line["message"] == "fetching u")
    assert fetching["operation_name"] == "fetch" and fetching["attempt"] == 2


def test_runtime_lines_get_the_keys_from_the_filter_and_only_during_the_invocation(
    captured: Capture,
) -> None:
    runtime_log = logging.getLogger("durable_agents.agent.runtime-test")
    with invocation_log_context("run-a"):
        note_operation("run-a:x:1", "x", attempt=3)
        runtime_log.warning("inside")
    runtime_log.warning("outside")
    inside, outside = captured.records
    assert (inside.run_id, inside.operation_name, inside.attempt) == ("run-a", "x", 3)  # type: ignore[attr-defined]
    assert not hasattr(outside, "run_id")


def test_another_operation_does_not_inherit_the_previous_attempt() -> None:
    with invocation_log_context("run-b"):
        note_operation("run-b:a:1", "a", attempt=2)
        note_operation("run-b:b:1", "b")
        assert "attempt" not in current_log_keys()


def test_keys_never_cross_threads() -> None:
    seen: dict[str, dict[str, Any]] = {}
    go = threading.Event()

    def other() -> None:
        go.wait(5)
        seen["other"] = current_log_keys()

    thread = threading.Thread(target=other)
    thread.start()
    with invocation_log_context("run-c"):
        go.set()
        thread.join(5)
        seen["mine"] = current_log_keys()
    assert seen == {"other": {}, "mine": {"run_id": "run-c"}}


def test_a_raising_filter_input_never_drops_the_record() -> None:
    class Hostile(logging.LogRecord):
        frozen = False

        def __setattr__(self, name: str, value: Any) -> None:
            if self.frozen:
                raise RuntimeError("no")
            super().__setattr__(name, value)

    record = Hostile("x", logging.INFO, __file__, 1, "m", (), None)
    record.frozen = True
    with invocation_log_context("run-d"):
        assert LogContextFilter().filter(record) is True


def test_the_module_example_runs() -> None:
    import doctest

    from durable_agents.core import log_context

    results = doctest.testmod(log_context)
    assert results.attempted >= 1 and results.failed == 0
