"""The index layout backfill (ADR 0029) on moto: a table of every run state in the old layout.

A journal of runs in every state (running, suspended with and without a timer, paused, on a
missing version, finished and not yet stamped, finished and stamped, a sub-agent run, two
tenants and a header from before tenants), with a PREPARED call, calls in review, a pending
approval with a deadline, a decided approval and a callback, is rewritten into the layout
before ADR 0029 (``as_old_layout``). The backfill then runs page by page while runs suspend,
resume and finish, a stamping pass runs and a wait is settled between its pages; after every
page each listing the reconciler and the operators read is checked against the records
themselves (``listing_problems``): nothing missing, nothing listed twice. After the pass every
item's index keys are the ones ``index_keys`` computes (``layout_problems``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    RunChange,
    RunHeader,
    RunStatus,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.engine.wait_records import pending_wait
from durable_agents.journal.backfill import BackfillReport, backfill_index_layout
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.index_keys import (
    INDEX_ATTRS,
    LISTING_SK,
    effect_keys,
    header_keys,
    listing_item,
    wait_keys,
)
from durable_agents.journal.index_shards import IndexShards
from durable_agents.journal.store import Page

TABLE = "journal"
NOW = 9_000_000_000_000  # every timer, deadline and stamping due time is before it
ACME, BETA = "acme", "beta"
UNFINISHED = (
    RunStatus.RUNNING,
    RunStatus.PAUSED,
    RunStatus.VERSION_UNAVAILABLE,
    RunStatus.SUSPENDED,
)
Item = dict[str, Any]
PAGE = 3  # records per listing page: every listing of the world takes more than one


# -- the world ---------------------------------------------------------------------------------


def header(run_id: str, tenant: str, at: int, parent: str | None = None) -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent="a",
        versions={},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=at,
        updated_at_ms=at,
        input_hash="h",
        tenant=tenant,
        parent_run_id=parent,
    )


def change(
    journal: DynamoDBJournal, run_id: str, status: RunStatus, at: int, wake: int | None = None
) -> None:
    """Moves a run to ``status`` (from whatever it is in), as the runtime would."""
    current = journal.get_run(run_id).status
    extra: dict[str, Any] = {"wake_at_ms": wake} if status is RunStatus.SUSPENDED else {}
    journal.commit(
        run_id,
        [],
        RunChange(expected=frozenset({current}), status=status, updated_at_ms=at, **extra),
    )


def effect(run_id: str, position: str, status: EffectStatus, at: int, tenant: str) -> Any:
    return SideEffectRecord(
        run_id=run_id,
        position=position,
        operation_id=f"{run_id}:t:{position}",
        tool="t",
        tool_schema_version="1",
        canonical_request="{}",
        idempotency_key=f"k-{run_id}-{position}",
        status=status,
        attempt=1,
        prepared_at_ms=at,
        updated_at_ms=at,
        lease_expires_at_ms=at + 10,
        stale_at_ms=at + 20,
        tenant=tenant,
    )


def wait(
    run_id: str, kind: str, wait_id: str, at: int, tenant: str, *, timeout: int | None
) -> WaitRecord:
    heartbeat = 500 if kind == "callback" else None
    return pending_wait(run_id, kind, wait_id, "00000003", f"{run_id}:{wait_id}:3", wait_id,
                        created_at_ms=at, timeout_ms=timeout, details={},
                        heartbeat_ms=heartbeat, tenant=tenant)  # fmt: skip


def stamp_fully(journal: DynamoDBJournal, run_id: str) -> None:
    """Stamping passes until the run is in no listing (the second one after the grace)."""
    for _ in range(3):
        if journal.get_run(run_id).stamp_due_at_ms is None:
            return
        journal.stamp_expiry(run_id, NOW)
    raise AssertionError(f"{run_id} still listed for stamping")


def build_world(journal: DynamoDBJournal, filler: int = 0) -> None:
    """Runs in every state, of two tenants (and the default one), with calls and waits.

    ``filler`` more running and suspended runs of both tenants (more pages to interleave).
    """
    at = 1_000
    runs = [
        ("r-running", ACME, None),
        ("r-sleep", ACME, None),
        ("r-nowake", BETA, None),
        ("r-paused", BETA, None),
        ("r-version", ACME, None),
        ("r-expiring", ACME, None),
        ("r-stamped", BETA, None),
        ("r-parent", ACME, None),
        ("r-child", ACME, "r-parent"),
        ("r-old", DEFAULT_TENANT, None),
    ]
    runs += [(f"r-fill{i:02d}", (ACME, BETA)[i % 2], None) for i in range(filler)]
    for i, (run_id, tenant, parent) in enumerate(runs):
        journal.create_run(header(run_id, tenant, at + i, parent))
    change(journal, "r-sleep", RunStatus.SUSPENDED, 2_000, wake=5_000)
    change(journal, "r-nowake", RunStatus.SUSPENDED, 2_001, wake=None)
    change(journal, "r-paused", RunStatus.PAUSED, 2_002)
    change(journal, "r-version", RunStatus.VERSION_UNAVAILABLE, 2_003)
    change(journal, "r-expiring", RunStatus.SUCCEEDED, 2_004)
    change(journal, "r-stamped", RunStatus.FAILED, 2_005)
    stamp_fully(journal, "r-stamped")
    change(journal, "r-child", RunStatus.SUSPENDED, 2_006, wake=None)
    for i in range(filler):
        if i % 3 == 1:
            change(journal, f"r-fill{i:02d}", RunStatus.SUSPENDED, 2_100 + i, wake=6_000 + i)
        elif i % 3 == 2:
            change(journal, f"r-fill{i:02d}", RunStatus.SUSPENDED, 2_100 + i, wake=None)
    effects = [
        effect("r-running", "00000002", EffectStatus.PREPARED, 3_000, ACME),
        effect("r-paused", "00000002", EffectStatus.NEEDS_REVIEW, 3_001, BETA),
        effect("r-old", "00000002", EffectStatus.NEEDS_REVIEW, 3_002, DEFAULT_TENANT),
        effect("r-version", "00000002", EffectStatus.NEEDS_REVIEW, 3_003, ACME),
    ]
    for record in effects:
        journal.commit(record.run_id, [], None, EffectChange(record))
    waits = [
        wait("r-nowake", "approval", "apr-due", 4_000, BETA, timeout=50_000),
        wait("r-running", "approval", "apr-done", 4_001, ACME, timeout=None),
        wait("r-child", "callback", "cb-1", 4_002, ACME, timeout=None),
        wait("r-parent", "approval", "apr-open", 4_003, ACME, timeout=60_000),
        wait("r-old", "approval", "apr-old", 4_004, DEFAULT_TENANT, timeout=70_000),
    ]
    for record in waits:
        journal.commit(record.run_id, [], None, None, WaitChange(record))
    settle(journal, "apr-done", 4_500)


def settle(journal: DynamoDBJournal, wait_id: str, at: int) -> None:
    """Decides a pending wait as a person would: from a consistent read of the record."""
    record = journal.get_wait(wait_id)
    done = dataclasses.replace(
        record, status=WaitStatus.COMPLETED, updated_at_ms=at, outcome={"approved": True}
    )
    journal.commit(
        record.run_id, [], None, None, WaitChange(done, expected=frozenset({WaitStatus.PENDING}))
    )


# -- the layout before ADR 0029 ----------------------------------------------------------------


def ts(ms: int) -> str:
    return f"{ms:013d}"


def scan(client: Any) -> list[Item]:
    items: list[Item] = []
    kwargs: dict[str, Any] = {"TableName": TABLE, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _num(item: Item, name: str) -> int | None:
    return int(item[name]["N"]) if name in item else None


def old_keys(item: Item) -> Item | None:
    """An item's index keys as the code before ADR 0029 wrote them (None: not indexed)."""
    sk = item["sk"]["S"]
    if sk == "#RUN":
        run_id, status = item["run_id"]["S"], item["status"]["S"]
        updated = ts(int(item["updated_at_ms"]["N"]))
        keys: Item = {
            "gsi1pk": {"S": f"STATUS#{status}"},
            "gsi1sk": {"S": f"{updated}#{run_id}"},
        }
        wake, due = _num(item, "wake_at_ms"), _num(item, "stamp_due_at_ms")
        if status == "SUSPENDED" and wake is not None:
            keys |= {"gsi2pk": {"S": "WAKE"}, "gsi2sk": {"S": f"{ts(wake)}#{run_id}"}}
        if RunStatus(status).terminal and due is not None:
            keys |= {"gsi2pk": {"S": "EXPIRING"}, "gsi2sk": {"S": f"{ts(due)}#{run_id}"}}
        if "tenant" in item:
            keys |= {
                "gsi3pk": {"S": f"TENANT#{item['tenant']['S']}"},
                "gsi3sk": {"S": f"{status}#{updated}#{run_id}"},
            }
        kind = "CHILDREN" if "parent_run_id" in item else "STARTED"
        shard = hashlib.sha256(run_id.encode()).digest()[0] % 4
        created = ts(int(item["created_at_ms"]["N"]))
        keys |= {"gsi4pk": {"S": f"{kind}#{shard}"}, "gsi4sk": {"S": f"{created}#{run_id}"}}
        return keys
    if sk.startswith("S#"):
        ident = f"{item['pk']['S'].removeprefix('RUN#')}#{sk.removeprefix('S#')}"
        if item["status"]["S"] == "PREPARED":
            stale = ts(int(item["stale_at_ms"]["N"]))
            return {"gsi2pk": {"S": "PREPARED"}, "gsi2sk": {"S": f"{stale}#{ident}"}}
        if item["status"]["S"] == "NEEDS_REVIEW":
            updated = ts(int(item["updated_at_ms"]["N"]))
            return {"gsi1pk": {"S": "EFFECT#NEEDS_REVIEW"}, "gsi1sk": {"S": f"{updated}#{ident}"}}
        return {}
    if sk == "#WAIT":
        wait_id, status = item["wait_id"]["S"], item["status"]["S"]
        keys = {
            "gsi1pk": {"S": f"WAIT#{item['kind']['S']}#{status}"},
            "gsi1sk": {"S": f"{ts(int(item['created_at_ms']['N']))}#{wait_id}"},
        }
        dues = [d for d in (_num(item, "deadline_ms"), _num(item, "heartbeat_deadline_ms")) if d]
        if status == "PENDING" and dues:
            keys |= {"gsi2pk": {"S": "WAITDUE"}, "gsi2sk": {"S": f"{ts(min(dues))}#{wait_id}"}}
        return keys
    return None


