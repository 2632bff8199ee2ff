"""Restarting local mode after it was killed: it takes over the store it left running.

``durable-agents local`` starts its store in a process of its own (so that the journal
survives a crash of the worker). A SIGKILL to local mode, or ``--crash-at``, leaves that store
running on its port; the documented restart (the same command) must then go on with it —
same journal, same key — instead of failing on the port, and stop it when it stops.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from durable_agents_local.moto_server import free_port, is_listening, port_is_free
from durable_agents_local.processes import WorkerProcess
from tests.integration.local_stack import wait_until
from tests.integration.local_workers import ROOT, WORKER_ARGS, start_run, wait_for_status

pytestmark = pytest.mark.slow


def _local(moto_port: int, *store: str) -> WorkerProcess:
    worker = WorkerProcess(
        api_port=free_port(),
        moto_endpoint=None,
        # The moto store's leftover process is what this tests (the embedded store's restart:
        # test_local_embedded.py).
        args=[*WORKER_ARGS, "--store", "moto", "--moto-port", str(moto_port), *store],
        cwd=ROOT,
        env={"EXAMPLE_WORK_SECONDS": "0"},
    )
    worker.start()
    return worker


def _store_pids(moto_port: int) -> set[int]:
    """Processes serving a local store on this port (Linux: read from /proc)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"durable_agents_local.moto_server" in argv and str(moto_port).encode() in argv:
            pids.add(int(entry.name))
    return pids


@pytest.mark.parametrize("store", ["state-dir", "ephemeral"])
def test_a_restart_after_sigkill_goes_on_with_the_store_left_running(
    tmp_path: Path, store: str
) -> None:
    moto_port = free_port()
    flags = ["--state-dir", str(tmp_path / "state")] if store == "state-dir" else ["--ephemeral"]
    first = _local(moto_port, *flags)
    try:
        run_id = start_run(first, {"topic": "restart", "sections": 1, "pause_seconds": 0})
        wait_for_status(first, run_id, "SUCCEEDED", 60)
        left = _store_pids(moto_port)
        assert len(left) == 1, left
        first.kill()  # SIGKILL: the store is left running on its port
        assert is_listening("127.0.0.1", moto_port)

        again = _local(moto_port, *flags)  # the documented restart: the same command
        try:
            assert any("left running" in line for line in again.lines), list(again.lines)
            wait_for_status(again, run_id, "SUCCEEDED", 10)  # the same journal
        finally:
            again.stop()  # SIGTERM: it stops the store it took over too
        wait_until(lambda: port_is_free(moto_port), 20, "the store to stop")
        wait_until(lambda: not _store_pids(moto_port), 20, "the store process to exit")
    finally:
        for pid in _store_pids(moto_port):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
