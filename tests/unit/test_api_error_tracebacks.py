"""The Api shows a failure's recorded traceback: in a run's history and on the run (issue 33)."""

from __future__ import annotations

from typing import Any

import boto3

from durable_agents import NO_RETRY, AgentRegistry, DurableContext, agent
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.testing import AgentTestRunner
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api import call


def parse_order() -> None:
    raise ValueError("no such order")


def test_the_history_and_the_run_carry_the_recorded_traceback(deployment: Deployment) -> None:
    @agent(name="parser", version="1", registry=AgentRegistry())
    def parser(ctx: DurableContext, _: Any) -> None:
        ctx.step(parse_order, name="parse", retry=NO_RETRY)

    journal = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    result = AgentTestRunner(parser, journal=journal).run(None)
    assert result.status == "FAILED"
    status, history = call("GET", f"/runs/{result.run_id}/history")
    assert status == 200
    (failed,) = [e for e in history["events"] if e["event"] == "step_failed"]
    story = failed["error"]["traceback"]
    line = parse_order.__code__.co_firstlineno + 1
    assert f'test_api_error_tracebacks.py", line {line}, in parse_order' in story
    assert story.rstrip().endswith("ValueError: no such order")
    (finished,) = [e for e in history["events"] if e["event"] == "run_failed"]
    status, run = call("GET", f"/runs/{result.run_id}")
    assert status == 200
    assert run["error"]["traceback"] == finished["error"]["traceback"]
    assert "in parser" in run["error"]["traceback"]
