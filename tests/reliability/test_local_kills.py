"""A real SIGKILL of the local-mode worker at the write boundaries of every operation kind.

Each case starts ``durable-agents local --crash-at OPERATION:POINT`` on a moto server shared by
the module, starts a run of ``kill-reference`` (``kill_agent``: a model call, a step, the
payments tool, an approval, a wait, a callback, a sub-agent, a map, a child context and an
emit), drives it (approvals decided through signed links, the callback completed over HTTP)
until the worker SIGKILLs itself, starts a fresh un-armed worker on the same moto server and
drives the run to the end. It must then have:

* SUCCEEDED with the fault-free run's output;
* charged the card exactly once, with no refund (the fake payments service's ledger);
* every result recorded once, at the fault-free run's positions (parent and sub-agent runs);
* really been killed: the armed worker exited by SIGKILL at the named point.

Points: ``before_claim`` and ``after_record`` for every kind, plus ``before_execute`` and
``after_execute`` for the step, the model call and the tool: 26 cases, on each store: the
moto store (the worker attached to the module's moto server) and the embedded store
(``--store embedded``: the journal in the worker's own SQLite file, which the SIGKILL must
not damage, events delivered in the process, which the SIGKILL loses). A case takes ~20 s (two
worker starts, the claim lease of the killed invocation running out), so even three of them
exceed the normal suite's budget: every case is ``reliability_full`` (``make reliability``).
"""

from __future__ import annotations

import http.client
import json
import signal
import time
import urllib.error
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from durable_agents.core.models import EntryType, OpKind, WaitStatus
from durable_agents.engine.operations.invoke import child_run_id
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents_local.embedded.store import DATABASE
from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.processes import ServicesProcess, WorkerProcess, http_json
from durable_agents_local.runs import RunsClient
from durable_agents_local.services import ServicesHandle
from tests.integration.local_stack import ROOT, moto, services, services_process, workers
from tests.reliability import kill_agent

__all__ = ["moto", "services", "services_process"]  # the fixtures, from local_stack

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

AGENT = "kill-reference"
MODULE = "tests.reliability.kill_agent"
# A 1 s StepRunner timeout gives a 6 s claim lease; the reconciler re-drives a stalled run
# after 1 s and an unfinished SQS delivery comes back after 2 s: recovery takes seconds.
WORKER_ARGS = (
    "--function-timeout", "StepRunnerFunction=1", "--stall-after", "1",
    "--visibility-timeout", "2", "--schedule-interval", "0.5",
)  # fmt: skip
RUN_TIMEOUT = 90.0

EXECUTED = {"step": "price", "llm": "plan", "tool": "charge-card"}
RECORDED = {
    "wait": "cool-off",
    "approval": "approve",
    "callback": "shipment",
    "invoke": "audit",
    "map": "parts",
    "child": "pack",
    "emit": "done-event",
}
CASES = [
    *[
        (kind, op, point)
        for kind, op in EXECUTED.items()
        for point in ("before_claim", "before_execute", "after_execute", "after_record")
    ],
    *[
        (kind, op, point)
        for kind, op in RECORDED.items()
        for point in ("before_claim", "after_record")
    ],
]


@dataclass(frozen=True)
class Baseline:
    """The fault-free run: its output and the results its journals hold, per run."""

    result: Any
    results: dict[str, Counter[tuple[str, str, str]]]


def _results(store: Any, run_id: str) -> dict[str, Counter[tuple[str, str, str]]]:
    """``(position, name, type)`` of every result entry, per run (the parent and the auditor)."""
    entries = store.load(run_id).entries
    [audit] = [e for e in entries if e.name == "audit" and e.type.is_result]
    child = child_run_id(run_id, audit.op_id, "audit")
    return {
        label: Counter(
            (e.position, e.name, e.type.value) for e in store.load(rid).entries if e.type.is_result
        )
        for label, rid in (("run", run_id), ("sub-agent", child))
    }