def as_old_layout(client: Any, *, untenanted: tuple[str, ...] = ("r-old",)) -> None:
    """Rewrites every item as the code before ADR 0029 left it (module docstring).

    No listing items; headers keyed as listed in the brief of ADR 0029; effects and waits
    without ``tenant``; the headers of ``untenanted`` without ``tenant`` and ``revision``.
    """
    for item in scan(client):
        sk = item["sk"]["S"]
        if sk == LISTING_SK:
            client.delete_item(TableName=TABLE, Key={"pk": item["pk"], "sk": item["sk"]})
            continue
        keys = old_keys(item)
        if keys is None:
            continue
        old = {name: value for name, value in item.items() if name not in INDEX_ATTRS}
        if sk != "#RUN" or item["run_id"]["S"] in untenanted:
            old.pop("tenant", None)
        if sk == "#RUN" and item["run_id"]["S"] in untenanted:
            old.pop("revision", None)
        old |= old_keys(old) or {}
        client.put_item(TableName=TABLE, Item=old)


# -- what the listings must show -----------------------------------------------------------------


def paged(method: Callable[..., Page[Any]], *args: Any, **kwargs: Any) -> Callable[..., Page[Any]]:
    """A listing's page reader: ``method(*args, limit=PAGE, cursor=…, **kwargs)``."""
    return lambda cursor: method(*args, limit=PAGE, cursor=cursor, **kwargs)


