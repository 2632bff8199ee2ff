"""Tenants in the journal, on both backends: kept, inherited, listed apart, keyed apart."""

from __future__ import annotations

from collections import Counter
from typing import Any

import boto3
import pytest

from durable_agents import DurableContext, agent
from durable_agents.core.models import RunChange, RunHeader, RunStatus
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner
from tests.contract.test_subagents_contract import make_agents


def _header(run_id: str, tenant: str, *, key: str | None = None, at: int = 1) -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent="a",
        versions={},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=at,
        updated_at_ms=at,
        idempotency_key=key,
        input_hash="h",
        tenant=tenant,
    )


def test_the_tenant_is_kept_through_every_change(journal: JournalStore) -> None:
    journal.create_run(_header("run-1", "acme"))
    journal.commit(
        "run-1",
        [],
        RunChange(
            status=RunStatus.SUSPENDED,
            expected=frozenset({RunStatus.RUNNING}),
            updated_at_ms=5,
            wake_at_ms=None,
        ),
    )
    assert journal.get_run("run-1").tenant == "acme"
    assert journal.load("run-1").header.tenant == "acme"


def test_a_sub_agent_run_inherits_its_parents_tenant(journal: JournalStore) -> None:
    lead, researcher = make_agents(Counter())
    runner = AgentTestRunner(lead, journal=journal, mode="faithful", agents=[researcher])
    header, _ = runner.runtime.start_run(lead.name, "tides", tenant="acme")
    result = runner.resume(header.run_id)
    assert result.status == "SUCCEEDED", result.error
    child_id = result.operation("delegate").entries[-1].meta["child_run_id"]
    assert journal.get_run(child_id).tenant == "acme"


def test_listings_read_one_tenant_in_full_pages(journal: JournalStore) -> None:
    for i in range(5):
        journal.create_run(_header(f"run-a{i}", "a", at=10 + 2 * i))
        journal.create_run(_header(f"run-b{i}", "b", at=11 + 2 * i))
    seen: list[str] = []
    cursor = None
    while True:
        page = journal.list_runs(status=RunStatus.RUNNING, limit=2, cursor=cursor, tenant="a")
        assert len(page.runs) == 2 or page.cursor is None
        seen += [h.run_id for h in page.runs]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == [f"run-a{i}" for i in reversed(range(5))]  # newest first
    merged = journal.list_runs(tenant="b").runs
    assert [h.run_id for h in merged] == [f"run-b{i}" for i in reversed(range(5))]
    assert len(journal.list_runs(limit=100).runs) == 10  # no tenant: every run (trusted callers)


def test_idempotency_keys_are_per_tenant(journal: JournalStore) -> None:
    first, created = journal.create_run(_header("run-1", "a", key="k"))
    other, other_created = journal.create_run(_header("run-2", "b", key="k"))
    again, again_created = journal.create_run(_header("run-3", "a", key="k"))
    assert (created, other_created, again_created) == (True, True, False)
    assert (first.run_id, other.run_id, again.run_id) == ("run-1", "run-2", "run-1")


def test_the_runtime_refuses_a_malformed_tenant(runtime: Runtime) -> None:
    @agent(name="noop", version="1", registry=runtime.registry)
    def noop(ctx: DurableContext) -> None:
        return None

    for bad in ("", "*", "a#b", "x" * 65):
        with pytest.raises(ValueError, match="tenant"):
            runtime.start_run("noop", None, tenant=bad)


def _as_before_listing_items(client: Any, run_id: str) -> None:
    """Rewrites a run as written before tenants and listing items: no tenant, no #LIST, the
    header in the start-time index itself (ADR 0012's layout)."""
    client.delete_item(
        TableName="journal", Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "#LIST"}}
    )
    header = client.get_item(
        TableName="journal", Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "#RUN"}}
    )["Item"]
    client.update_item(
        TableName="journal",
        Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "#RUN"}},
        UpdateExpression="SET gsi4pk = :p, gsi4sk = :s REMOVE tenant",
        ExpressionAttributeValues={
            ":p": {"S": "STARTED#0"},
            ":s": {"S": f"{int(header['created_at_ms']['N']):013d}#{run_id}"},
        },
    )


