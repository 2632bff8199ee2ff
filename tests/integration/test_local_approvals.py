"""Approvals in local mode over real HTTP: a pending approval survives a restart; racing decisions.

The support agent's refund waits for ``group:support-leads``; locally nobody signs in, so the
decision goes through a signed link (the IAM routes' local principal is not an approver). The
journal and the link key live in the moto server process, so a new worker on the same moto
carries on with a link minted by the one before it.
"""

from __future__ import annotations

import signal
import threading
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from durable_agents_local.moto_server import MotoProcess
from durable_agents_local.no_redirects import OPENER
from durable_agents_local.processes import WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle
from tests.integration.local_stack import wait_until, workers

pytestmark = pytest.mark.slow

MESSAGE = {"customer": "cus-ada", "message": "My order A-1001 arrived broken, I want a refund"}
LEADS = "group:support-leads"
RACERS = 10


def run_status(worker: WorkerProcess, run_id: str) -> dict[str, Any]:
    status, run = http_json("GET", f"{worker.base_url}/runs/{run_id}")
    assert status == 200, run
    assert run["status"] not in ("FAILED", "PAUSED"), run
    return dict(run)


def suspended_on_approval(worker: WorkerProcess) -> tuple[str, str]:
    """Starts a support run and waits until it is SUSPENDED on its refund approval."""
    status, body = http_json(
        "POST", f"{worker.base_url}/runs", {"agent": "example-support", "input": MESSAGE}
    )
    assert status == 201, body
    run_id = body["run"]["run_id"]

    def settled() -> str | None:
        # SUSPENDED is transient while the parallel create-ticket branch still runs: wait for
        # the approval, the ticket and the suspension.
        status, listed = http_json("GET", f"{worker.base_url}/approvals?status=pending")
        assert status == 200, listed
        mine = [a["approval_id"] for a in listed["approvals"] if a["run_id"] == run_id]
        if not mine:
            return None
        # History before status: the step that absorbs the finished branch runs after the
        # ticket is recorded, so a SUSPENDED read first could be the transient one.
        status, history = http_json("GET", f"{worker.base_url}/runs/{run_id}/history")
        assert status == 200, history
        done = {(e["event"], e.get("name")) for e in history["events"]}
        if ("tool_succeeded", "create-ticket") not in done:
            return None
        return mine[0] if run_status(worker, run_id)["status"] == "SUSPENDED" else None

    return run_id, wait_until(settled, 30, f"run {run_id} to wait for its approval")


def mint_link(worker: WorkerProcess, approval_id: str) -> str:
    """A signed link's token for the support leads."""
    status, minted = http_json(
        "POST", f"{worker.base_url}/approvals/{approval_id}/links", {"approver": LEADS}
    )
    assert status == 201, minted
    return parse_qs(urlsplit(minted["url"]).query)["token"][0]


def refunds(services: ServicesHandle) -> list[dict[str, Any]]:
    return [e for e in services.ledger("payments") if e["event"] == "charge.created"]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_pending_approval_survives_a_restart_and_resumes_the_run(
    moto: MotoProcess, services: ServicesHandle, how: str
) -> None:
    with workers(moto, services) as start_worker:
        first = start_worker()
        run_id, aid = suspended_on_approval(first)
        token = mint_link(first, aid)
        # The IAM route exists, but the local IAM principal is not among the approvers.
        status, refused = http_json(
            "POST", f"{first.base_url}/approvals/{aid}", {"decision": "approve"}
        )
        assert status == 403, refused
        assert refused["error"]["type"] == "NotAnApproverError"

        if how == "SIGTERM":
            assert first.stop() == 0
        else:
            first.kill()
            assert first.returncode == -signal.SIGKILL

        second = start_worker()
        # A SIGKILL can land while the step that follows the ticket is in flight: the run is
        # then RUNNING until its redelivered event (10 s) or the reconciler carries it on.
        wait_until(
            lambda: run_status(second, run_id)["status"] == "SUSPENDED",
            45,
            f"run {run_id} to suspend again on its approval after the restart",
        )
        status, shown = http_json("GET", f"{second.base_url}/approvals/{aid}")
        assert status == 200 and shown["status"] == "pending", shown
        assert refunds(services) == []

        # Decided after the restart, with the link the first worker minted.
        status, decided = http_json(
            "POST",
            f"{second.base_url}/links/approvals/{aid}",
            {"token": token, "decision": "approve", "comment": f"after a {how}"},
        )
        assert status == 200, decided
        assert decided["status"] == "approved"
        assert decided["decision"]["comment"] == f"after a {how}"
        assert decided["decision"]["via"] == "link"

        run = wait_until(
            lambda: (r := run_status(second, run_id))["status"] == "SUCCEEDED" and r,
            30,
            f"run {run_id} to succeed",
        )
        assert "refunded 65.00 EUR" in run["result"]["answer"]
        [refund] = refunds(services)
        assert refund["data"]["charge"]["amount_cents"] == 6500
        assert second.stop() == 0