def run_ident(header: Any) -> str:
    return str(header.run_id)


def wait_ident(record: Any) -> str:
    return str(record.wait_id)


def read_all(read: Callable[[str | None], Page[Any]], ident: Callable[[Any], str]) -> list[str]:
    """Every record of a paged listing, in order (``PAGE`` a page: cursors are exercised)."""
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(200):
        page = read(cursor)
        seen += [ident(record) for record in page.items]
        cursor = page.cursor
        if cursor is None:
            return seen
    raise AssertionError("a listing that never ends")


def all_runs(journal: DynamoDBJournal, tenant: str | None = None) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(200):
        page = journal.list_runs(limit=3, cursor=cursor, tenant=tenant, include_children=True)
        seen += [h.run_id for h in page.runs]
        cursor = page.cursor
        if cursor is None:
            return seen
    raise AssertionError("a run listing that never ends")


def _records(client: Any) -> tuple[dict[str, Item], list[Item], list[Item]]:
    items = scan(client)
    headers = {i["run_id"]["S"]: i for i in items if i["sk"]["S"] == "#RUN"}
    effects = [i for i in items if i["sk"]["S"].startswith("S#")]
    waits = [i for i in items if i["sk"]["S"] == "#WAIT"]
    return headers, effects, waits


def _twice(what: str, seen: list[str]) -> list[str]:
    return [f"{what} lists {k} {n} times" for k, n in Counter(seen).items() if n > 1]


