"""Part 1 of the demo (``scripts/demo.py``): a worker killed with SIGKILL mid-step."""

from __future__ import annotations

from demo_common import NewWorker, banner, print_checks, say, wait_for_running_step, wait_for_status

from durable_agents.core.clock import SystemClock
from durable_agents_local.console import (
    history_table,
)
from durable_agents_local.moto_server import MotoProcess
from durable_agents_local.processes import http_json
from durable_agents_local.runs import RunsClient
from durable_agents_local.verify import (
    crash_recovery_failures,
    step_starts,
)

KILLED_STEP = "fetch-2"
WORKER_ARGS = [
    "--function-timeout",
    "StepRunnerFunction=4",  # claim lease = 4 s + 5 s margin
    "--stall-after",
    "2",
    "--log-level",
    "ERROR",
]
RUN_INPUT = {"topic": "durable execution", "sections": 3, "pause_seconds": 1}
FINISH_TIMEOUT = 90.0


def part_one(moto: MotoProcess, new_worker: NewWorker) -> bool:
    clock = SystemClock()
    print("durable-agents demo, part 1 of 5: a worker is killed with SIGKILL in the middle of")
    print("a step.")
    print("The journal (DynamoDB, here in a moto process) keeps every recorded step; the next")
    print("worker replays them from the journal and runs only what was not finished.")
    banner("1/5", "starting the journal (moto) and a worker")
    moto.start()
    say(f"moto server (DynamoDB, S3, EventBridge, SQS): {moto.endpoint}, pid {moto.pid}")
    first = new_worker("worker 1", WORKER_ARGS)
    say(f"worker 1: {first.base_url}, pid {first.pid}")

    banner("2/5", f"POST /runs: agent example-research, input {RUN_INPUT}")
    status, body = http_json(
        "POST", f"{first.base_url}/runs", {"agent": "example-research", "input": RUN_INPUT}
    )
    if status != 201:
        raise RuntimeError(f"POST /runs answered {status}: {body}")
    run_id = body["run"]["run_id"]
    say(f"run {run_id} started; waiting for step {KILLED_STEP} to be running …")
    wait_for_running_step(first.base_url, run_id, KILLED_STEP, timeout=30)

    banner("3/5", f"kill -9 worker 1 (pid {first.pid}) while {KILLED_STEP} is running")
    first.kill()
    killed_at_ms = clock.now_ms()
    say(f"worker 1 is gone (SIGKILL). The journal in moto still holds run {run_id}:")
    done = RunsClient(moto.endpoint, store_key=moto.store_key).history(run_id)[0]["events"]
    finished = [e["name"] for e in done if e["event"] == "step_succeeded"]
    say(f"  recorded steps: {', '.join(finished)}; {KILLED_STEP}: started, no result")

    banner("4/5", "starting worker 2 (it finds the run in the journal)")
    second = new_worker("worker 2", WORKER_ARGS)
    say(f"worker 2: {second.base_url}, pid {second.pid}")
    say("recorded steps are replayed from the journal, never run again; the claim on")
    say(f"{KILLED_STEP} expires (4 s timeout + 5 s margin), then it runs as attempt 2 …")
    wait_for_status(second.base_url, run_id, "SUCCEEDED", FINISH_TIMEOUT)
    say(f"run {run_id} SUCCEEDED")

    banner("5/5", "the run's timeline, read from the journal")
    events = RunsClient(moto.endpoint, store_key=moto.store_key).history(run_id)[0]["events"]
    print(history_table(events))
    failures = crash_recovery_failures(events, killed_step=KILLED_STEP, killed_at_ms=killed_at_ms)
    starts = ", ".join(f"{name} x{count}" for name, count in step_starts(events).items())
    print(f"\nstep_started per step: {starts}")
    return print_checks(
        [
            "the run SUCCEEDED",
            "every operation has exactly one result",
            f"every step started once, except {KILLED_STEP}: attempt 1 interrupted by the "
            "kill, attempt 2 completed",
            "no step recorded before the kill ran again after the restart",
        ],
        failures,
    )
