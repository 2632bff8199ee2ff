"""Worker processes for the local-mode tests: start one, start a run, poll it over HTTP.

Shared by ``test_local_mode.py`` and ``test_local_crash_recovery.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.processes import WorkerProcess, http_json
from tests.integration.local_stack import wait_until

ROOT = Path(__file__).resolve().parents[2]
WORK_SECONDS = "0.5"
# A 1 s StepRunner timeout gives a 6 s claim lease (1 s + the runtime's 5 s margin), and the
# reconciler re-drives a stalled run after 1 s: a killed step is retried ~6 s after its claim.
WORKER_ARGS = [
    "--function-timeout",
    "StepRunnerFunction=1",
    "--stall-after",
    "1",
    "--log-level",
    "ERROR",
]
AGENT = "example-research"


def start_worker(
    moto: MotoProcess, args: list[str] | None = None, env: dict[str, str] | None = None
) -> WorkerProcess:
    worker = WorkerProcess(
        api_port=free_port(),
        moto_endpoint=moto.endpoint,
        store_key=moto.store_key,
        args=WORKER_ARGS + (args or []),
        cwd=ROOT,
        env={"EXAMPLE_WORK_SECONDS": WORK_SECONDS, **(env or {})},
    )
    worker.start()
    return worker


def get(worker: WorkerProcess, path: str) -> tuple[int, Any]:
    return http_json("GET", f"{worker.base_url}{path}")


def start_run(worker: WorkerProcess, input_value: Any, agent: str = AGENT) -> str:
    status, body = http_json(
        "POST", f"{worker.base_url}/runs", {"agent": agent, "input": input_value}
    )
    assert status == 201, body
    return str(body["run"]["run_id"])


def wait_for_status(worker: WorkerProcess, run_id: str, wanted: str, timeout: float) -> Any:
    def check() -> Any:
        status, run = get(worker, f"/runs/{run_id}")
        assert status == 200, run
        if run["status"] == wanted:
            return run
        assert run["status"] not in ("FAILED", "PAUSED"), run  # ended otherwise: say how
        return None

    return wait_until(check, timeout, f"run {run_id} to be {wanted}")


def history(worker: WorkerProcess, run_id: str) -> list[dict[str, Any]]:
    status, body = get(worker, f"/runs/{run_id}/history")
    assert status == 200, body
    return list(body["events"])


def wait_for_step_running(worker: WorkerProcess, run_id: str, step: str, timeout: float) -> None:
    """Waits until ``step`` of the run has started and not finished (a kill lands mid-step).

    Raises:
        AssertionError: If it finished first, or did not start within ``timeout``.
    """

    def running() -> bool:
        events = history(worker, run_id)
        assert not any(e["event"] == "step_succeeded" and e["name"] == step for e in events), (
            f"{step} finished before the kill"
        )
        return any(e["event"] == "step_started" and e["name"] == step for e in events)

    wait_until(running, timeout, f"{step} to start")