def _compare(
    what: str, seen: list[str], wanted: set[str], extra: set[str] | None = None
) -> list[str]:
    problems = _twice(what, seen)
    missing = wanted - set(seen)
    unexpected = set(seen) - wanted - (extra or set())
    if missing:
        problems.append(f"{what} misses {sorted(missing)}")
    if unexpected:
        problems.append(f"{what} lists {sorted(unexpected)}, which it should not")
    return problems


def listing_problems(journal: DynamoDBJournal, client: Any, *, tenants: bool = False) -> list[str]:
    """Each listing against the records the table holds (strongly consistent scan).

    ``tenants``: the tenants' own listings too (complete only once the backfill is done).
    """
    headers, effects, waits = _records(client)
    problems: list[str] = []

    def wanted_runs(pred: Callable[[Item], bool]) -> set[str]:
        return {r for r, h in headers.items() if pred(h)}

    due = wanted_runs(lambda h: h["status"]["S"] == "SUSPENDED" and "wake_at_ms" in h)
    problems += _compare(
        "due_runs_page",
        read_all(paged(journal.due_runs_page, NOW), run_ident),
        due,
    )
    expiring = wanted_runs(
        lambda h: RunStatus(h["status"]["S"]).terminal and "stamp_due_at_ms" in h
    )
    problems += _compare(
        "expiring_runs_page",
        read_all(paged(journal.expiring_runs_page, NOW), run_ident),
        expiring,
    )
    for each in UNFINISHED:
        wanted = {r for r, h in headers.items() if h["status"]["S"] == each.value}
        extra: set[str] = set()
        if each is RunStatus.SUSPENDED:
            # Headers the backfill has not reached yet still sit in STATUS#SUSPENDED with
            # their timer (the old layout listed every status there): listed, not lost.
            extra = {r for r in due if headers[r].get("gsi1pk", {}).get("S") == "STATUS#SUSPENDED"}
            wanted -= due
        listed = read_all(paged(journal.changed_runs_page, each), run_ident)
        problems += _compare(f"changed_runs_page({each.value})", listed, wanted, extra)

    def ident(record: Any) -> str:
        return f"{record.run_id}#{record.position}"

    def effect_id(item: Item) -> str:
        return f"{item['pk']['S'].removeprefix('RUN#')}#{item['sk']['S'].removeprefix('S#')}"

    problems += _compare(
        "stale_effects_page",
        read_all(paged(journal.stale_effects_page, NOW), ident),
        {effect_id(i) for i in effects if i["status"]["S"] == "PREPARED"},
    )
    in_review = [i for i in effects if i["status"]["S"] == "NEEDS_REVIEW"]
    problems += _compare(
        "reviews_page",
        read_all(paged(journal.reviews_page), ident),
        {effect_id(i) for i in in_review},
    )

    def due_at(item: Item) -> int | None:
        dues = [_num(item, "deadline_ms"), _num(item, "heartbeat_deadline_ms")]
        return min((d for d in dues if d is not None), default=None)

    problems += _compare(
        "due_waits_page",
        read_all(paged(journal.due_waits_page, NOW), wait_ident),
        {i["wait_id"]["S"] for i in waits if i["status"]["S"] == "PENDING" and due_at(i)},
    )
    kinds = {(i["kind"]["S"], i["status"]["S"]) for i in waits}
    for kind, state in sorted(kinds):
        problems += _compare(
            f"waits_page({kind}, {state})",
            read_all(paged(journal.waits_page, kind, WaitStatus(state)), wait_ident),
            {
                i["wait_id"]["S"]
                for i in waits
                if (i["kind"]["S"], i["status"]["S"]) == (kind, state)
            },
        )
    problems += _compare("list_runs()", all_runs(journal), set(headers))
    if not tenants:
        return problems
    tenant_of = {r: h.get("tenant", {}).get("S", DEFAULT_TENANT) for r, h in headers.items()}
    for tenant in sorted(set(tenant_of.values())):
        problems += _compare(
            f"list_runs(tenant={tenant})",
            all_runs(journal, tenant),
            {r for r, t in tenant_of.items() if t == tenant},
        )
        problems += _compare(
            f"reviews_page(tenant={tenant})",
            read_all(paged(journal.reviews_page, tenant=tenant), ident),
            {effect_id(i) for i in in_review if tenant_of[effect_id(i).split("#")[0]] == tenant},
        )
        for kind, state in sorted(kinds):
            problems += _compare(
                f"waits_page({kind}, {state}, tenant={tenant})",
                read_all(
                    paged(journal.waits_page, kind, WaitStatus(state), tenant=tenant), wait_ident
                ),
                {
                    i["wait_id"]["S"]
                    for i in waits
                    if (i["kind"]["S"], i["status"]["S"]) == (kind, state)
                    and tenant_of[i["run_id"]["S"]] == tenant
                },
            )
    return problems


