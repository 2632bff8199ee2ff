"""Runs that outlive deploys, in local mode over real HTTP (issue 11's acceptance).

Three v1 runs wait for a person. Then, one deploy after another on the same store:

1. v1 and v2 side by side: a v1 run approved finishes on v1; a chosen run is migrated to v2
   over the Api (its recorded ticket transformed) and finishes on v2; a new run starts on v2.
2. only v2: the third v1 run, approved, shows ``VERSION_UNAVAILABLE`` naming version 1.
3. v1 back: that run resumes by itself (the reconciler's sweep) and finishes on v1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from durable_agents_local.moto_server import MotoProcess
from durable_agents_local.processes import WorkerProcess, http_json
from tests.integration.local_stack import wait_until
from tests.integration.local_workers import start_run, start_worker
from tests.integration.versions_v1 import APPROVER

pytestmark = pytest.mark.slow

V1 = "tests.integration.versions_v1"
V2 = "tests.integration.versions_v2"
TIMEOUT = 60.0
SWEEP = ["--schedule-interval", "0.5"]


@contextmanager
def deployed(moto: MotoProcess, *modules: str) -> Iterator[WorkerProcess]:
    worker = start_worker(moto, ["--agents", ",".join(modules), *SWEEP])
    try:
        yield worker
    finally:
        worker.stop()


def run_of(worker: WorkerProcess, run_id: str) -> dict[str, Any]:
    status, run = http_json("GET", f"{worker.base_url}/runs/{quote(run_id)}")
    assert status == 200, run
    return dict(run)


def wait_status(worker: WorkerProcess, run_id: str, wanted: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        run = run_of(worker, run_id)
        assert run["status"] not in ("FAILED", "PAUSED"), run
        return run if run["status"] == wanted else None

    return wait_until(check, TIMEOUT, f"run {run_id} to be {wanted}")


def pending_approval(worker: WorkerProcess, run_id: str) -> str:
    def find() -> str | None:
        status, listed = http_json("GET", f"{worker.base_url}/approvals?status=pending")
        assert status == 200, listed
        mine = [a["approval_id"] for a in listed["approvals"] if a["run_id"] == run_id]
        return mine[0] if mine else None

    return wait_until(find, TIMEOUT, f"run {run_id}'s approval")


def approve(worker: WorkerProcess, run_id: str) -> None:
    aid = pending_approval(worker, run_id)
    status, minted = http_json(
        "POST", f"{worker.base_url}/approvals/{quote(aid)}/links", {"approver": APPROVER}
    )
    assert status == 201, minted
    token = parse_qs(urlsplit(minted["url"]).query)["token"][0]
    status, decided = http_json(
        "POST",
        f"{worker.base_url}/links/approvals/{quote(aid)}",
        {"token": token, "decision": "approve", "comment": "ok"},
    )
    assert status == 200, decided


def test_v2_deployed_beside_v1_a_migration_and_a_version_that_comes_back(
    moto: MotoProcess,
) -> None:
    with deployed(moto, V1) as first:
        runs = [start_run(first, order, "versioned") for order in ("A", "B", "C")]
        for run_id in runs:
            pending_approval(first, run_id)
            assert run_of(first, run_id)["versions"]["workflow_version"] == "1"
    finishes_on_v1, migrated, waits_for_v1 = runs

    with deployed(moto, V1, V2) as both:
        approve(both, finishes_on_v1)
        done = wait_status(both, finishes_on_v1, "SUCCEEDED")
        assert done["result"] == {"ticket": {"id": "T-A"}, "closed_by": "v1"}

        status, answer = http_json(
            "POST", f"{both.base_url}/runs/{quote(migrated)}/migrate", {"to_version": "2"}
        )
        assert status == 200, answer
        assert answer["committed"] is True
        assert answer["run"]["versions"]["workflow_version"] == "2"
        assert answer["migration"]["replays"] == ["open-ticket", "approve"]
        approve(both, migrated)
        moved = wait_status(both, migrated, "SUCCEEDED")
        assert moved["result"] == {
            "ticket": {"id": "T-B", "priority": "normal"},
            "closed_by": "v2",
            "note": "closed at priority normal",
        }
        status, history = http_json("GET", f"{both.base_url}/runs/{quote(migrated)}/history")
        assert status == 200, history
        assert [e["event"] for e in history["events"]].count("run_migrated") == 1

        fresh = start_run(both, "D", "versioned")
        pending_approval(both, fresh)
        assert run_of(both, fresh)["versions"]["workflow_version"] == "2"

    with deployed(moto, V2) as only_v2:
        approve(only_v2, waits_for_v1)
        parked = wait_status(only_v2, waits_for_v1, "VERSION_UNAVAILABLE")
        assert parked["waiting_on"]["kind"] == "version"
        assert parked["waiting_on"]["version"] == "1"
        assert parked["waiting_on"]["deployed"] == ["2"]
        assert "'1'" in parked["error"]["message"]

    with deployed(moto, V1, V2) as back:
        resumed = wait_status(back, waits_for_v1, "SUCCEEDED")  # nobody asked: the sweep did
        assert resumed["result"] == {"ticket": {"id": "T-C"}, "closed_by": "v1"}
