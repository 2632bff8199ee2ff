"""Approvals under concurrency: racing decisions, and requests resolved in threads."""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest

from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.template import create_journal_table
from durable_agents_local.testing import AgentTestRunner
from tests.conftest import TEMPLATE
from tests.unit import approvals_harness as harness
from tests.unit.approvals_harness import (
    EVENTS,
    Reply,
    refund,
    request,
    start_approval,
)
from tests.unit.conftest import Deployment, FakeLambdaContext

# The fixture: the Api with a link key and a JWT issuer.
api = harness.api


DECIDERS = 10


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from durable_agents_local.isolated_moto import IsolatedMotoServer as ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(store_key=None, ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_ten_concurrent_decisions_exactly_one_wins(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten people press Approve at the same moment: one 200, nine 409 showing the winner."""
    from api import services as api_services

    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    table = f"journal-race-{secrets.token_hex(4)}"
    create_journal_table(client, table, TEMPLATE)
    journal = DynamoDBJournal(client, table)
    runner = AgentTestRunner(refund, journal=journal, mode="faithful")
    run_id, aid = start_approval(runner)
    # The Api's own runtime on the same table and clock (a separate client, as in Lambda).
    api_client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    publisher = CollectingPublisher()
    monkeypatch.setattr(
        api_services,
        "_runtime",
        Runtime(DynamoDBJournal(api_client, table), publisher=publisher, clock=runner.clock),
    )
    barrier = threading.Barrier(DECIDERS)

    def decide(i: int) -> Reply:
        barrier.wait()
        return request("POST", f"/approvals/{aid}", {"decision": "approve", "comment": f"n{i}"})

    with ThreadPoolExecutor(DECIDERS) as pool:
        replies = list(pool.map(decide, range(DECIDERS)))
    statuses = sorted(r.status for r in replies)
    assert statuses == [200] + [409] * (DECIDERS - 1), [r.text for r in replies]
    (winner,) = [(i, r) for i, r in enumerate(replies) if r.status == 200]
    index, reply = winner
    assert reply.json["decision"]["comment"] == f"n{index}"  # each thread saw its own request
    for other in replies:
        if other.status == 409:
            assert other.json["error"]["current"]["decision"] == reply.json["decision"]
    assert [e.detail["run_id"] for e in publisher.events] == [run_id]
    assert runner.resume(run_id).output["comment"] == f"n{index}"


def test_requests_resolved_in_threads_keep_their_own_event(
    api: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Powertools keeps the current event on a class attribute; the Api's resolver does not.

    While one request is in flight (its route blocked), another is resolved in this thread;
    the first must still answer from its own event (its Accept header asks for HTML).
    """
    from api.routes import approvals

    entered, release = threading.Event(), threading.Event()
    original = approvals.find_wait

    def slow_find(kind: str, wait_id: str) -> Any:
        if wait_id == "apr-slow":
            entered.set()
            release.wait(5)
        return original(kind, wait_id)

    monkeypatch.setattr(approvals, "find_wait", slow_find)
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(request, "GET", "/approvals/apr-slow", headers={"Accept": "text/html"})
        assert entered.wait(5)
        fast = request("GET", "/approvals/apr-fast", headers={"Accept": "application/json"})
        release.set()
        slow_reply = slow.result()
    assert fast.status == 404 and "apr-fast" in fast.json["error"]["message"]
    assert slow_reply.status == 404 and "apr-slow" in slow_reply.html


def test_every_route_is_ready_before_threads_share_the_resolver() -> None:
    """Powertools builds a route's middleware lazily and unguarded; the Api builds all first."""
    from api.app import ThreadSafeRestResolver, app

    app.build_route_stacks()
    routes = app._static_routes + app._dynamic_routes
    assert len(routes) >= 18 and all(r._middleware_stack_built for r in routes)

    fresh = ThreadSafeRestResolver()

    @fresh.get("/ping")
    def ping() -> dict[str, str]:
        return {"ok": fresh.current_event.path}

    event = json.loads((EVENTS / "api_get_run.json").read_text())
    event.update(path="/ping", resource="/ping", httpMethod="GET", pathParameters=None)
    barrier = threading.Barrier(8)

    def call(_: int) -> int:
        barrier.wait()
        return int(fresh.resolve(event, FakeLambdaContext())["statusCode"])

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(call, range(8))) == [200] * 8