def layout_problems(client: Any, shards: IndexShards) -> list[str]:
    """Every item's index keys against ``index_keys``; no key of the old layout left."""
    items = scan(client)
    headers = {i["run_id"]["S"]: i for i in items if i["sk"]["S"] == "#RUN"}
    listings = {i["run_id"]["S"]: i for i in items if i["sk"]["S"] == LISTING_SK}
    tenant_of = {r: h.get("tenant", {}).get("S", DEFAULT_TENANT) for r, h in headers.items()}
    problems: list[str] = []

    def keys(item: Item) -> Item:
        return {name: item[name] for name in INDEX_ATTRS if name in item}

    for item in items:
        sk, where = item["sk"]["S"], f"{item['pk']['S']}/{item['sk']['S']}"
        if sk == "#RUN":
            wanted = header_keys(item, shards)
            listed = listings.get(item["run_id"]["S"])
            if listed is None:
                problems.append(f"{where} has no listing item")
            else:
                expected = listing_item(item, shards)
                got = {n: listed.get(n) for n in expected}
                if got != expected:
                    problems.append(f"{where}'s listing item is {got}, not {expected}")
        elif sk.startswith("S#"):
            wanted = effect_keys(item, shards)
            run_id = item["pk"]["S"].removeprefix("RUN#")
            if item.get("tenant", {}).get("S") != tenant_of.get(run_id):
                problems.append(
                    f"{where} has tenant {item.get('tenant')}, its run's is {tenant_of.get(run_id)}"
                )
        elif sk == "#WAIT":
            wanted = wait_keys(item, shards)
            run_id = item["run_id"]["S"]
            if item.get("tenant", {}).get("S") != tenant_of.get(run_id):
                problems.append(
                    f"{where} has tenant {item.get('tenant')}, its run's is {tenant_of.get(run_id)}"
                )
        elif sk == LISTING_SK:
            continue  # checked with its header
        else:
            wanted = {}
        if keys(item) != wanted:
            problems.append(f"{where} has keys {keys(item)}, not {wanted}")
    return problems


