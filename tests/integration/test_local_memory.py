"""``ctx.memory`` in local mode: the example concierge learns a preference in one run and uses
it in the next, over real HTTP, with the StepRunner's MEMORY_TABLE (template's AGENT_MODULES)."""

from __future__ import annotations

import pytest

from durable_agents_local.moto_server import MotoProcess
from tests.integration.local_workers import start_run, start_worker, wait_for_status

pytestmark = pytest.mark.slow


def test_the_concierge_learns_a_preference_in_one_run_and_uses_it_in_the_next(
    moto: MotoProcess,
) -> None:
    worker = start_worker(moto)
    try:
        told = start_run(
            worker,
            {"user": "alice", "question": "Is it late?", "prefer": "brief"},
            "example-concierge",
        )
        first = wait_for_status(worker, told, "SUCCEEDED", 60)["result"]
        assert first["style"] == "brief" and first["learned"] is True
        asked = start_run(worker, {"user": "alice", "question": "Any news?"}, "example-concierge")
        second = wait_for_status(worker, asked, "SUCCEEDED", 60)["result"]
        assert second == {
            "style": "brief",
            "learned": False,
            "answer": "In short: Any news? Yes.",
        }
    finally:
        worker.stop()
