"""Tenancy over the Api: another tenant's run, approval, review or stream is 404, like none.

``TENANT_MAP`` maps the IAM callers of these tests to tenants ``a`` and ``b`` (the operators'
role to ``*``, which sees every tenant). A run started by tenant A (through ``POST /runs``, or
by the runtime with ``tenant="a"`` for the agents that wait on an approval or a review) is
invisible to tenant B on every route that names it: the answer is byte for byte the one for an
id that does not exist. Listings show only the caller's tenant; idempotency keys are per tenant.
DynamoDB on moto throughout (the Api's real path).
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from durable_agents.core.models import RunStatus
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.testing import AgentTestRunner, Crash
from tests.unit import test_api_approvals as approvals_api
from tests.unit import test_api_reviews as reviews_api
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api_approvals import KEYS, NOTIFIER, OPERATOR, Reply, refund, request
from tests.unit.test_auth import claims

api = approvals_api.api

ROLE = "arn:aws:sts::123456789012:assumed-role"
TENANT_A = f"{ROLE}/tenant-a/app"
TENANT_B = f"{ROLE}/tenant-b/app"
UNMAPPED = "arn:aws:iam::123456789012:user/nobody"
TENANT_MAP = {
    f"{ROLE}/tenant-a/*": "a",
    f"{ROLE}/tenant-b/*": "b",
    f"{ROLE}/durable-agents-operator/*": "*",
    f"{ROLE}/durable-agents-notifier/*": "*",
}
GOOD = {"agent": "example-research", "input": {"topic": "durable execution"}}
MISSING_RUN = "run-that-does-not-exist"


@pytest.fixture
def tenants(api: Deployment, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    return api


def _journal() -> DynamoDBJournal:
    return DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)


def _start(caller: str, **extra: Any) -> Reply:
    return request("POST", "/runs", {**GOOD, **extra}, user_arn=caller)


def _same_as_missing(reply: Reply, missing: Reply, real_id: str, missing_id: str) -> None:
    """The refusal is the answer for an id that does not exist (only the id differs)."""
    assert reply.status == missing.status == 404, reply.text
    assert reply.headers.get("Content-Type") == missing.headers.get("Content-Type")
    assert reply.text.replace(real_id, "ID") == missing.text.replace(missing_id, "ID")


# --------------------------------------------------------------------------------------- runs
def test_a_run_started_by_tenant_a_is_404_for_tenant_b(tenants: Deployment) -> None:
    started = _start(TENANT_A)
    assert started.status == 201, started.text
    run_id = started.json["run"]["run_id"]
    assert started.json["run"]["tenant"] == "a"
    for method, suffix in (("GET", ""), ("GET", "/history"), ("POST", "/redrive")):
        theirs = request(method, f"/runs/{run_id}{suffix}", user_arn=TENANT_B)
        missing = request(method, f"/runs/{MISSING_RUN}{suffix}", user_arn=TENANT_B)
        _same_as_missing(theirs, missing, run_id, MISSING_RUN)
        assert request(method, f"/runs/{run_id}{suffix}", user_arn=TENANT_A).status in (
            200,
            202,
            409,
        )
    # The operators' tenant (*) sees every tenant's runs.
    assert request("GET", f"/runs/{run_id}", user_arn=OPERATOR).status == 200


def test_events_and_the_status_value_of_another_tenants_run_are_404(
    tenants: Deployment,
) -> None:
    run_id = _start(TENANT_A).json["run"]["run_id"]
    for method, suffix, body in (
        ("POST", "/events/note", {"x": 1}),
        ("GET", "/status-value", None),
    ):
        theirs = request(method, f"/runs/{run_id}{suffix}", body, user_arn=TENANT_B)
        missing = request(method, f"/runs/{MISSING_RUN}{suffix}", body, user_arn=TENANT_B)
        _same_as_missing(theirs, missing, run_id, MISSING_RUN)
        assert request(method, f"/runs/{run_id}{suffix}", body, user_arn=TENANT_A).status in (
            200,
            202,
        )


def test_the_console_shows_another_tenants_run_as_none(tenants: Deployment) -> None:
    run_id = _start(TENANT_A).json["run"]["run_id"]
    page = {"Accept": "text/html"}
    form = {"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin"}
    for method, path, headers in (
        ("GET", "/console/runs/{}", page),
        ("GET", "/runs/{}/history", page),  # a browser's history: the console's timeline
        ("POST", "/console/runs/{}/cancel", form),
    ):
        theirs, missing = (
            request(method, path.format(i), user_arn=TENANT_B, headers=headers, raw_body="x=y")
            for i in (run_id, MISSING_RUN)
        )
        _same_as_missing(theirs, missing, run_id, MISSING_RUN)
    listed = request("GET", "/console", user_arn=TENANT_B, headers=page)
    assert listed.status == 200 and run_id not in listed.text
    assert run_id in request("GET", "/console", user_arn=TENANT_A, headers=page).text
    assert request("GET", f"/console/runs/{run_id}", user_arn=TENANT_A).status == 200


def test_the_stream_of_another_tenants_run_is_404(tenants: Deployment) -> None:
    run_id = _start(TENANT_A).json["run"]["run_id"]
    theirs = request("GET", f"/runs/{run_id}/stream", user_arn=TENANT_B)
    missing = request("GET", f"/runs/{MISSING_RUN}/stream", user_arn=TENANT_B)
    _same_as_missing(theirs, missing, run_id, MISSING_RUN)
    assert request("GET", f"/runs/{run_id}/stream", user_arn=TENANT_A).status == 200


def test_listings_show_only_the_callers_tenant(tenants: Deployment) -> None:
    a_runs = {_start(TENANT_A, idempotency_key=f"a-{i}").json["run"]["run_id"] for i in range(3)}
    b_runs = {_start(TENANT_B).json["run"]["run_id"]}

    def listed(caller: str, **query: str) -> tuple[set[str], Any]:
        reply = request("GET", "/runs", user_arn=caller, query=query or None)
        assert reply.status == 200, reply.text
        return {r["run_id"] for r in reply.json["runs"]}, reply.json["cursor"]

    assert listed(TENANT_A)[0] == a_runs
    assert listed(TENANT_B)[0] == b_runs
    assert listed(OPERATOR)[0] == a_runs | b_runs
    # Pages by status: only the caller's own runs (a page may be short: the tenant is a
    # filter of the start-time index, ADR 0012), and a cursor that continues them.
    seen: set[str] = set()
    cursor: str | None = None
    while True:
        query = {"status": "RUNNING", "limit": "2", **({"cursor": cursor} if cursor else {})}
        page, cursor = listed(TENANT_A, **query)
        assert page <= a_runs and len(page) <= 2
        seen |= page
        if cursor is None:
            break
    assert seen == a_runs
    theirs, cursor = listed(TENANT_B, status="RUNNING", limit="1")
    assert theirs == b_runs
    if cursor is not None:  # a full page cannot tell it was the last
        assert listed(TENANT_B, status="RUNNING", limit="1", cursor=cursor) == (set(), None)


def test_another_tenants_sub_agent_runs_are_listed_as_none(tenants: Deployment) -> None:
    parent = _start(TENANT_A).json["run"]["run_id"]
    journal = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    started = journal.get_run(parent)
    # Started after its parent (as a sub-agent run is): newest first, it is listed first. With
    # the same start time the order would be the run ids', which are random.
    child = started.replace(
        run_id="run-child-a", parent_run_id=parent, created_at_ms=started.created_at_ms + 1
    )
    journal.create_run(child.replace(status=RunStatus.RUNNING, idempotency_key=None))

    def listed(caller: str, **query: str) -> list[str]:
        reply = request("GET", "/runs", user_arn=caller, query=query)
        assert reply.status == 200, reply.text
        return [r["run_id"] for r in reply.json["runs"]]

    assert listed(TENANT_A, parent=parent) == ["run-child-a"]
    assert listed(TENANT_A, children="true")[0] == "run-child-a"
    # Tenant B: the same answer as for a run that does not exist (nothing, not a 404).
    assert listed(TENANT_B, parent=parent) == listed(TENANT_B, parent=MISSING_RUN) == []
    assert listed(TENANT_B, children="true") == listed(TENANT_B)


def test_a_cursor_of_another_tenant_is_refused(tenants: Deployment) -> None:
    for i in range(2):
        _start(TENANT_A, idempotency_key=f"k-{i}")
    reply = request("GET", "/runs", user_arn=TENANT_A, query={"status": "RUNNING", "limit": "1"})
    cursor = reply.json["cursor"]
    assert cursor is not None
    theirs = request(
        "GET", "/runs", user_arn=TENANT_B, query={"status": "RUNNING", "cursor": cursor}
    )
    assert theirs.status == 400, theirs.text
    assert "cursor" in theirs.json["error"]["message"]


def test_idempotency_keys_are_per_tenant(tenants: Deployment) -> None:
    first = _start(TENANT_A, idempotency_key="order-42")
    other = _start(TENANT_B, idempotency_key="order-42")
    again = _start(TENANT_A, idempotency_key="order-42")
    assert (first.status, other.status, again.status) == (201, 201, 200)
    assert other.json["run"]["run_id"] != first.json["run"]["run_id"]
    assert again.json["run"]["run_id"] == first.json["run"]["run_id"]
    # A conflicting input under B's key names B's run only, never A's.
    conflict = request(
        "POST",
        "/runs",
        {"agent": "example-research", "input": {"topic": "other"}, "idempotency_key": "order-42"},
        user_arn=TENANT_B,
    )
    assert conflict.status == 409
    assert conflict.json["error"]["run_id"] == other.json["run"]["run_id"]


def test_an_unmapped_caller_is_refused_once_a_map_exists(tenants: Deployment) -> None:
    for method, path in (("GET", "/runs"), ("POST", "/runs"), ("GET", "/approvals")):
        reply = request(method, path, GOOD if method == "POST" else None, user_arn=UNMAPPED)
        assert reply.status == 403, reply.text
        assert reply.json["error"]["type"] == "TenantNotMappedError"
        assert "TENANT_MAP" in reply.json["error"]["message"]


def test_without_a_map_everyone_is_the_default_tenant(api: Deployment) -> None:
    run_id = _start(TENANT_A).json["run"]["run_id"]
    reply = request("GET", f"/runs/{run_id}", user_arn=TENANT_B)
    assert reply.status == 200 and reply.json["tenant"] == "default"


# ---------------------------------------------------------------------------------- approvals
@pytest.fixture
def a_approval(tenants: Deployment, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Tenant A's run waiting on an approval: (run id, approval id)."""
    from api.services import get_runtime

    runner = AgentTestRunner(refund, journal=_journal(), mode="faithful")
    monkeypatch.setattr(get_runtime(), "clock", runner.clock)
    header, _ = runner.runtime.start_run(refund.name, 42, tenant="a")
    result = runner.resume(header.run_id)
    assert result.status == "SUSPENDED"
    tenants.published()
    return header.run_id, str((result.header.waiting_on or {})["approval_id"])