# -- tests -----------------------------------------------------------------------------------------


@pytest.fixture
def client(dynamodb_journal: DynamoDBJournal) -> Any:
    return boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def journal(client: Any) -> DynamoDBJournal:
    return DynamoDBJournal(client, TABLE, index_shards=8)


def test_the_old_layout_is_what_the_readers_of_the_transition_read(
    client: Any, journal: DynamoDBJournal
) -> None:
    build_world(journal)
    assert layout_problems(client, IndexShards(8)) == []  # the code writes the new layout
    assert listing_problems(journal, client, tenants=True) == []
    as_old_layout(client)
    assert not [i for i in scan(client) if i["sk"]["S"] == LISTING_SK]
    assert "tenant" not in journal_header_item(client, "r-old")
    assert listing_problems(journal, client) == []  # every listing reads the old layout too
    assert len(layout_problems(client, IndexShards(8))) > 20


def journal_header_item(client: Any, run_id: str) -> Item:
    return dict(
        client.get_item(TableName=TABLE, Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "#RUN"}})[
            "Item"
        ]
    )


def paged_pass(
    client: Any,
    shards: IndexShards,
    between: Callable[[int], None] | None = None,
    page_size: int = 3,
) -> Iterator[BackfillReport]:
    """The backfill one scan page at a time, resumed from each report's key."""
    start: dict[str, Any] | None = None
    page = 0
    while True:
        report = backfill_index_layout(
            client, TABLE, shards, start_key=start, max_pages=1, page_size=page_size
        )
        yield report
        page += 1
        if report.resume is None:
            return
        if between is not None:
            between(page)
        start = report.resume


def test_a_paged_backfill_with_changes_between_pages_loses_nothing(
    client: Any, journal: DynamoDBJournal
) -> None:
    build_world(journal, filler=4)
    as_old_layout(client)
    shards = IndexShards(8)

    def changes(page: int) -> None:
        # Real changes of runs in the old layout and of ones the pass has moved already.
        at = 10_000 + page
        steps: dict[int, Callable[[], None]] = {
            1: lambda: change(journal, "r-running", RunStatus.SUSPENDED, at, wake=7_000),
            2: lambda: stamp_fully(journal, "r-expiring"),
            3: lambda: settle(journal, "apr-old", at),
            4: lambda: change(journal, "r-nowake", RunStatus.RUNNING, at),
            5: lambda: change(journal, "r-sleep", RunStatus.RUNNING, at),
            6: lambda: change(journal, "r-paused", RunStatus.TERMINATED, at),
            7: lambda: change(journal, "r-fill01", RunStatus.RUNNING, at),
            8: lambda: change(journal, "r-running", RunStatus.RUNNING, at),
            9: lambda: change(journal, "r-fill00", RunStatus.SUSPENDED, at, wake=8_000),
        }
        if page == 6:
            change(journal, "r-version", RunStatus.FAILED, at)
        if page in steps:
            steps[page]()
        problems = listing_problems(journal, client)
        assert problems == [], f"after page {page}: {problems}"

    reports = list(paged_pass(client, shards, changes, page_size=4))
    assert len(reports) > 9, "too few pages to interleave every change"
    assert listing_problems(journal, client, tenants=True) == []
    # Exact after one pass: a header that changed under it is read again and finished.
    assert layout_problems(client, shards) == []
    last = backfill_index_layout(client, TABLE, shards)
    assert (last.listed, last.moved, last.skipped) == (0, 0, 0)
    assert listing_problems(journal, client, tenants=True) == []


