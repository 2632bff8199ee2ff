"""Local mode on the embedded store (ADR 0026): the journal in SQLite, events in the process.

The same crashes as on the moto store: SIGKILL in the middle of a step, ``--crash-at``
between a provider's charge and the COMMIT, then the documented restart on the same state
directory. Nothing recorded runs again, nothing is charged twice. And one local mode per
state directory.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from durable_agents.core.clock import SystemClock
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents_local.embedded.store import DATABASE
from durable_agents_local.moto_server import free_port, port_is_free
from durable_agents_local.processes import WorkerProcess
from durable_agents_local.services import ServicesHandle
from durable_agents_local.verify import (
    crash_recovery_failures,
    prepared_at_crash_failures,
    sandwich_failures,
    step_starts,
)
from tests.integration.local_stack import wait_until
from tests.integration.local_workers import (
    ROOT,
    WORK_SECONDS,
    WORKER_ARGS,
    history,
    start_run,
    wait_for_status,
    wait_for_step_running,
)

pytestmark = pytest.mark.slow


class Stack:
    """Local mode on the embedded store of one state directory, started and restarted."""

    def __init__(self, state_dir: Path, env: dict[str, str] | None = None):
        self.state_dir = state_dir
        self.moto_port = free_port()
        self.env = {"EXAMPLE_WORK_SECONDS": WORK_SECONDS, **(env or {})}
        self.workers: list[WorkerProcess] = []

    def start(self, *args: str, wait: bool = True) -> WorkerProcess:
        worker = WorkerProcess(
            api_port=free_port(),
            moto_endpoint=None,
            args=[
                *WORKER_ARGS,
                "--store",
                "embedded",
                "--state-dir",
                str(self.state_dir),
                "--moto-port",
                str(self.moto_port),
                *args,
            ],
            cwd=ROOT,
            env=self.env,
        )
        self.workers.append(worker)
        if wait:
            worker.start()
        return worker

    def journal(self) -> SqliteJournal:
        """The journal, opened by this (another) process, as the CLI or a test may."""
        return SqliteJournal(self.state_dir / DATABASE)

    def close(self, failed: bool) -> None:
        if failed:
            for index, worker in enumerate(self.workers, start=1):
                print(f"--- worker {index} log ---", *worker.lines, sep="\n")
        for worker in self.workers:
            worker.stop()
        # The moto store a SIGKILLed worker left running is stopped by the next one; the last
        # one's by its clean stop. A leftover would hold the port: wait for it to go.
        wait_until(lambda: port_is_free(self.moto_port), 20, "the moto store to stop")


def test_a_run_finishes_and_the_banner_names_the_embedded_store(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "state")
    failed = True
    try:
        worker = stack.start()
        assert any("embedded SQLite" in line for line in worker.lines), list(worker.lines)
        run_id = start_run(worker, {"topic": "embedded", "sections": 2, "pause_seconds": 0})
        run = wait_for_status(worker, run_id, "SUCCEEDED", 30)
        assert run["result"]["topic"] == "embedded"
        assert (tmp_path / "state" / DATABASE).stat().st_mode & 0o777 == 0o600
        with stack.journal() as journal:
            assert journal.get_run(run_id).status.value == "SUCCEEDED"
        assert worker.stop() == 0
        failed = False
    finally:
        stack.close(failed)


def test_sigkill_mid_step_then_restart_runs_each_recorded_step_once(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "state")
    failed = True
    try:
        first = stack.start()
        run_id = start_run(first, {"topic": "crash", "sections": 3, "pause_seconds": 0})
        wait_for_step_running(first, run_id, "fetch-2", 30)
        first.kill()
        killed_at_ms = SystemClock().now_ms()

        second = stack.start()  # the documented restart: the same command
        wait_for_status(second, run_id, "SUCCEEDED", timeout=45)
        events = history(second, run_id)
        assert (
            crash_recovery_failures(events, killed_step="fetch-2", killed_at_ms=killed_at_ms) == []
        )
        assert step_starts(events) == {
            "plan": 1,
            "fetch-1": 1,
            "fetch-2": 2,
            "fetch-3": 1,
            "summarize": 1,
        }
        assert second.stop() == 0
        failed = False
    finally:
        stack.close(failed)


def test_a_killed_local_modes_claim_is_taken_over_at_once_not_after_its_lease(
    tmp_path: Path,
) -> None:
    # No --function-timeout: the claim's lease is the template's 240 s StepRunner timeout plus
    # a margin. The restarted local mode owns the store alone, so the dead one's claim is void.
    stack = Stack(tmp_path / "state", env={"EXAMPLE_WORK_SECONDS": "3"})
    failed = True
    try:
        first = stack.start("--function-timeout", "StepRunnerFunction=240")
        run_id = start_run(first, {"topic": "lease", "sections": 1, "pause_seconds": 0})
        wait_for_step_running(first, run_id, "fetch-1", 30)
        first.kill()
        second = stack.start("--function-timeout", "StepRunnerFunction=240")
        restarted = time.monotonic()
        wait_for_status(second, run_id, "SUCCEEDED", timeout=60)
        # The stall sweep (--stall-after 1) and a 3 s step again, not the 245 s lease.
        assert time.monotonic() - restarted < 30
        assert step_starts(history(second, run_id))["fetch-1"] == 2
        assert second.stop() == 0
        failed = False
    finally:
        stack.close(failed)


def test_crash_at_after_the_charge_then_restart_charges_exactly_once(tmp_path: Path) -> None:
    services = ServicesHandle.start_in_thread(state_file=tmp_path / "ledgers.json")
    stack = Stack(tmp_path / "state", env=services.env())
    failed = True
    try:
        doomed = stack.start("--crash-at", "charge-card:after_execute")
        run_id = start_run(
            doomed,
            {
                "order_id": "T-1",
                "customer": "cus_test",
                "email": "test@example.com",
                "items": {"tea": 2, "scone": 1},
            },
            agent="example-checkout",
        )
        assert doomed.wait(30) == -signal.SIGKILL
        with stack.journal() as journal:
            at_crash = journal.load(run_id)
        assert prepared_at_crash_failures(at_crash, services.ledger("payments")) == []

        second = stack.start()
        wait_for_status(second, run_id, "SUCCEEDED", timeout=45)
        with stack.journal() as journal:
            final = journal.load(run_id)
        assert (
            sandwich_failures(
                final,
                payments=services.ledger("payments"),
                tickets=services.ledger("tickets"),
                email=services.ledger("email"),
            )
            == []
        )
        assert len(services.ledger("payments")) == 1
        assert second.stop() == 0
        failed = False
    finally:
        stack.close(failed)
        services.stop()


def test_a_second_local_mode_on_the_same_state_dir_is_refused_and_touches_nothing(
    tmp_path: Path,
) -> None:
    stack = Stack(tmp_path / "state")
    failed = True
    try:
        first = stack.start()
        run_id = start_run(first, {"topic": "one", "sections": 1, "pause_seconds": 0})
        wait_for_status(first, run_id, "SUCCEEDED", 30)
        second = stack.start(wait=False)
        with pytest.raises(RuntimeError):
            second.start(timeout=30)
        assert second.wait(30) == 2
        text = "\n".join(second.lines)
        assert f"pid {first.pid}" in text, text
        assert "in use by another local mode" in text, text
        # The first one and its store go on as they were.
        wait_for_status(first, run_id, "SUCCEEDED", 5)
        run_2 = start_run(first, {"topic": "two", "sections": 1, "pause_seconds": 0})
        wait_for_status(first, run_2, "SUCCEEDED", 30)
        assert first.stop() == 0
        failed = False
    finally:
        stack.close(failed)


def test_ephemeral_embedded_store_leaves_nothing_behind(tmp_path: Path) -> None:
    before = {p.name for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("durable-agents-*")}
    worker = WorkerProcess(
        api_port=free_port(),
        moto_endpoint=None,
        args=[*WORKER_ARGS, "--store", "embedded", "--ephemeral", "--moto-port", str(free_port())],
        cwd=ROOT,
        env={"EXAMPLE_WORK_SECONDS": "0"},
    )
    try:
        worker.start()
        run_id = start_run(worker, {"topic": "gone", "sections": 1, "pause_seconds": 0})
        wait_for_status(worker, run_id, "SUCCEEDED", 30)
        assert worker.stop() == 0
    finally:
        worker.stop()
    time.sleep(0.1)
    after = {p.name for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("durable-agents-*")}
    assert after <= before


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _send(port: int, body: bytes) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("POST", "/runs", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_memory_stays_bounded_under_large_refused_bodies(tmp_path: Path) -> None:
    # Bodies the Api refuses (413 over its 256 KB JSON limit, 422 for an input of the wrong
    # type), ten at a time: each once stayed with the process (allocator.py, http_api.py),
    # hundreds of MiB after a few hundred requests.
    stack = Stack(tmp_path / "state")
    failed = True
    try:
        worker = stack.start()
        port = worker.api_port
        big = [b'{"agent": "example-research", "input": "' + b"x" * (n * 1024 * 1024) + b'"}'
               for n in (2, 5, 8)]  # fmt: skip
        wrong = json.dumps({"agent": "example-research", "input": "y" * 200_000}).encode()
        bodies = [big[i % 3] if i % 2 else wrong for i in range(240)]
        with ThreadPoolExecutor(10) as pool:
            list(pool.map(lambda body: _send(port, body), bodies[:20]))  # warm up
            before = _rss_kib(worker.pid)
            statuses = set(pool.map(lambda body: _send(port, body), bodies))
        assert statuses == {413, 422}, statuses
        grown_mib = (_rss_kib(worker.pid) - before) / 1024
        assert grown_mib < 64, f"local mode grew by {grown_mib:.0f} MiB"
        assert worker.stop() == 0
        failed = False
    finally:
        stack.close(failed)
