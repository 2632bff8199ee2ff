"""Local mode is durable: the whole stack SIGKILLed and restarted loses nothing, does nothing twice.

* ``test_the_whole_stack_killed_and_restarted``: ``durable-agents local`` starts its own store on
  a state directory; one run waits for an approval (a signed link minted already), another is
  between its two payments (the first made, a timer before the second). SIGKILL to the worker,
  the store and the fake services; ``durable-agents local`` restarted at once on the same state
  directory and the same ports. Then: the link minted before the kill approves, both runs
  finish, each payment is in the provider's ledger exactly once, and repeating the first
  request with its Idempotency-Key returns the same run.
* ``test_an_attached_worker_reattaches_to_a_restarted_store``: the store restarts under a
  running worker (which only attached to it); the worker notices and re-provisions its queues
  instead of answering 502 for ever.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.processes import ServicesProcess, WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle
from tests.integration import durability_agent
from tests.integration.local_stack import ROOT, wait_until

pytestmark = [pytest.mark.slow]

MODULE = "tests.integration.durability_agent"
FAST = (
    "--function-timeout", "StepRunnerFunction=1", "--stall-after", "1",
    "--visibility-timeout", "2", "--schedule-interval", "0.5", "--log-level", "ERROR",
)  # fmt: skip
TIMEOUT = 90.0


def durability_template(directory: Path) -> Path:
    """``template.yaml`` with ``durability_agent`` among the agent modules, absolute paths."""
    text = (ROOT / "template.yaml").read_text()
    modules = "AGENT_MODULES: agents.example,agents.checkout,agents.support,agents.concierge"
    assert text.count(modules) == 1, "template.yaml's AGENT_MODULES changed: update this test"
    text = text.replace(modules, f"{modules},{MODULE}")
    text = text.replace("CodeUri: functions/", f"CodeUri: {ROOT}/functions/")
    text = text.replace("ContentUri: layers/runtime", f"ContentUri: {ROOT}/layers/runtime")
    path = directory / "template.yaml"
    path.write_text(text)
    return path


def start(worker: WorkerProcess, agent: str, value: Any, key: str | None = None) -> tuple[int, Any]:
    """POST /runs (with an Idempotency-Key header if given)."""
    request = urllib.request.Request(
        f"{worker.base_url}/runs",
        data=json.dumps({"agent": agent, "input": value}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


def run_of(worker: WorkerProcess, run_id: str) -> dict[str, Any]:
    status, body = http_json("GET", f"{worker.base_url}/runs/{quote(run_id)}")
    assert status == 200, (status, body)
    return dict(body)


def mint_link(worker: WorkerProcess, run_id: str) -> tuple[str, str] | None:
    """Mints a signed approval link for the run's pending approval: (approval id, token)."""
    status, listed = http_json("GET", f"{worker.base_url}/approvals?status=pending")
    assert status == 200, listed
    for approval in listed["approvals"]:
        if approval["run_id"] == run_id:
            aid = approval["approval_id"]
            status, minted = http_json(
                "POST",
                f"{worker.base_url}/approvals/{quote(aid)}/links",
                {"approver": durability_agent.APPROVER},
            )
            assert status == 201, minted
            return aid, parse_qs(urlsplit(minted["url"]).query)["token"][0]
    return None


def charges(services: ServicesHandle) -> Counter[tuple[str, int]]:
    """How often each (customer, amount) was charged, by the provider's own ledger."""
    return Counter(
        (e["data"]["charge"]["customer"], e["data"]["charge"]["amount_cents"])
        for e in services.ledger("payments")
        if e["event"] == "charge.created"
    )


def store_pid(state_dir: Path) -> int:
    """The pid of the store holding ``state_dir`` (it writes it into its lock file)."""
    return int((state_dir / "LOCK").read_text().strip())


