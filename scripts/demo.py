"""The durable-agents demo: kill -9 the worker in the middle of a step; nothing is lost.

What it does (no AWS account, no Docker; about 30 s):

1. starts a moto server process (the journal lives there) and a worker process
   (``durable-agents local``), on free loopback ports;
2. starts a run of the example agent ``example-research`` over HTTP;
3. waits until step ``fetch-2`` is running, then kills the worker with SIGKILL;
4. starts a new worker, which picks the run up where the journal says it is;
5. prints the run's timeline and checks, from the journal, that every recorded step ran
   exactly once and only the interrupted step ran again.

Exit status 0 only if every check holds. Run it with ``make demo``.
"""

from __future__ import annotations

import signal
import sys
import time
import urllib.error
from pathlib import Path
from typing import Any

from durable_agents.clock import SystemClock
from durable_agents.local.console import history_table
from durable_agents.local.moto_server import MotoProcess, free_port
from durable_agents.local.processes import WorkerProcess, http_json
from durable_agents.local.runs import RunsClient
from durable_agents.local.verify import crash_recovery_failures, step_starts

ROOT = Path(__file__).resolve().parent.parent
KILLED_STEP = "fetch-2"
WORK_SECONDS = "1"  # each fetch/summarize step sleeps this long: time to kill it mid-step
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


BOLD, PLAIN = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")


def banner(step: str, text: str) -> None:
    print(f"\n{BOLD}[{step}] {text}{PLAIN}", flush=True)


def say(text: str) -> None:
    print(f"      {text}", flush=True)


def worker_line(prefix: str) -> Any:
    def show(line: str) -> None:
        # The demo's own polling (GET requests) would drown the interesting lines.
        if "ApiFunction" in line and " GET " in line:
            return
        print(f"      {prefix} │ {line}", flush=True)

    return show


def history(base_url: str, run_id: str) -> list[dict[str, Any]]:
    status, body = http_json("GET", f"{base_url}/runs/{run_id}/history")
    if status != 200:
        raise RuntimeError(f"GET history answered {status}: {body}")
    return list(body["events"])


def wait_for_running_step(base_url: str, run_id: str, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = history(base_url, run_id)
        started = any(e["event"] == "step_started" and e.get("name") == name for e in events)
        finished = any(e.get("name") == name and e["event"] == "step_succeeded" for e in events)
        if finished:
            raise RuntimeError(f"{name} finished before it could be interrupted")
        if started:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not start within {timeout} s")


def wait_for_status(base_url: str, run_id: str, wanted: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    run: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            status, run = http_json("GET", f"{base_url}/runs/{run_id}")
        except (urllib.error.URLError, ConnectionError):
            status = 0
        if status == 200 and run["status"] == wanted:
            return run
        if status == 200 and run["status"] in ("FAILED", "PAUSED"):
            raise RuntimeError(f"the run ended {run['status']}: {run.get('error')}")
        time.sleep(0.2)
    raise RuntimeError(f"the run is not {wanted} after {timeout} s (last: {run.get('status')})")


def demo() -> int:
    started = time.monotonic()
    clock = SystemClock()
    moto = MotoProcess(free_port())
    env = {"EXAMPLE_WORK_SECONDS": WORK_SECONDS}
    workers: list[WorkerProcess] = []

    def new_worker(label: str) -> WorkerProcess:
        worker = WorkerProcess(
            api_port=free_port(),
            moto_endpoint=moto.endpoint,
            args=WORKER_ARGS,
            cwd=ROOT,
            env=env,
            on_line=worker_line(label),
        )
        workers.append(worker)
        worker.start()
        return worker

    print("durable-agents demo: a worker is killed with SIGKILL in the middle of a step.")
    print("The journal (DynamoDB, here in a moto process) keeps every recorded step; the next")
    print("worker replays them from the journal and runs only what was not finished.")
    try:
        banner("1/5", "starting the journal (moto) and a worker")
        moto.start()
        say(f"moto server (DynamoDB, S3, EventBridge, SQS): {moto.endpoint}, pid {moto.pid}")
        first = new_worker("worker 1")
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
        done = RunsClient(moto.endpoint).history(run_id)[0]["events"]
        finished = [e["name"] for e in done if e["event"] == "step_succeeded"]
        say(f"  recorded steps: {', '.join(finished)}; {KILLED_STEP}: started, no result")

        banner("4/5", "starting worker 2 (it finds the run in the journal)")
        second = new_worker("worker 2")
        say(f"worker 2: {second.base_url}, pid {second.pid}")
        say("recorded steps are replayed from the journal, never run again; the claim on")
        say(f"{KILLED_STEP} expires (4 s timeout + 5 s margin), then it runs as attempt 2 …")
        wait_for_status(second.base_url, run_id, "SUCCEEDED", FINISH_TIMEOUT)
        say(f"run {run_id} SUCCEEDED")

        banner("5/5", "the run's timeline, read from the journal")
        events = RunsClient(moto.endpoint).history(run_id)[0]["events"]
        print(history_table(events))
        failures = crash_recovery_failures(
            events, killed_step=KILLED_STEP, killed_at_ms=killed_at_ms
        )
        starts = ", ".join(f"{name} x{count}" for name, count in step_starts(events).items())
        print(f"\nstep_started per step: {starts}")
        elapsed = time.monotonic() - started
        if failures:
            print("\nFAILED checks:")
            for failure in failures:
                print(f"  ✗ {failure}")
            return 1
        for check in (
            "the run SUCCEEDED",
            "every operation has exactly one result",
            f"every step started once, except {KILLED_STEP}: attempt 1 interrupted by the "
            "kill, attempt 2 completed",
            "no step recorded before the kill ran again after the restart",
        ):
            print(f"  ✓ {check}")
        print(f"\ndemo passed in {elapsed:.1f} s")
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the demo reports any failure and exits 1
        print(f"\ndemo FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        for worker in workers:
            worker.stop()
        moto.stop()


if __name__ == "__main__":
    # A plain `kill` also cleans up the child processes (SystemExit runs the finally block).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(demo())
