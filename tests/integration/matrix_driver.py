"""How the side-effect matrix drives a cell: the journal, the services, crashes and kills.

Shared by ``test_side_effect_matrix.py`` (the matrix and the classic bug) and
``test_side_effect_gaps.py`` (a dead holder's request still in flight). The journal is DynamoDB
on a moto server (real HTTP, reachable from the child process); effects are counted in the fake
services' own ledgers over real HTTP. Test modules take the fixtures by importing them.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import boto3
import pytest

from durable_agents.core.models import EffectStatus
from durable_agents.engine.runtime import LEASE_MARGIN_MS, OutcomeKind
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.isolated_moto import IsolatedMotoServer as ThreadedMotoServer
from durable_agents_local.services import ServicesHandle
from durable_agents_local.template import create_journal_table
from durable_agents_local.testing import AgentTestRunner, Crash, CrashPoint, TestResult
from tests.conftest import TEMPLATE
from tests.integration import matrix_tools

ROOT = Path(__file__).resolve().parents[2]
TABLE = "side-effect-matrix"
CHILD_REMAINING_MS = 1_000  # the child's lease: this + the runtime's margin
SLOW_MS = 1_000  # how long the provider holds a request before acting (kill mode)

Point = Literal[
    "before_prepare", "after_prepare", "during_execute", "after_execute", "after_commit"
]
POINTS: tuple[Point, ...] = (
    "before_prepare",
    "after_prepare",
    "during_execute",
    "after_execute",
    "after_commit",
)
HOOK: dict[str, CrashPoint] = {
    "before_prepare": "before_claim",
    "after_prepare": "before_execute",
    "after_execute": "after_execute",
    "after_commit": "after_record",
}
"""The runtime's crash hook for each point ("during EXECUTE" is a service fault instead)."""

CREATED = {"tickets": "ticket.created", "payments": "charge.created", "email": "message.sent"}


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(store_key=None, ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def journal(moto_endpoint: str) -> DynamoDBJournal:
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    # moto keeps its state per process, across servers: the second module using the matrix's
    # journal finds the table made for the first (run ids never collide across modules).
    if TABLE not in client.list_tables()["TableNames"]:
        create_journal_table(client, TABLE, TEMPLATE)
    return DynamoDBJournal(client, TABLE)


@pytest.fixture(scope="module")
def services() -> Iterator[ServicesHandle]:
    handle = ServicesHandle.start_in_thread()
    matrix_tools.configure(handle.url)
    yield handle
    handle.stop()


@pytest.fixture(autouse=True)
def clean_ledgers(services: ServicesHandle) -> None:
    services.reset()


# --- helpers ----------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def ledger_counts(services: ServicesHandle, kind: str) -> tuple[int, int]:
    """``(acted, undone)`` in the kind's service ledger."""
    service, _ = matrix_tools.SERVICE_ACTION[kind]
    events = [e["event"] for e in services.ledger(service)]
    return events.count(CREATED[service]), events.count("charge.refunded")


def surviving_effect_id(services: ServicesHandle, kind: str) -> str:
    """The id of the one effect that is not undone."""
    service, _ = matrix_tools.SERVICE_ACTION[kind]
    ledger = services.ledger(service)
    refunded = {e["data"]["charge_id"] for e in ledger if e["event"] == "charge.refunded"}
    key = {"tickets": "ticket", "payments": "charge", "email": "message"}[service]
    ids = [
        e["data"][key][f"{key}_id"]
        for e in ledger
        if e["event"] == CREATED[service] and e["data"][key][f"{key}_id"] not in refunded
    ]
    assert len(ids) == 1, ledger
    return str(ids[0])


def run_id_for(mode: str, point: str, kind: str) -> str:
    return f"mx-{mode}-{point}-{kind}".replace("_", "-")


def new_runner(journal: DynamoDBJournal) -> AgentTestRunner:
    return AgentTestRunner(matrix_tools.matrix_agent, journal=journal, mode="faithful")


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "functions"), str(ROOT / "layers" / "runtime")]
    )
    env.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1"
    )
    env.pop("AWS_PROFILE", None)
    env.pop("AWS_ENDPOINT_URL", None)
    return env