def test_after_the_backfill_every_key_is_where_index_keys_puts_it(
    client: Any, journal: DynamoDBJournal
) -> None:
    build_world(journal)
    as_old_layout(client)
    shards = IndexShards(8)
    totals = BackfillReport()
    for report in paged_pass(client, shards, page_size=4):
        totals.listed += report.listed
        totals.moved += report.moved
        totals.skipped += report.skipped
    assert (totals.listed, totals.skipped) == (10, 0)
    assert layout_problems(client, shards) == []
    items = scan(client)
    assert not [i for i in items if i.get("gsi2pk", {}).get("S") in ("WAKE", "EXPIRING")]
    assert not [i for i in items if i["sk"]["S"] == "#RUN" and ("gsi4pk" in i or "gsi3pk" in i)]
    assert listing_problems(journal, client, tenants=True) == []
    assert sorted(h.run_id for h in journal.list_runs(tenant=DEFAULT_TENANT, limit=50).runs) == [
        "r-old"
    ]
    assert [e.run_id for e in journal.reviews_page(tenant=DEFAULT_TENANT).items] == ["r-old"]
    assert [
        w.wait_id for w in journal.waits_page("approval", WaitStatus.PENDING, tenant=BETA).items
    ] == ["apr-due"]
    again = backfill_index_layout(client, TABLE, shards)
    assert (again.listed, again.moved, again.skipped) == (0, 0, 0)


class ChangeBeforeUpdate:
    """Wraps a client: right before the backfill's ``update_item`` of ``key``, ``change`` runs."""

    def __init__(self, inner: Any, key: Item, change: Callable[[], None]):
        self._inner, self._key, self._change = inner, key, change
        self.fired = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def update_item(self, **kwargs: Any) -> Any:
        if kwargs["Key"] == self._key and not self.fired:
            self.fired += 1
            self._change()
        return self._inner.update_item(**kwargs)


@pytest.mark.parametrize(
    "what",
    ["header-commit", "header-stamp", "wait-settled", "effect-reviewed", "old-header-commit"],
)
def test_a_change_between_the_read_and_the_write_wins(
    client: Any, journal: DynamoDBJournal, what: str
) -> None:
    build_world(journal)
    as_old_layout(client)
    shards = IndexShards(8)
    run_key = {"pk": {"S": "RUN#r-sleep"}, "sk": {"S": "#RUN"}}
    if what == "header-commit":
        key = run_key

        def act() -> None:
            change(journal, "r-sleep", RunStatus.RUNNING, 20_000)
    elif what == "old-header-commit":
        key = {"pk": {"S": "RUN#r-old"}, "sk": {"S": "#RUN"}}

        def act() -> None:
            change(journal, "r-old", RunStatus.SUSPENDED, 20_000, wake=21_000)
    elif what == "header-stamp":
        key = {"pk": {"S": "RUN#r-expiring"}, "sk": {"S": "#RUN"}}

        def act() -> None:
            journal.stamp_expiry("r-expiring", NOW)
    elif what == "wait-settled":
        key = {"pk": {"S": "WAIT#apr-old"}, "sk": {"S": "#WAIT"}}

        def act() -> None:
            settle(journal, "apr-old", 20_000)
    else:
        key = {"pk": {"S": "RUN#r-old"}, "sk": {"S": "S#00000002"}}

        def act() -> None:
            record = next(e for e in journal.load("r-old").effects)
            # A reviewer decides it: COMMITTED, out of every listing. (A default tenant's
            # record: another tenant's is test_a_change_before_the_backfill_keeps_the_runs_tenant.)
            done = dataclasses.replace(record, status=EffectStatus.COMMITTED, updated_at_ms=20_000)
            journal.commit(
                "r-old",
                [],
                None,
                EffectChange(done, frozenset({EffectStatus.NEEDS_REVIEW}), record.attempt),
            )

    wrapped = ChangeBeforeUpdate(client, key, act)
    report = backfill_index_layout(wrapped, TABLE, shards)
    assert wrapped.fired == 1
    assert report.skipped == 1
    item = client.get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"]
    # Left as the change wrote it: its new-layout slot (gsi1/gsi2 as index_keys says).
    sk = key["sk"]["S"]
    wanted = (
        header_keys(item, shards)
        if sk == "#RUN"
        else wait_keys(item, shards)
        if sk == "#WAIT"
        else effect_keys(item, shards)
    )
    for name in ("gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk"):
        assert item.get(name) == wanted.get(name), (name, item)
    assert listing_problems(journal, client) == []
    # The skipped header was read again and finished in the same pass; records are written
    # whole by their change. A second pass has nothing to do.
    assert layout_problems(client, shards) == []
    assert listing_problems(journal, client, tenants=True) == []
    last = backfill_index_layout(client, TABLE, shards)
    assert (last.listed, last.moved, last.skipped) == (0, 0, 0)


