"""The agents' own logger (``ctx.logger``): a child of the function's, at ``AGENT_LOG_LEVEL``.

Deployed, an agent's INFO line is a Powertools JSON line with the run, agent and operation as
keys, written once although later invocations replay the code that wrote it, while the
runtime's own INFO lines stay hidden at ``LOG_LEVEL=WARNING``.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from durable_agents.core.observability import agent_logger, agent_loggers
from durable_agents.errors import ConfigurationError
from tests.unit.conftest import Deployment, FakeLambdaContext
from tests.unit.test_api import GOOD, start
from tests.unit.test_step_runner import step_event
from tests.unit.test_step_runner_telemetry import json_lines


@pytest.fixture
def restored_level() -> Iterator[None]:
    """The test's agent loggers are left at the level they had."""
    saved = {each.name: each.level for each in agent_loggers()}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("restored_level")
def test_the_agent_logger_is_a_child_at_its_own_level() -> None:
    made = agent_logger("test-service-a", {})
    assert made.name == "test-service-a.agent"
    assert made.level == logging.INFO  # INFO by default, whatever LOG_LEVEL says
    assert agent_logger("test-service-a", {"AGENT_LOG_LEVEL": "debug"}).level == logging.DEBUG
    assert made in agent_loggers()


def test_a_level_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="AGENT_LOG_LEVEL='LOUD' is not a level"):
        agent_logger("test-service-b", {"AGENT_LOG_LEVEL": "loud"})


def test_deployed_the_agents_info_line_is_json_once_and_the_runtimes_info_is_hidden(
    deployment: Deployment,
) -> None:
    from step_runner import app

    # LOG_LEVEL=WARNING, as deployed by default: the runtime's "invocation finished" is INFO.
    # What the function's handler writes (its stream is the stdout of when it was imported).
    previous, written = app.logger.log_level, io.StringIO()
    app.logger.setLevel(logging.WARNING)
    stream = app.logger.registered_handler.setStream(written)
    try:
        first, run_id = _two_invocations(app)
    finally:
        app.logger.setLevel(previous)
        app.logger.registered_handler.setStream(stream)
    lines = json_lines(written.getvalue())
    assert first["agent"] == GOOD["agent"]
    planned = [line for line in lines if line.get("message") == "planned 1 sections"]
    assert len(planned) == 1, lines
    (line,) = planned
    assert (line["level"], line["run_id"], line["agent"]) == ("INFO", run_id, GOOD["agent"])
    assert line["location"].startswith("example.py:research:")  # the agent's own line
    assert not [each for each in lines if each.get("message") == "invocation finished"], lines


def _two_invocations(app: Any) -> tuple[dict[str, Any], str]:
    _, body = start({**GOOD, "input": {"topic": "t", "sections": 1, "pause_seconds": 0}})
    run_id = body["run"]["run_id"]
    first = app.handler(step_event(run_id), FakeLambdaContext())
    app.handler(step_event(run_id), FakeLambdaContext())  # replays plan: and its log line
    return first, run_id