def test_a_header_from_before_tenants_is_the_default_tenants(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    from durable_agents.journal.backfill import backfill_index_layout
    from durable_agents.journal.index_shards import IndexShards

    client = boto3.client("dynamodb", region_name="us-east-1")
    journal = DynamoDBJournal(client, "journal")
    journal.create_run(_header("run-old", DEFAULT_TENANT))
    _as_before_listing_items(client, "run-old")
    assert journal.get_run("run-old").tenant == DEFAULT_TENANT
    # The operators' listing reads the header's own start-time key meanwhile; a tenant's
    # listing (its own partitions) has it once the backfill gave it a listing item.
    assert [h.run_id for h in journal.list_runs().runs] == ["run-old"]
    assert journal.list_runs(tenant=DEFAULT_TENANT).runs == []
    report = backfill_index_layout(client, "journal", IndexShards())
    assert (report.listed, report.skipped) == (1, 0)
    listed = journal.list_runs(tenant=DEFAULT_TENANT).runs
    assert [(h.run_id, h.tenant) for h in listed] == [("run-old", DEFAULT_TENANT)]
    assert [h.run_id for h in journal.list_runs().runs] == ["run-old"]  # once, not twice


def test_run_tenants_names_existing_runs_only(journal: JournalStore) -> None:
    journal.create_run(_header("run-1", "a"))
    journal.create_run(_header("run-2", DEFAULT_TENANT))
    ids = ["run-1", "run-2", "run-missing", "run-1"]
    assert journal.run_tenants(ids) == {"run-1": "a", "run-2": DEFAULT_TENANT}
    many = [f"run-x{i:03d}" for i in range(130)]  # more than one BatchGetItem
    for run_id in many:
        journal.create_run(_header(run_id, "b"))
    assert journal.run_tenants(many) == dict.fromkeys(many, "b")


def _five_waits_and_reviews(journal: JournalStore) -> None:
    from durable_agents.core.models import EffectChange, EffectStatus, SideEffectRecord, WaitChange
    from durable_agents.engine.wait_records import pending_wait

    for i in range(5):
        run_id = f"run-{i}"
        journal.create_run(_header(run_id, "a", at=i))
        wait = pending_wait(run_id, "approval", f"apr-{i}", "00000001", f"{run_id}:ok:1", "ok",
                            created_at_ms=10 + i, timeout_ms=None, details={},
                            tenant="a" if i % 2 else "b")  # fmt: skip
        journal.commit(run_id, [], None, None, WaitChange(wait))
        effect = SideEffectRecord(run_id, "00000002", f"{run_id}:t:2", "t", "1", "{}", "k",
                                  EffectStatus.NEEDS_REVIEW, 1, i, 20 + i, i, i,
                                  tenant="a" if i % 2 else "b")  # fmt: skip
        journal.commit(run_id, [], None, EffectChange(effect))


def test_waits_and_reviews_are_paged_in_index_order(journal: JournalStore) -> None:
    from durable_agents.core.models import WaitStatus

    _five_waits_and_reviews(journal)
    waits, reviews, cursor, review_cursor = [], [], None, None
    while True:
        page = journal.waits_page("approval", WaitStatus.PENDING, limit=2, cursor=cursor)
        waits += [w.wait_id for w in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    while True:
        effects = journal.reviews_page(limit=2, cursor=review_cursor)
        reviews += [e.run_id for e in effects.items]
        review_cursor = effects.cursor
        if review_cursor is None:
            break
    assert waits == [f"apr-{i}" for i in range(5)]
    assert reviews == [f"run-{i}" for i in range(5)]


def test_a_tenant_lists_its_own_waits_and_reviews_only(journal: JournalStore) -> None:
    from durable_agents.core.models import WaitStatus

    _five_waits_and_reviews(journal)
    for tenant, expected in (("a", [1, 3]), ("b", [0, 2, 4])):
        waits = journal.waits_page("approval", WaitStatus.PENDING, limit=10, tenant=tenant)
        assert [w.wait_id for w in waits.items] == [f"apr-{i}" for i in expected]
        assert {w.tenant for w in waits.items} == {tenant}
        reviews = journal.reviews_page(limit=10, tenant=tenant)
        assert [e.run_id for e in reviews.items] == [f"run-{i}" for i in expected]
    one = journal.waits_page("approval", WaitStatus.PENDING, limit=1, tenant="b")
    rest = journal.waits_page("approval", WaitStatus.PENDING, limit=10, tenant="b",
                              cursor=one.cursor)  # fmt: skip
    assert [w.wait_id for w in one.items + rest.items] == ["apr-0", "apr-2", "apr-4"]
    with pytest.raises(ValueError, match="not listed per tenant"):
        journal.waits_page("event", WaitStatus.PENDING, tenant="a")


def test_the_backfill_lists_headers_from_before_tenants(
    dynamodb_journal: DynamoDBJournal, capsys: pytest.CaptureFixture[str]
) -> None:
    from durable_agents.journal.backfill import backfill_index_layout
    from durable_agents.journal.index_shards import IndexShards
    from scripts.backfill_index_layout import main

    client = boto3.client("dynamodb", region_name="us-east-1")
    journal = DynamoDBJournal(client, "journal")
    for i, run_id in enumerate(("run-old-1", "run-old-2")):
        journal.create_run(_header(run_id, DEFAULT_TENANT, at=i + 1))
        _as_before_listing_items(client, run_id)
    journal.create_run(_header("run-new", "acme"))
    assert journal.list_runs(tenant=DEFAULT_TENANT).runs == []
    assert main(["--table", "journal", "--shards", "8"], client=client) == 0
    out = capsys.readouterr().out
    assert "2 run(s) given a listing item" in out
    listed = journal.list_runs(status=RunStatus.RUNNING, tenant=DEFAULT_TENANT).runs
    assert [h.run_id for h in listed] == ["run-old-2", "run-old-1"]  # newest first
    assert [h.run_id for h in journal.list_runs(tenant="acme").runs] == ["run-new"]
    again = backfill_index_layout(client, "journal", IndexShards())
    assert (again.listed, again.moved) == (0, 0)  # again: nothing left to do