def kill_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``template.yaml`` with ``kill_agent`` among the agent modules and absolute code paths."""
    text = (ROOT / "template.yaml").read_text()
    modules = "AGENT_MODULES: agents.example,agents.checkout,agents.support,agents.concierge"
    assert text.count(modules) == 1, "template.yaml's AGENT_MODULES changed: update this test"
    text = text.replace(modules, f"{modules},{MODULE}")
    text = text.replace("CodeUri: functions/", f"CodeUri: {ROOT}/functions/")
    text = text.replace("ContentUri: layers/runtime", f"ContentUri: {ROOT}/layers/runtime")
    path = tmp_path_factory.mktemp("kill-template") / "template.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kill_template(tmp_path_factory)


def _answer(worker: WorkerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``http_json`` that answers ``(0, None)`` when the worker is gone (it was killed)."""
    try:
        return http_json(method, f"{worker.base_url}{path}", body, timeout=5)
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, OSError):
        # Killed mid-answer, the worker leaves a short read (IncompleteRead) or no status line.
        return 0, None


class Driver:
    """Plays the people and the shipper for one run: approves it, completes its callback."""

    def __init__(self, store: Any, run_id: str):
        self.store = store
        self.run_id = run_id

    def _approve(self, worker: WorkerProcess) -> None:
        status, listed = _answer(worker, "GET", "/approvals?status=pending")
        if status != 200:
            return
        for approval in listed["approvals"]:
            if approval["run_id"] != self.run_id:
                continue
            aid = quote(approval["approval_id"])
            status, minted = _answer(
                worker, "POST", f"/approvals/{aid}/links", {"approver": kill_agent.APPROVER}
            )
            if status != 201:
                continue
            token = parse_qs(urlsplit(minted["url"]).query)["token"][0]
            _answer(
                worker, "POST", f"/links/approvals/{aid}", {"token": token, "decision": "approve"}
            )

    def _ship(self, worker: WorkerProcess) -> None:
        pending = {
            r.wait_id
            for r in self.store.list_waits("callback", WaitStatus.PENDING)
            if r.run_id == self.run_id
        }
        if not pending:
            return
        # The full id (public id + secret) is in the entry that created the callback; listings
        # show only the public id.
        for entry in self.store.load(self.run_id).entries:
            if entry.kind is OpKind.CALLBACK and entry.type is EntryType.SCHEDULED:
                recorded = json.loads(entry.value or "{}")
                if recorded.get("callback_id") in pending:
                    full = f"{recorded['callback_id']}_{recorded['secret']}"
                    path = f"/callbacks/{quote(full)}/success"
                    _answer(worker, "POST", path, {"tracking": "T-1"})

    def step(self, worker: WorkerProcess) -> dict[str, Any] | None:
        """One round: act on what the run waits for; the run if it finished."""
        status, run = _answer(worker, "GET", f"/runs/{quote(self.run_id)}")
        if status != 200:
            return None
        assert run["status"] not in ("FAILED", "PAUSED", "CANCELLED"), run
        if run["status"] == "SUCCEEDED":
            return dict(run)
        self._approve(worker)
        self._ship(worker)
        return None

    def until(self, done: Callable[[], Any], worker: WorkerProcess, what: str) -> Any:
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline:
            run = self.step(worker)
            value = done() if run is None else run
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out after {RUN_TIMEOUT} s waiting for {what}")


def start_run(worker: WorkerProcess, order: str) -> str:
    status, body = http_json(
        "POST", f"{worker.base_url}/runs", {"agent": AGENT, "input": {"order": order}}
    )
    assert status == 201, body
    return str(body["run"]["run_id"])


def charges(services: ServicesHandle, run_id: str | None = None) -> list[str]:
    """The payments ledger's events (``charge.created``, ``charge.refunded``, …).

    With ``run_id``, only that run's: its calls' idempotency keys are its operation ids. The
    journal is the module's (one moto server), so a run a failed case left unfinished can be
    taken up by a later case's workers; its charge is its own, not this run's second one.
    """
    ours: set[str] = set()
    events = []
    for event in services.ledger("payments"):
        data = event.get("data") or {}
        charge = data.get("charge") or {}
        if charge.get("charge_id") and str(charge.get("idempotency_key") or "").startswith(
            f"{run_id}:"
        ):
            ours.add(charge["charge_id"])
        if run_id is None or charge.get("charge_id") in ours or data.get("charge_id") in ours:
            events.append(event["event"])
    return events


