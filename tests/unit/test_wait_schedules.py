"""Precise wait deadlines: one-time EventBridge Scheduler schedules that invoke the Reconciler."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.reconciler import expire_wait
from durable_agents.aws.scheduler import EventBridgeWaitScheduler
from durable_agents.engine.operations.approval import ApprovalTimeoutError
from durable_agents.engine.operations.callback import heartbeat
from durable_agents.journal.memory import InMemoryJournal
from durable_agents_local.testing import AgentTestRunner

TARGET = "arn:aws:lambda:us-east-1:123456789012:function:reconciler"
ROLE = "arn:aws:iam::123456789012:role/wait-scheduler"


@agent(name="asker", version="1", registry=AgentRegistry())
def asker(ctx: DurableContext, _: None) -> str:
    try:
        ctx.wait_for_approval("go", request={"x": 1}, approvers=["group:ops"], timeout=90.5)
    except ApprovalTimeoutError:
        return "timed out"
    return "decided"


@agent(name="pinger", version="1", registry=AgentRegistry())
def pinger(ctx: DurableContext, _: None) -> Any:
    return ctx.create_callback("job", timeout=3600, heartbeat_timeout=60).result()


@pytest.fixture
def scheduler(aws: None) -> Any:
    client = boto3.client("scheduler", region_name="us-east-1")
    client.create_schedule_group(Name="stack-waits")
    return client


def schedules(client: Any) -> dict[str, dict[str, Any]]:
    names = [s["Name"] for s in client.list_schedules(GroupName="stack-waits")["Schedules"]]
    return {n: client.get_schedule(Name=n, GroupName="stack-waits") for n in names}


def runner_for(definition: Any, client: Any) -> AgentTestRunner:
    runner = AgentTestRunner(definition, journal=InMemoryJournal(), mode="faithful")
    runner.runtime.wait_scheduler = EventBridgeWaitScheduler(
        client, group="stack-waits", target_arn=TARGET, role_arn=ROLE
    )
    return runner


def test_an_approval_deadline_gets_a_one_time_schedule(scheduler: Any) -> None:
    runner = runner_for(asker, scheduler)
    result = runner.run(None)
    (record,) = runner.pending_waits(result.run_id, "approval")
    (schedule,) = schedules(scheduler).values()
    assert schedule["Name"] == record.wait_id
    deadline_s = -(-(record.deadline_ms or 0) // 1000)  # rounded up, never early
    from datetime import UTC, datetime

    at = datetime.fromtimestamp(deadline_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert schedule["ScheduleExpression"] == f"at({at})"
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["Target"]["Arn"] == TARGET and schedule["Target"]["RoleArn"] == ROLE
    assert json.loads(schedule["Target"]["Input"]) == {"wait_id": record.wait_id}

    # The schedule fires (the Reconciler gets {"wait_id"}): too early does nothing, on time
    # expires it, and the run sees the timeout.
    assert expire_wait(runner.runtime, record.wait_id) is False
    runner.clock.advance(91_000)
    assert expire_wait(runner.runtime, record.wait_id) is True
    assert expire_wait(runner.runtime, record.wait_id) is False  # a second firing is a no-op
    assert runner.resume(result.run_id).output == "timed out"


def test_a_heartbeat_moves_the_schedule(scheduler: Any) -> None:
    runner = runner_for(pinger, scheduler)
    result = runner.run(None)
    (record,) = runner.pending_waits(result.run_id, "callback")
    before = schedules(scheduler)[record.wait_id]["ScheduleExpression"]
    runner.clock.advance(30_000)
    beat = heartbeat(runner.journal, runner.clock, record)
    runner.runtime.wait_scheduler.schedule(beat.wait_id, beat.due_at_ms or 0)  # as the Api does
    after = schedules(scheduler)[record.wait_id]["ScheduleExpression"]
    assert before != after  # 30 s later
    assert expire_wait(runner.runtime, record.wait_id) is False


def test_scheduler_failures_are_not_fatal(aws: None) -> None:
    client = boto3.client("scheduler", region_name="us-east-1")  # no group: every call fails
    runner = runner_for(asker, client)
    assert runner.run(None).status == "SUSPENDED"  # the sweep is the safety net


@agent(name="napper", version="1", registry=AgentRegistry())
def napper(ctx: DurableContext, _: None) -> str:
    ctx.wait(120, name="nap")
    return "rested"


def test_a_run_timer_gets_a_wake_up_schedule(scheduler: Any) -> None:
    from durable_agents.admin.reconciler import wake_run

    runner = runner_for(napper, scheduler)
    runtime = runner.runtime
    run, _ = runtime.start_run("napper", None)
    assert runtime.execute(run.run_id).kind.value == "suspended"  # the timer is armed
    (schedule,) = schedules(scheduler).values()
    assert schedule["Name"].startswith("wake-")
    assert json.loads(schedule["Target"]["Input"]) == {"run_id": run.run_id}
    assert wake_run(runtime, run.run_id) is False  # not due yet
    runner.clock.advance(120_000)
    assert wake_run(runtime, run.run_id) is True
    assert runner.publisher.events[-1].detail == {"run_id": run.run_id, "reason": "timer"}
    assert runtime.execute(run.run_id).kind.value == "succeeded"
    assert wake_run(runtime, run.run_id) is False  # finished: nothing to wake