MISSING_APPROVAL = "apr-doesnotexist"


def test_another_tenants_approval_is_404_on_every_route(a_approval: tuple[str, str]) -> None:
    _, approval_id = a_approval
    cases: list[tuple[str, str, Any, str]] = [
        ("GET", "/approvals/{}", None, TENANT_B),
        ("POST", "/approvals/{}", {"decision": "approve"}, TENANT_B),
    ]
    for method, path, body, caller in cases:
        theirs = request(method, path.format(approval_id), body, user_arn=caller)
        missing = request(method, path.format(MISSING_APPROVAL), body, user_arn=caller)
        _same_as_missing(theirs, missing, approval_id, MISSING_APPROVAL)
    assert request("GET", f"/approvals/{approval_id}", user_arn=TENANT_A).status == 200
    assert request("GET", f"/approvals/{approval_id}", user_arn=OPERATOR).status == 200
    # Nothing was decided: the operator (an approver, tenant *) still can.
    assert request("GET", f"/approvals/{approval_id}").json["status"] == "pending"


def test_a_minter_of_another_tenant_cannot_mint(
    a_approval: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, approval_id = a_approval
    monkeypatch.setenv("LINK_MINTERS", f"{ROLE}/tenant-b/*,{ROLE}/durable-agents-notifier/*")
    body = {"approver": "group:finance"}
    theirs = request("POST", f"/approvals/{approval_id}/links", body, user_arn=TENANT_B)
    missing = request("POST", f"/approvals/{MISSING_APPROVAL}/links", body, user_arn=TENANT_B)
    _same_as_missing(theirs, missing, approval_id, MISSING_APPROVAL)
    minted = request("POST", f"/approvals/{approval_id}/links", body, user_arn=NOTIFIER)
    assert minted.status == 201, minted.text


def test_the_approvals_listing_shows_only_the_callers_tenant(
    a_approval: tuple[str, str],
) -> None:
    _, approval_id = a_approval

    def listed(caller: str) -> list[str]:
        reply = request("GET", "/approvals", user_arn=caller)
        assert reply.status == 200, reply.text
        return [a["approval_id"] for a in reply.json["approvals"]]

    assert listed(TENANT_A) == [approval_id]
    assert listed(TENANT_B) == []
    assert listed(OPERATOR) == [approval_id]


def _person(tenant: Any) -> dict[str, str]:
    from api.services import get_runtime

    token = KEYS.sign(claims(get_runtime().clock, tenant=tenant))
    return {"Authorization": f"Bearer {token}"}


def test_a_person_of_another_tenant_gets_404(a_approval: tuple[str, str]) -> None:
    # ada@example.com is one of the approvers; her token says which tenant she belongs to.
    _, approval_id = a_approval
    for method, body in (("GET", None), ("POST", {"decision": "approve"})):
        theirs = request(
            method, f"/people/approvals/{approval_id}", body, headers=_person("b"), user_arn=None
        )
        missing = request(
            method,
            f"/people/approvals/{MISSING_APPROVAL}",
            body,
            headers=_person("b"),
            user_arn=None,
        )
        _same_as_missing(theirs, missing, approval_id, MISSING_APPROVAL)
    # A token without the claim (or claiming every tenant) is refused once tenants exist.
    for claim in (None, "*"):
        reply = request(
            "GET", f"/people/approvals/{approval_id}", headers=_person(claim), user_arn=None
        )
        assert reply.status == 403, reply.text
    decided = request(
        "POST",
        f"/people/approvals/{approval_id}",
        {"decision": "approve"},
        headers=_person("a"),
        user_arn=None,
    )
    assert decided.status == 200, decided.text
    assert decided.json["decision"]["decided_by"] == "user:ada@example.com"


# ------------------------------------------------------------------------------------ reviews
@pytest.fixture
def a_review(tenants: Deployment) -> str:
    """Tenant A's run paused on a tool call needing review: its operation id."""
    reviews_api.SENT.clear()
    runner = AgentTestRunner(reviews_api.notifier, journal=_journal(), mode="faithful")
    header, _ = runner.runtime.start_run(reviews_api.notifier.name, "ada@example.com", tenant="a")
    result = runner.resume(header.run_id, crash=Crash("test-notify", "after_execute"))
    assert result.status == "PAUSED"
    tenants.published()
    return f"{header.run_id}:test-notify:1"


def test_another_tenants_review_is_invisible_and_404(a_review: str) -> None:
    listed_b = request("GET", "/reviews", user_arn=TENANT_B)
    assert listed_b.status == 200 and listed_b.json["reviews"] == []
    listed_a = request("GET", "/reviews", user_arn=TENANT_A)
    assert [r["operation_id"] for r in listed_a.json["reviews"]] == [a_review]
    run_id = a_review.split(":")[0]
    body = {"decision": "abandon"}
    theirs = request("POST", f"/reviews/{a_review}", body, user_arn=TENANT_B)
    missing = request("POST", "/reviews/run-missing:test-notify:1", body, user_arn=TENANT_B)
    _same_as_missing(theirs, missing, run_id, "run-missing")
    # The operator (a declared reviewer, tenant *) decides it.
    assert request("POST", f"/reviews/{a_review}", body, user_arn=OPERATOR).status == 200


# ------------------------------------------------- listings crowded by another tenant's records
def _crowd(count: int, *, reviews: bool = True) -> None:
    """``count`` pending approvals (and calls in review) of tenant B, older than anyone's.

    Written straight into the table, 25 items a request (a listing reads records, not runs).
    """
    from durable_agents.core.models import EffectStatus, SideEffectRecord
    from durable_agents.engine.wait_records import pending_wait

    journal = _journal()
    client = boto3.client("dynamodb", region_name="us-east-1")
    items = []
    for i in range(count):
        run_id = f"run-b-crowd-{i:04d}"
        wait = pending_wait(
            run_id,
            "approval",
            f"apr-crowd{i:04d}",
            "00000001",
            f"{run_id}:approve:1",
            "approve",
            created_at_ms=i,
            timeout_ms=None,
            details={"approvers": ["group:finance"], "request": "{}"},
            tenant="b",
        )
        effect = SideEffectRecord(
            run_id=run_id,
            position="00000002",
            operation_id=f"{run_id}:test-notify:2",
            tool="test-notify",
            tool_schema_version="1",
            canonical_request="{}",
            idempotency_key=f"{run_id}:test-notify:2",
            status=EffectStatus.NEEDS_REVIEW,
            attempt=1,
            prepared_at_ms=i,
            updated_at_ms=i,
            lease_expires_at_ms=i,
            stale_at_ms=i,
            tenant="b",
        )
        items.append(journal._items.wait_item(wait))
        if reviews:
            items.append(journal._items.effect_item(effect))
    for start in range(0, len(items), 25):
        batch = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
        assert not client.batch_write_item(RequestItems={TABLE: batch}).get("UnprocessedItems")


class _Queries:
    """Counts DynamoDB Queries (and the items they return) of every client while active."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from botocore.client import BaseClient

        self.queries = 0
        self.items = 0
        original = BaseClient._make_api_call

        def counting(client: Any, operation: str, params: Any) -> Any:
            reply = original(client, operation, params)
            if operation == "Query":
                self.queries += 1
                self.items += len(reply.get("Items", []))
            return reply

        monkeypatch.setattr(BaseClient, "_make_api_call", counting)


def test_another_tenants_backlog_never_hides_the_callers_approvals(
    a_approval: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: 5,000 older pending approvals of tenant B; tenant A's one is on A's first
    page, read from A's own index partitions: one page of the index, none of B's records."""
    from durable_agents.journal.index_shards import DEFAULT_INDEX_SHARDS

    _, approval_id = a_approval
    _crowd(5_000, reviews=False)
    counted = _Queries(monkeypatch)
    reply = request("GET", "/approvals", user_arn=TENANT_A, query={"limit": "5"})
    assert [a["approval_id"] for a in reply.json["approvals"]] == [approval_id]
    assert reply.json["cursor"] is None
    # One Query per shard of A's own listing; it read A's record alone.
    assert (counted.queries, counted.items) == (DEFAULT_INDEX_SHARDS, 1)
    theirs = request("GET", "/approvals", user_arn=TENANT_B)
    assert len(theirs.json["approvals"]) == 100 and theirs.json["cursor"]
    assert {a["approval_id"] for a in theirs.json["approvals"]} <= {
        f"apr-crowd{i:04d}" for i in range(5_000)
    }


def test_another_tenants_backlog_never_hides_the_callers_reviews(a_review: str) -> None:
    _crowd(101)
    reply = request("GET", "/reviews", user_arn=TENANT_A)
    assert [r["operation_id"] for r in reply.json["reviews"]] == [a_review]
    assert reply.json["cursor"] is None


def _every_page(path: str, caller: str, key: str, **query: str) -> tuple[list[Any], int]:
    """Everything a listing shows the caller, following its cursors; and how many pages."""
    listed: list[Any] = []
    cursor: str | None = None
    for pages in range(1, 200):
        reply = request(
            "GET", path, user_arn=caller, query={**query, **({"cursor": cursor} if cursor else {})}
        )
        assert reply.status == 200, reply.text
        listed += reply.json[key]
        cursor = reply.json["cursor"]
        if cursor is None:
            return listed, pages
    raise AssertionError(f"{path} never ended")


def test_each_tenant_pages_through_its_own_approvals(a_approval: tuple[str, str]) -> None:
    _, approval_id = a_approval
    _crowd(25)
    listed, pages = _every_page("/approvals", TENANT_A, "approvals", limit="5")
    assert ([a["approval_id"] for a in listed], pages) == ([approval_id], 1)
    # Tenant B pages through its backlog 4 at a time, oldest first: nothing skipped or twice.
    theirs, pages = _every_page("/approvals", TENANT_B, "approvals", limit="4")
    assert [a["approval_id"] for a in theirs] == [f"apr-crowd{i:04d}" for i in range(25)]
    assert pages == 7
    everyone, _ = _every_page("/approvals", OPERATOR, "approvals", limit="100")
    assert len(everyone) == 26


def test_each_tenant_pages_through_its_own_reviews(a_review: str) -> None:
    _crowd(25)
    listed, _ = _every_page("/reviews", TENANT_A, "reviews")
    assert [r["operation_id"] for r in listed] == [a_review]
    theirs, _ = _every_page("/reviews", TENANT_B, "reviews", limit="3")
    assert len(theirs) == len({r["operation_id"] for r in theirs}) == 25


def test_the_console_shows_the_callers_approval_first_page(a_approval: tuple[str, str]) -> None:
    _, approval_id = a_approval
    _crowd(150)
    page = request("GET", "/console/approvals", user_arn=TENANT_A,
                   headers={"Accept": "text/html"})  # fmt: skip
    assert page.status == 200, page.text
    assert approval_id in page.text
    assert "apr-crowd" not in page.text
    assert '<a rel="next"' not in page.text


def test_a_listing_cursor_is_bound_to_its_tenant_and_query(a_review: str) -> None:
    _crowd(25)
    cursor = request("GET", "/approvals", user_arn=TENANT_B, query={"limit": "2"}).json["cursor"]
    review_cursor = request("GET", "/reviews", user_arn=TENANT_B, query={"limit": "2"}).json[
        "cursor"
    ]
    assert cursor and review_cursor
    refused = [
        ("/approvals", TENANT_A, {"cursor": cursor}),
        ("/approvals", TENANT_B, {"cursor": cursor, "status": "approved"}),
        ("/approvals", TENANT_B, {"cursor": review_cursor}),
        ("/reviews", TENANT_B, {"cursor": cursor}),
        ("/reviews", TENANT_A, {"cursor": review_cursor}),
        ("/approvals", TENANT_B, {"cursor": "garbage"}),
        ("/reviews", TENANT_B, {"cursor": "e30"}),
        ("/approvals", TENANT_B, {"cursor": "x" * 2000}),
    ]
    for path, caller, query in refused:
        reply = request("GET", path, user_arn=caller, query=query)
        assert reply.status == 400, (path, query, reply.text)
        assert "cursor" in reply.json["error"]["message"]
    assert request("GET", "/approvals", user_arn=TENANT_B, query={"cursor": cursor}).status == 200


# ---------------------------------------------------------------------------------- callbacks
def test_a_callback_id_is_its_own_authorization_whatever_the_tenant(
    tenants: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision of docs/security.md: the id's secret authorizes, not the caller's tenant.

    A shared integration (one IAM role for every tenant, here tenant B's) completes the
    callback it was handed; the public part of the id alone is 404, like any unknown id.
    """
    from api.services import get_runtime
    from tests.unit import test_api_callbacks as callbacks_api

    runner = AgentTestRunner(callbacks_api.waiter, journal=_journal(), mode="faithful")
    monkeypatch.setattr(get_runtime(), "clock", runner.clock)
    callbacks_api.HANDED.clear()
    header, _ = runner.runtime.start_run(callbacks_api.waiter.name, {}, tenant="a")
    assert runner.resume(header.run_id).status == "SUSPENDED"
    (callback_id,) = callbacks_api.HANDED
    public = callback_id.split("_")[0]
    guessed = request("POST", f"/callbacks/{public}/success", {"ok": 1}, user_arn=TENANT_B)
    assert guessed.status == 404, guessed.text
    handed = request("POST", f"/callbacks/{callback_id}/success", {"ok": 1}, user_arn=TENANT_B)
    assert handed.status == 200, handed.text
    assert runner.resume(header.run_id).output == {"result": {"ok": 1}}


def test_the_tenant_listing_module_examples_hold() -> None:
    import doctest

    from api.routes import tenant_listing

    results = doctest.testmod(tenant_listing)
    assert results.attempted > 0 and results.failed == 0