@pytest.mark.parametrize("store", ["embedded", "moto"])
def test_the_whole_stack_killed_and_restarted(tmp_path: Path, store: str) -> None:
    state_dir, template = tmp_path / "state", durability_template(tmp_path)
    api_port, moto_port = free_port(), free_port()
    services_process = ServicesProcess(state_dir.with_name("ledgers.json"))
    services = services_process.start()
    services_port = urlsplit(services.url).port or 0
    args = [
        "--template", str(template), "--store", store, "--moto-port", str(moto_port),
        "--state-dir", str(state_dir), "--services-url", services.url, *FAST,
    ]  # fmt: skip
    first = WorkerProcess(api_port=api_port, moto_endpoint=None, args=args, cwd=ROOT)
    second: WorkerProcess | None = None
    try:
        first.start()
        status, started = start(first, "durability-approval", {"order": "A"}, key="order-A")
        assert status == 201, started
        approval_run = started["run"]["run_id"]
        _, paying = start(first, "durability-pay-twice", {"order": "B", "pause": 3})
        paying_run = paying["run"]["run_id"]
        link = wait_until(lambda: mint_link(first, approval_run), TIMEOUT, "the approval")
        wait_until(
            lambda: charges(services)[("cus-B", durability_agent.DEPOSIT_CENTS)],
            TIMEOUT,
            "the deposit",
        )
        assert run_of(first, paying_run)["status"] != "SUCCEEDED"

        # SIGKILL to everything: the worker (with the embedded store it is the only local
        # process, holding the journal), the moto store it started (with --store moto), the
        # fake services.
        stores = [store_pid(state_dir)] if store == "moto" else []
        assert store == "moto" or not (state_dir / "LOCK").exists()  # no moto process
        for pid in (first.pid, *stores, services_process.pid):
            os.kill(pid, signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        services_process.stop()
        for pid in stores:
            wait_until(lambda pid=pid: not _alive(pid), 10, "the store to die")

        # At once, on the same state, the same ports.
        services_process = ServicesProcess(state_dir.with_name("ledgers.json"), services_port)
        services = services_process.start()
        second = WorkerProcess(api_port=api_port, moto_endpoint=None, args=args, cwd=ROOT)
        second.start()
        # The kill can land between the approval's record and the suspension that follows it;
        # the run then carries on to SUSPENDED once its step is redelivered.
        wait_until(
            lambda: run_of(second, approval_run)["status"] == "SUSPENDED",
            TIMEOUT,
            "the approval run to be suspended again",
        )
        again_status, again = start(second, "durability-approval", {"order": "A"}, key="order-A")
        assert (again_status, again["run"]["run_id"]) == (200, approval_run)

        aid, token = link  # minted before the kill: the link secret survived too
        status, decided = http_json(
            "POST",
            f"{second.base_url}/links/approvals/{quote(aid)}",
            {"token": token, "decision": "approve"},
        )
        assert status == 200, decided
        for run_id in (approval_run, paying_run):
            done = wait_until(
                lambda rid=run_id: run_of(second, rid)["status"] in ("SUCCEEDED", "FAILED"),
                TIMEOUT,
                f"{run_id} to finish",
            )
            assert done
            assert run_of(second, run_id)["status"] == "SUCCEEDED", run_of(second, run_id)
        assert charges(services) == {
            ("cus-A", durability_agent.APPROVED_CENTS): 1,
            ("cus-B", durability_agent.DEPOSIT_CENTS): 1,
            ("cus-B", durability_agent.BALANCE_CENTS): 1,
        }, services.ledger("payments")
        assert second.stop() == 0
    except BaseException:
        for label, worker in (("first", first), ("second", second)):
            if worker is not None:
                print(f"--- {label} worker log ---", *worker.lines, sep="\n")
        raise
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.stop()
        services_process.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_attached_worker_reattaches_to_a_restarted_store(tmp_path: Path) -> None:
    port = free_port()
    store = MotoProcess(port)
    store.start()
    worker = WorkerProcess(
        api_port=free_port(), moto_endpoint=store.endpoint, args=list(FAST), cwd=ROOT
    )
    try:
        worker.start()
        store.stop()
        # Ephemeral: it lost the tables and the queues too. The same session key (a store
        # restarted by hand makes a new one, unless DURABLE_AGENTS_STORE_KEY pins it).
        store = MotoProcess(port, store_key=store.store_key)
        store.start()

        def started() -> bool:
            try:
                status, _ = start(worker, "example-research", {"topic": "re-attach"})
            except OSError:
                return False
            return status == 201

        wait_until(started, 30, "the worker to serve runs again")
        wait_until(lambda: any("re-attached" in x for x in worker.lines), 5, "its log line")
    finally:
        worker.stop()
        store.stop()


def test_a_worker_restarts_the_store_it_started_when_it_dies(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    args = [
        "--store", "moto", "--moto-port", str(free_port()), "--state-dir", str(state_dir), *FAST,
    ]  # fmt: skip
    worker = WorkerProcess(api_port=free_port(), moto_endpoint=None, args=args, cwd=ROOT)
    try:
        worker.start()
        status, started = start(worker, "example-research", {"topic": "t", "pause_seconds": 0})
        assert status == 201, started
        run_id = started["run"]["run_id"]
        first_store = store_pid(state_dir)
        os.kill(first_store, signal.SIGKILL)
        wait_until(
            lambda: any("started it again" in line for line in worker.lines), 30, "a new store"
        )
        assert store_pid(state_dir) != first_store
        wait_until(
            lambda: run_of(worker, run_id)["status"] == "SUCCEEDED", TIMEOUT, "the run to finish"
        )
    finally:
        worker.stop()
