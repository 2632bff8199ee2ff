"""``ctx.memory`` in local mode: the StepRunner's MEMORY_TABLE, a preference across two runs."""

from __future__ import annotations

import pytest

from durable_agents.local.moto_server import MotoProcess
from tests.integration.local_workers import start_run, start_worker, wait_for_status

pytestmark = pytest.mark.slow


def test_a_preference_learned_in_one_run_is_used_in_the_next(moto: MotoProcess) -> None:
    worker = start_worker(moto, ["--agents", "agents.example,tests.integration.memory_agent"])
    try:
        first = start_run(
            worker, {"user": "alice", "question": "hi", "prefer": "brief"}, "memory-concierge"
        )
        assert wait_for_status(worker, first, "SUCCEEDED", 60)["result"] == "[brief] hi"
        second = start_run(worker, {"user": "alice", "question": "news?"}, "memory-concierge")
        assert wait_for_status(worker, second, "SUCCEEDED", 60)["result"] == "[brief] news?"
    finally:
        worker.stop()