@pytest.fixture(scope="module")
def baseline(
    moto: MotoProcess, services_process: ServicesProcess, template: Path
) -> Iterator[Baseline]:
    handle = ServicesHandle(services_process.url)
    handle.reset()
    # The worker stops before any case starts: two workers on one moto server share its queues,
    # and an un-armed one would take the armed one's deliveries.
    with workers(moto, handle) as start:
        worker = start("--template", str(template), *WORKER_ARGS)
        run_id = start_run(worker, "O-1")
        store = RunsClient(moto.endpoint, store_key=moto.store_key).store
        run = Driver(store, run_id).until(lambda: None, worker, f"{run_id} to succeed")
        assert charges(handle) == ["charge.created"]
        assert worker.stop() == 0
    yield Baseline(
        run["result"], _results(RunsClient(moto.endpoint, store_key=moto.store_key).store, run_id)
    )


def kill_then_recover(
    start: Callable[..., WorkerProcess],
    store: Any,
    services: ServicesHandle,
    baseline: Baseline,
    op: str,
    point: str,
) -> None:
    """One case: a worker armed to SIGKILL itself at ``op:point``, then an un-armed one.

    Args:
        start: Starts a worker with these extra flags (the store's and the template's set).
        store: The journal the workers use, read by the driver and the checks.
        services: The fake providers (their ledger is checked).
        baseline: The fault-free run.
        op: The operation to kill at.
        point: The crash point.
    """
    doomed = start("--crash-at", f"{op}:{point}")
    try:
        run_id = start_run(doomed, "O-1")
    except (http.client.HTTPException, OSError):
        # Killed while it answered the start: the embedded store's bus hands the first Step
        # Ready to the StepRunner at once, in the same process, so a kill before the first
        # claim can beat the Api's answer. The run was recorded before the answer: find it.
        assert doomed.wait(30) == -signal.SIGKILL
        (header,) = store.list_runs(agent=AGENT, limit=1).runs
        run_id = header.run_id
    driver = Driver(store, run_id)
    outcome = driver.until(
        lambda: doomed.returncode is not None, doomed, f"the worker to die at {op}:{point}"
    )
    assert outcome is True, f"the run finished without reaching {op}:{point}: {outcome}"
    assert doomed.returncode == -signal.SIGKILL, doomed.returncode
    assert any(f"--crash-at {op}:{point}: SIGKILL" in line for line in doomed.lines)

    survivor = start()  # the documented restart
    run = driver.until(lambda: None, survivor, f"{run_id} to succeed after the kill")

    assert run["result"] == baseline.result
    assert charges(services, run_id) == ["charge.created"], services.ledger("payments")
    assert _results(store, run_id) == baseline.results
    assert survivor.stop() == 0


@pytest.mark.reliability_full
@pytest.mark.parametrize(
    ("kind", "op", "point"),
    [pytest.param(kind, op, point, id=f"{kind}-{op}-{point}") for kind, op, point in CASES],
)
def test_sigkill_at_boundary(
    moto: MotoProcess,
    services: ServicesHandle,
    template: Path,
    baseline: Baseline,
    kind: str,
    op: str,
    point: str,
) -> None:
    store = RunsClient(moto.endpoint, store_key=moto.store_key).store
    with workers(moto, services) as start:
        kill_then_recover(
            lambda *args: start("--template", str(template), *WORKER_ARGS, *args),
            store,
            services,
            baseline,
            op,
            point,
        )


@pytest.mark.reliability_full
@pytest.mark.parametrize(
    ("kind", "op", "point"),
    [pytest.param(kind, op, point, id=f"{kind}-{op}-{point}") for kind, op, point in CASES],
)
def test_sigkill_at_boundary_on_the_embedded_store(
    tmp_path: Path,
    services: ServicesHandle,
    template: Path,
    baseline: Baseline,
    kind: str,
    op: str,
    point: str,
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)  # the driver opens the journal before the first worker runs
    started: list[WorkerProcess] = []

    def start(*args: str) -> WorkerProcess:
        worker = WorkerProcess(
            api_port=free_port(),
            moto_endpoint=None,
            args=[
                *("--services-url", services.url, "--log-level", "ERROR"),
                *("--template", str(template), *WORKER_ARGS),
                *("--store", "embedded", "--state-dir", str(state_dir), *args),
            ],
            cwd=ROOT,
        )
        started.append(worker)
        worker.start()
        return worker

    try:
        with SqliteJournal(state_dir / DATABASE) as store:
            kill_then_recover(start, store, services, baseline, op, point)
    except BaseException:
        for index, worker in enumerate(started, start=1):
            print(f"--- worker {index} log ---", *worker.lines, sep="\n")
        raise
    finally:
        for worker in started:
            worker.stop()
