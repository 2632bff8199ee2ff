"""Tenants in the journal, on both backends: kept, inherited, listed apart, keyed apart."""

from __future__ import annotations

from collections import Counter

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
            status=RunStatus.SUSPENDED, expected=frozenset({RunStatus.RUNNING}), updated_at_ms=5
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


def test_a_header_from_before_tenants_is_the_default_tenants(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    journal = DynamoDBJournal(client, "journal")
    journal.create_run(_header("run-old", DEFAULT_TENANT))
    # As written before tenants: no tenant attribute, not in the tenant index.
    client.update_item(
        TableName="journal",
        Key={"pk": {"S": "RUN#run-old"}, "sk": {"S": "#RUN"}},
        UpdateExpression="REMOVE tenant, gsi3pk, gsi3sk, gsi4pk, gsi4sk",
    )
    assert journal.get_run("run-old").tenant == DEFAULT_TENANT
    assert journal.list_runs(tenant=DEFAULT_TENANT).runs == []
    from durable_agents.journal.backfill import backfill_start_index

    assert backfill_start_index(client, "journal") == 1
    journal.commit(
        "run-old",
        [],
        RunChange(
            status=RunStatus.SUSPENDED, expected=frozenset({RunStatus.RUNNING}), updated_at_ms=9
        ),
    )
    # Backfilled into the start-time index, it is listed as the default tenant's.
    listed = journal.list_runs(tenant=DEFAULT_TENANT).runs
    assert [(h.run_id, h.tenant) for h in listed] == [("run-old", DEFAULT_TENANT)]


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
                            created_at_ms=10 + i, timeout_ms=None, details={})  # fmt: skip
        journal.commit(run_id, [], None, None, WaitChange(wait))
        effect = SideEffectRecord(run_id, "00000002", f"{run_id}:t:2", "t", "1", "{}", "k",
                                  EffectStatus.NEEDS_REVIEW, 1, i, 20 + i, i, i)  # fmt: skip
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


def test_the_backfill_lists_headers_from_before_tenants(
    dynamodb_journal: DynamoDBJournal, capsys: pytest.CaptureFixture[str]
) -> None:
    from durable_agents.journal.backfill import backfill_tenant_index
    from scripts.backfill_tenants import main

    client = boto3.client("dynamodb", region_name="us-east-1")
    journal = DynamoDBJournal(client, "journal")
    for i, run_id in enumerate(("run-old-1", "run-old-2")):
        journal.create_run(_header(run_id, DEFAULT_TENANT, at=i + 1))
        client.update_item(
            TableName="journal",
            Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "#RUN"}},
            UpdateExpression="REMOVE tenant, gsi3pk, gsi3sk, gsi4pk, gsi4sk",
        )
    journal.create_run(_header("run-new", "acme"))
    assert journal.list_runs(tenant=DEFAULT_TENANT).runs == []
    assert main(["--table", "journal"]) == 0
    out = capsys.readouterr().out
    assert "2 run header(s) put into the default" in out
    assert "2 run header(s) put into the start-time index" in out
    listed = journal.list_runs(status=RunStatus.RUNNING, tenant=DEFAULT_TENANT).runs
    assert [h.run_id for h in listed] == ["run-old-2", "run-old-1"]  # newest first
    assert [h.run_id for h in journal.list_runs(tenant="acme").runs] == ["run-new"]
    assert backfill_tenant_index(client, "journal") == 0  # again: nothing left to do


def test_a_listing_continues_right_after_any_item_of_a_page(journal: JournalStore) -> None:
    # A caller that keeps only part of a page (the Api keeps the caller's tenant's records)
    # continues from the position of the last record it kept: nothing skipped, nothing twice.
    from durable_agents.core.models import WaitStatus

    _five_waits_and_reviews(journal)
    page = journal.waits_page("approval", WaitStatus.PENDING, limit=4)
    assert [w.wait_id for w in page.items] == ["apr-0", "apr-1", "apr-2", "apr-3"]
    assert len(page.positions) == len(page.items)
    after_second = journal.waits_page(
        "approval", WaitStatus.PENDING, limit=4, cursor=page.cursor_after(1)
    )
    assert [w.wait_id for w in after_second.items] == ["apr-2", "apr-3", "apr-4"]
    assert page.cursor_after(3) == page.cursor
    reviews = journal.reviews_page(limit=5)
    rest = journal.reviews_page(limit=5, cursor=reviews.cursor_after(2))
    assert [e.run_id for e in rest.items] == ["run-3", "run-4"]


@pytest.mark.parametrize(
    "cursor",
    ["not base64!", "e30=", "W10=", "eyJwayI6IDF9", "\u00b2", "", "a" * 900],
)
def test_a_cursor_the_journal_did_not_hand_out_is_refused(
    journal: JournalStore, cursor: str
) -> None:
    from durable_agents.core.models import WaitStatus
    from durable_agents.errors import InvalidCursorError

    _five_waits_and_reviews(journal)
    with pytest.raises(InvalidCursorError):
        journal.waits_page("approval", WaitStatus.PENDING, limit=2, cursor=cursor)
    with pytest.raises(InvalidCursorError):
        journal.reviews_page(limit=2, cursor=cursor)


def test_a_cursor_of_another_listing_is_refused(journal: JournalStore) -> None:
    from durable_agents.core.models import WaitStatus
    from durable_agents.errors import InvalidCursorError

    _five_waits_and_reviews(journal)
    waits = journal.waits_page("approval", WaitStatus.PENDING, limit=2)
    reviews = journal.reviews_page(limit=2)
    assert waits.cursor is not None and reviews.cursor is not None
    with pytest.raises(InvalidCursorError):
        journal.reviews_page(limit=2, cursor=waits.cursor)
    with pytest.raises(InvalidCursorError):
        journal.waits_page("approval", WaitStatus.PENDING, limit=2, cursor=reviews.cursor)
    with pytest.raises(InvalidCursorError):
        journal.waits_page("callback", WaitStatus.PENDING, limit=2, cursor=waits.cursor)
