"""Re-run after the fix without paying twice, in local mode over real HTTP (issue 35's acceptance).

An agent charges a card through the fake payments service, then fails in a later step because
of a bug (version 1). After the fix is deployed (local mode restarted with versions 1 to 3 on
the same store):

* a rerun from the failed operation (version 2) succeeds; the payments ledger shows one charge;
* a rerun from the start (version 2) reuses the charge: still one;
* a rerun whose code asks a different amount (version 3) puts that charge in review, charging
  nothing until a person decides;
* a rerun with ``repeat_effects`` lists the charge it repeats (dry run first), then charges
  again: two.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from durable_agents_local.processes import WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle
from tests.integration.local_workers import start_run, wait_for_status
from tests.integration.test_local_embedded import Stack

pytestmark = pytest.mark.slow

V1 = "tests.integration.rerun_shop_v1"
FIXES = ",".join(f"tests.integration.rerun_shop_v{n}" for n in (1, 2, 3))
ORDER = {"customer": "cus_rerun", "cents": 1250}


def rerun(worker: WorkerProcess, run_id: str, body: dict[str, Any]) -> tuple[int, Any]:
    return http_json("POST", f"{worker.base_url}/runs/{quote(run_id)}/rerun", body)


def started(worker: WorkerProcess, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = rerun(worker, run_id, body)
    assert status == 201, answer
    assert answer["run"]["rerun_of"] == run_id
    return dict(answer)


def test_rerun_after_the_fix_never_pays_twice_unless_asked(tmp_path: Path) -> None:
    services = ServicesHandle.start_in_thread(state_file=tmp_path / "ledgers.json")
    stack = Stack(tmp_path / "state", env=services.env())
    failed = True
    try:
        buggy = stack.start("--agents", V1)
        original = start_run(buggy, ORDER, agent="rerun-shop")
        run = wait_for_status(buggy, original, "FAILED", timeout=45)
        assert run["error"]["type"] == "KeyError"
        assert len(services.ledger("payments")) == 1
        assert buggy.stop() == 0

        fixed = stack.start("--agents", FIXES)
        # From the failed operation: the charge replays from the copy.
        answer = started(fixed, original, {"from": "failed", "version": "2"})
        assert answer["rerun"]["rerun_from"] == "ship:3"
        done = wait_for_status(fixed, answer["run"]["run_id"], "SUCCEEDED", timeout=45)
        assert done["result"]["label"] == "LBL-1"
        assert len(services.ledger("payments")) == 1

        # From the start: the charge is reused from the ledger, not made again.
        answer = started(fixed, original, {"from": "start", "version": "2"})
        assert [e["tool"] for e in answer["reusable_effects"]] == ["charge-card"]
        done = wait_for_status(fixed, answer["run"]["run_id"], "SUCCEEDED", timeout=45)
        assert len(services.ledger("payments")) == 1
        assert done["result"]["charge_id"] == run_charge(services)

        # Fixed code that asks another amount: a person decides first; nothing is charged.
        answer = started(fixed, original, {"from": "start", "version": "3"})
        wait_for_status(fixed, answer["run"]["run_id"], "PAUSED", timeout=45)
        status, reviews = http_json("GET", f"{fixed.base_url}/reviews")
        assert status == 200, reviews
        (review,) = [r for r in reviews["reviews"] if r["run_id"] == answer["run"]["run_id"]]
        assert "already did charge-card" in review["note"]["reason"]
        assert '"amount_cents":1350' in review["note"]["reason"]
        assert len(services.ledger("payments")) == 1

        # repeat_effects: listed first (a dry run writes nothing), then charged again.
        status, dry = rerun(
            fixed, original, {"from": "start", "version": "2", "repeat_effects": True,
                              "dry_run": True},
        )  # fmt: skip
        assert status == 200 and dry["dry_run"] is True, dry
        (repeated,) = dry["repeated_effects"]
        assert repeated["tool"] == "charge-card"
        assert repeated["request"]["amount_cents"] == 1250
        assert len(services.ledger("payments")) == 1
        answer = started(fixed, original, {"from": "start", "version": "2", "repeat_effects": True})
        wait_for_status(fixed, answer["run"]["run_id"], "SUCCEEDED", timeout=45)
        assert len(services.ledger("payments")) == 2
        assert fixed.stop() == 0
        failed = False
    finally:
        stack.close(failed)
        services.stop()


def run_charge(services: ServicesHandle) -> str:
    (event,) = services.ledger("payments")
    return str(event["data"]["charge"]["charge_id"])