def run_child(
    *,
    endpoint: str,
    services: ServicesHandle,
    run_id: str,
    clock_ms: int,
    crash_point: CrashPoint | None,
    operation: str,
    model_start: int | None = None,
    killer: Callable[[subprocess.Popen[str]], None] | None = None,
) -> None:
    """Runs one invocation in a child process and asserts it died by SIGKILL."""
    command = [
        sys.executable,
        "-m",
        "tests.integration.matrix_child",
        "--endpoint",
        endpoint,
        "--table",
        TABLE,
        "--services",
        services.url,
        "--run-id",
        run_id,
        "--clock-ms",
        str(clock_ms),
        "--remaining-ms",
        str(CHILD_REMAINING_MS),
        "--operation",
        operation,
    ]
    if crash_point is not None:
        command += ["--crash-point", crash_point]
    if model_start is not None:
        command += ["--model-start", str(model_start)]
    child = subprocess.Popen(
        command,
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if killer is not None:
            killer(child)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, f"child was not killed: {out}\n{err}"


def kill_in_flight(services: ServicesHandle, kind: str) -> Callable[[subprocess.Popen[str]], None]:
    """Kills the child while the provider holds its request, then waits until it acted."""

    def killer(child: subprocess.Popen[str]) -> None:
        # The service consumes the fault when the request arrives, then holds it SLOW_MS.
        wait_for(
            lambda: not services.faults() or child.poll() is not None,
            "the child's request to reach the provider",
        )
        assert child.poll() is None, "the child ended before its request reached the provider"
        assert ledger_counts(services, kind)[0] == 0  # held: the provider has not acted yet
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        # The provider acts after the client is gone; recovery must not start before that
        # (real time: the skip-clock of the recovery cannot make the provider settle).
        wait_for(
            lambda: ledger_counts(services, kind)[0] >= 1,
            "the provider to act after the client died",
            timeout=SLOW_MS / 1000 + 10,
        )

    return killer


def drive_with_kill(
    journal: DynamoDBJournal,
    endpoint: str,
    services: ServicesHandle,
    point: Point,
    kind: str,
) -> tuple[TestResult, AgentTestRunner]:
    """The plan step in-process, the tool's invocation in a killed child, recovery in-process."""
    runner = new_runner(journal)
    run_id = run_id_for("kill", point, kind)
    order = matrix_tools.Order(kind=kind, order_id=run_id)  # type: ignore[arg-type]
    runner.runtime.start_run("matrix", order.model_dump(), run_id=run_id)
    first = runner.runtime.execute(run_id, budget=1, remaining_ms=CHILD_REMAINING_MS)
    assert first.kind is OutcomeKind.CONTINUE and first.executed == [f"{run_id}:plan:1"]
    tool_name = matrix_tools.TOOL_BY_KIND[kind].name
    killer = None
    if point == "during_execute":
        service, action = matrix_tools.SERVICE_ACTION[kind]
        services.set_fault(service, action, "slow", delay_ms=SLOW_MS)
        killer = kill_in_flight(services, kind)
    run_child(
        endpoint=endpoint,
        services=services,
        run_id=run_id,
        clock_ms=runner.clock.now_ms(),
        crash_point=HOOK.get(point),
        operation=tool_name,
        killer=killer,
    )
    # What the dead child left in the journal proves where it died.
    left = [(e.status, e.attempt) for e in journal.load(run_id).effects]
    if point == "before_prepare":
        assert left == []
    elif point == "after_commit":
        assert left == [(EffectStatus.COMMITTED, 1)]
    else:
        assert left == [(EffectStatus.PREPARED, 1)]
    # The platform's view of a dead process: its lease runs out, the event comes again.
    runner.clock.advance(CHILD_REMAINING_MS + LEASE_MARGIN_MS + 1_000)
    return runner.resume(run_id), runner


def drive_with_exception(
    journal: DynamoDBJournal, services: ServicesHandle, point: Point, kind: str
) -> tuple[TestResult, AgentTestRunner]:
    """The whole run in-process, crashing by exception (or by the service dropping the answer)."""
    runner = new_runner(journal)
    run_id = run_id_for("exc", point, kind)
    order = matrix_tools.Order(kind=kind, order_id=run_id)  # type: ignore[arg-type]
    crash = None
    if point == "during_execute":
        service, action = matrix_tools.SERVICE_ACTION[kind]
        services.set_fault(service, action, "act_then_drop")
    else:
        crash = Crash(matrix_tools.TOOL_BY_KIND[kind].name, HOOK[point])
    result = runner.run(order.model_dump(), crash=crash, run_id=run_id)
    if crash is not None:
        assert result.crashes == 1
    else:
        assert services.faults() == []  # the fault did fire
    return result, runner
