"""Two reconcilers sweeping the same 100 stale PREPARED calls at once: each handled once."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from pydantic import BaseModel

from durable_agents import SkipClock
from durable_agents.admin.reconciler import sweep
from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    RunHeader,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import input_hash
from durable_agents.tools import Found, ToolCall, ToolRegistry, tool
from durable_agents_local.isolated_moto import IsolatedMotoServer as ThreadedMotoServer
from durable_agents_local.template import create_journal_table
from tests.conftest import TEMPLATE

RECORDS = 100


class Ping(BaseModel):
    n: int


@pytest.fixture
def journal() -> Iterator[DynamoDBJournal]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(store_key=None, ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client("dynamodb", endpoint_url=f"http://{host}:{port}", region_name="us-east-1")
    create_journal_table(client, "journal", TEMPLATE)
    yield DynamoDBJournal(client, "journal")
    server.stop()


def test_two_reconcilers_handle_each_stale_record_once(journal: DynamoDBJournal) -> None:
    lookups: Counter[str] = Counter()
    lock = threading.Lock()
    tools = ToolRegistry()

    def find(request: Ping, call: ToolCall) -> Found[dict[str, int]]:
        with lock:
            lookups[call.operation_id] += 1
        return Found({"n": request.n}, external_id=f"ext-{request.n}")

    @tool(name="ping", registry=tools, lookup=find, stale_after_seconds=60)
    def ping(request: Ping, call: ToolCall) -> dict[str, int]:
        raise AssertionError("a found call must never execute again")

    clock = SkipClock()
    start = clock.now_ms()
    for i in range(RECORDS):
        run_id = f"run-race-{i:03d}"
        journal.create_run(
            RunHeader(
                run_id=run_id,
                agent="a",
                versions={"workflow_version": "1"},
                status=RunStatus.RUNNING,
                input="null",
                created_at_ms=start,
                updated_at_ms=start,
                input_hash=input_hash("a", "null"),
            )
        )
        op_id = f"{run_id}:ping:1"
        record = SideEffectRecord(
            run_id=run_id,
            position="00000001",
            operation_id=op_id,
            tool="ping",
            tool_schema_version="1",
            canonical_request=f'{{"n":{i}}}',
            idempotency_key=op_id,
            status=EffectStatus.PREPARED,
            attempt=1,
            prepared_at_ms=start,
            updated_at_ms=start,
            lease_expires_at_ms=start + 1_000,
            stale_at_ms=start + 60_000,
        )
        journal.commit(run_id, [], None, EffectChange(record))
    clock.advance(120_000)

    publishers = [CollectingPublisher(), CollectingPublisher()]
    runtimes = [Runtime(journal, publisher=p, clock=clock) for p in publishers]
    barrier = threading.Barrier(2)

    def reconcile(runtime: Runtime) -> dict[str, int]:
        barrier.wait()
        report = sweep(runtime, stall_after_ms=10**9, tools=tools, limit=RECORDS)
        return {"found": report.effects_found, "skipped": report.effects_skipped}

    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(reconcile, runtimes))

    assert sum(r["found"] for r in reports) == RECORDS
    assert all(n == 1 for n in lookups.values()) and len(lookups) == RECORDS
    assert journal.stale_effects(clock.now_ms() + 10**9, limit=1000) == []
    committed = [journal.get_effect(f"run-race-{i:03d}", "00000001") for i in range(RECORDS)]
    assert {r.status for r in committed} == {EffectStatus.COMMITTED}
    assert {r.attempt for r in committed} == {2}
    nudges = [e.detail["run_id"] for p in publishers for e in p.events]
    assert sorted(nudges) == sorted(f"run-race-{i:03d}" for i in range(RECORDS))