def test_shrinking_the_shards_keeps_every_listing(client: Any, journal: DynamoDBJournal) -> None:
    build_world(journal, filler=8)
    assert layout_problems(client, IndexShards(8)) == []
    report = backfill_index_layout(client, TABLE, IndexShards(2), page_size=7)
    assert report.skipped == 0 and report.moved > 0
    smaller = DynamoDBJournal(client, TABLE, index_shards=2)
    assert listing_problems(smaller, client, tenants=True) == []
    assert layout_problems(client, IndexShards(2)) == []


def test_shrinking_an_old_layout_table_keeps_every_listing(
    client: Any, journal: DynamoDBJournal
) -> None:
    build_world(journal, filler=4)
    as_old_layout(client)
    report = backfill_index_layout(client, TABLE, IndexShards(2), page_size=5)
    assert report.skipped == 0
    smaller = DynamoDBJournal(client, TABLE, index_shards=2)
    assert listing_problems(smaller, client, tenants=True) == []
    assert layout_problems(client, IndexShards(2)) == []


def test_the_cli_resumes_where_a_stopped_pass_ended(
    client: Any, journal: DynamoDBJournal, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from scripts.backfill_index_layout import main

    build_world(journal)
    as_old_layout(client)
    stopped = backfill_index_layout(client, TABLE, IndexShards(8), max_pages=2, page_size=5)
    assert stopped.resume is not None and stopped.scanned == 10
    resume = json.dumps(stopped.resume)
    assert main(["--table", TABLE, "--shards", "8", "--resume", resume], client=client) == 0
    out = capsys.readouterr().out
    assert "done:" in out and "resume -" in out
    assert layout_problems(client, IndexShards(8)) == []
    assert listing_problems(journal, client, tenants=True) == []
    assert main(["--table", TABLE, "--shards", "8"], client=client) == 0
    assert "0 run(s) given a listing item, 0 item(s) moved" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["approval", "review"])
def test_a_change_before_the_backfill_keeps_the_runs_tenant(
    client: Any, journal: DynamoDBJournal, kind: str
) -> None:
    """A record of the old layout (no ``tenant``) of another tenant's run, changed before the
    backfill reaches it, stays its run's tenant's (the decoder reads it as the default one)."""
    build_world(journal)
    as_old_layout(client)
    if kind == "approval":
        settle(journal, "apr-open", 20_000)  # acme's approval, decided by a person
    else:
        record = next(e for e in journal.load("r-running").effects)  # acme's PREPARED call
        review = dataclasses.replace(record, status=EffectStatus.NEEDS_REVIEW, updated_at_ms=20_000)
        journal.commit(
            "r-running",
            [],
            None,
            EffectChange(review, frozenset({EffectStatus.PREPARED}), record.attempt),
        )
    backfill_index_layout(client, TABLE, IndexShards(8))
    if kind == "approval":
        theirs = journal.waits_page("approval", WaitStatus.COMPLETED, tenant=ACME).items
        others = journal.waits_page("approval", WaitStatus.COMPLETED, tenant=DEFAULT_TENANT).items
        assert "apr-open" in [w.wait_id for w in theirs]
        assert "apr-open" not in [w.wait_id for w in others]
    else:
        assert "r-running" in [e.run_id for e in journal.reviews_page(tenant=ACME).items]
        # Never in another tenant's listing (the default tenant would see acme's call).
        assert "r-running" not in [
            e.run_id for e in journal.reviews_page(tenant=DEFAULT_TENANT).items
        ]
    assert layout_problems(client, IndexShards(8)) == []