def test_ten_racing_decisions_over_http_one_wins(
    moto: MotoProcess, services: ServicesHandle
) -> None:
    with workers(moto, services) as start_worker:
        worker = start_worker()
        run_id, aid = suspended_on_approval(worker)
        tokens = [mint_link(worker, aid) for _ in range(RACERS)]
        barrier = threading.Barrier(RACERS)
        answers: list[tuple[int, int, Any]] = []
        lock = threading.Lock()

        def decide(index: int) -> None:
            body = {
                "token": tokens[index],
                "decision": "approve" if index % 2 == 0 else "reject",
                "comment": f"racer {index}",
            }
            barrier.wait()
            answer = http_json("POST", f"{worker.base_url}/links/approvals/{aid}", body)
            with lock:
                answers.append((index, *answer))

        threads = [threading.Thread(target=decide, args=(i,)) for i in range(RACERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)

        assert sorted(status for _, status, _ in answers) == [200] + [409] * (RACERS - 1)
        [(winner, _, won)] = [a for a in answers if a[1] == 200]
        decision = won["decision"]
        print(f"racer {winner} won: approved={decision['approved']}")
        assert decision["comment"] == f"racer {winner}"
        assert decision["approved"] is (winner % 2 == 0)
        for _, status, body in answers:
            if status == 409:  # every loser is told the first (winning) decision
                assert body["error"]["current"]["decision"] == decision, body
        status, shown = http_json("GET", f"{worker.base_url}/approvals/{aid}")
        assert status == 200 and shown["decision"] == decision

        wait_until(
            lambda: run_status(worker, run_id)["status"] == "SUCCEEDED",
            30,
            f"run {run_id} to succeed",
        )
        assert len(refunds(services)) == (1 if decision["approved"] else 0)


@pytest.mark.parametrize("how", ["cli", "console"])
def test_the_developer_decides_as_the_approvers_with_act_as(
    moto: MotoProcess, services: ServicesHandle, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without --act-as the local caller is refused (see above); with it, the console's
    # Approve and `approvals decide` work, and the decision says who acted as whom.
    from durable_agents_local.cli.main import main as cli_main

    with workers(moto, services) as start_worker:
        worker = start_worker("--act-as", LEADS)
        assert any(f"act-as    {LEADS}" in line for line in worker.lines), list(worker.lines)
        run_id, aid = suspended_on_approval(worker)
        if how == "cli":
            code = cli_main(["approvals", "decide", aid, "approve", "--api-url", worker.base_url])
            assert code == 0, capsys.readouterr()
        else:
            form = urllib.request.Request(  # the console page's form, as a browser posts it
                f"{worker.base_url}/console/approvals/{aid}",
                data=b"decision=approve&comment=looks+fine",
                method="POST",
                headers={"Content-Type": "application/x-www-form-urlencoded",
                         "Sec-Fetch-Site": "same-origin", "Accept": "text/html"},
            )  # fmt: skip
            with pytest.raises(urllib.error.HTTPError) as answered:  # 303: not followed
                OPENER.open(form, timeout=10)
            assert answered.value.code == 303, answered.value.read()
        status, shown = http_json("GET", f"{worker.base_url}/approvals/{aid}")
        assert status == 200 and shown["status"] == "approved", shown
        assert f"acting as {LEADS}" in shown["decision"]["decided_by"], shown
        wait_until(lambda: run_status(worker, run_id)["status"] == "SUCCEEDED", 30, "the run")
