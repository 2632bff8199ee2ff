"""Runs at scale over sharded index listings (ADR 0029), on in-process moto.

A DynamoDB journal with ``index_shards=8`` (the table created from template.yaml's
JournalTable, as every contract test's) runs many real agent runs of several tenants through
start, a durable timer suspension, the reconciler's wake-up and finish, then the reconciler's
retention stamping passes. At each phase every listing the reconciler and the Api read, merged
across the shards, must list each expected run exactly once and in key order (read in pages
with cursors, small pages too), ``list_runs`` must list the operators' and each tenant's runs
newest start first, and the index items must really be spread over the eight shards.

Run ids are fixed (``scale-00000``, ...), so how they hash over the shards, and so the
spread checked, is the same every time. Everything is driven sequentially: in-process moto
is not safe across threads. The 2,000-run case (the issue's acceptance point) is heavy and
runs only with ``RELIABILITY_FULL=1`` (``make reliability``); the 24-run case makes the same
checks in every ``pytest`` run.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import boto3
import pytest
from moto import mock_aws

from durable_agents import AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.reconciler import sweep
from durable_agents.core.models import RunHeader, RunPage, RunStatus
from durable_agents.engine.events import STEP_READY, CollectingPublisher
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.index_keys import EXPIRING_PK, WAKE_PK, status_listing, ts
from durable_agents.journal.index_shards import IndexShards
from durable_agents.journal.retention import LATE_WRITE_GRACE_MS
from durable_agents.journal.store import Page
from durable_agents_local.moto_speed import faster_moto
from durable_agents_local.template import create_journal_table
from tests.conftest import TEMPLATE

T = TypeVar("T")

SHARDS = 8
TENANTS = ("acme", "globex", "initech")
NAP_S = 60
STALL_NEVER_MS = 10**12  # the stall sweeps must not re-drive anything here
MIN_SHARE = 0.05  # every shard holds at least 5% of a listing's records


@pytest.fixture
def scale_env(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Runtime, DynamoDBJournal, CollectingPublisher, SkipClock]]:
    faster_moto(monkeypatch)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_journal_table(client, "journal", TEMPLATE)
        journal = DynamoDBJournal(client, "journal", index_shards=SHARDS)
        registry = AgentRegistry()

        @agent_decorator(name="napper", version="1", registry=registry)
        def napper(ctx: DurableContext, n: int) -> int:
            doubled = ctx.step(lambda: 2 * n, name="double")
            ctx.wait(NAP_S, name="nap")
            return doubled + 1

        clock, publisher = SkipClock(), CollectingPublisher()
        runtime = Runtime(journal, registry=registry, publisher=publisher, clock=clock)
        yield runtime, journal, publisher, clock


# -- reading listings whole, page by page ---------------------------------------------------


def every_page(fetch: Callable[[str | None], Page[T]], *, limit: int) -> list[list[T]]:
    """Every page of an index listing, each checked to hold at most ``limit`` items."""
    pages: list[list[T]] = []
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        assert len(page.items) <= limit
        pages.append(page.items)
        if page.cursor is None:
            return pages
        assert page.cursor != cursor, "a cursor that does not move on"
        cursor = page.cursor
        assert len(pages) < 100_000


def listed_ids(fetch: Callable[[str | None, int], Page[RunHeader]], *, limit: int) -> list[str]:
    pages = every_page(lambda cursor: fetch(cursor, limit), limit=limit)
    return [h.run_id for page in pages for h in page]


def check_listing(
    name: str,
    fetch: Callable[[str | None, int], Page[RunHeader]],
    expected: list[str],
    *,
    limits: tuple[int, ...],
    prefix_pages: int = 6,
) -> None:
    """The listing, read whole in pages of ``limits[-1]`` and, for its first pages, of each
    smaller limit, is ``expected`` (each run once, in key order)."""
    whole = listed_ids(fetch, limit=limits[-1])
    assert len(whole) == len(set(whole)), f"{name}: a run listed twice"
    assert whole == expected, f"{name}: {len(whole)} listed, {len(expected)} expected"
    for limit in limits[:-1]:
        # Small pages: the first ``prefix_pages`` of them, then the rest in one read.
        seen: list[str] = []
        cursor: str | None = None
        for _ in range(prefix_pages):
            page = fetch(cursor, limit)
            assert len(page.items) <= limit
            seen += [h.run_id for h in page.items]
            cursor = page.cursor
            if cursor is None:
                break
        if cursor is not None:
            seen += listed_ids(partial(_go_on_from, fetch, cursor), limit=500)
        assert seen == expected, f"{name}: pages of {limit} differ from the listing"


def _go_on_from(
    fetch: Callable[[str | None, int], Page[RunHeader]], start: str, c: str | None, lim: int
) -> Page[RunHeader]:
    return fetch(start if c is None else c, lim)


def all_runs(
    journal: DynamoDBJournal,
    *,
    limit: int,
    tenant: str | None = None,
    status: RunStatus | None = None,
) -> list[RunHeader]:
    runs: list[RunHeader] = []
    cursor: str | None = None
    pages = 0
    while True:
        page: RunPage = journal.list_runs(limit=limit, cursor=cursor, tenant=tenant, status=status)
        assert len(page.runs) <= limit
        runs += page.runs
        pages += 1
        assert pages < 100_000
        if page.cursor is None:
            return runs
        cursor = page.cursor


# -- what is expected -----------------------------------------------------------------------


@dataclass
class Expected:
    """Every run started, with its tenant and start time."""

    tenant: dict[str, str] = field(default_factory=dict)
    created: dict[str, int] = field(default_factory=dict)

    def newest_first(self, tenant: str | None = None) -> list[str]:
        keyed = [
            f"{ts(at)}#{run_id}"
            for run_id, at in self.created.items()
            if tenant is None or self.tenant[run_id] == tenant
        ]
        return [key.split("#", 1)[1] for key in sorted(keyed, reverse=True)]


def by_key(keys: dict[str, int]) -> list[str]:
    """Run ids in the order of their listing keys ``<ms>#<run_id>``."""
    return [key.split("#", 1)[1] for key in sorted(f"{ts(ms)}#{r}" for r, ms in keys.items())]


def check_run_listings(
    journal: DynamoDBJournal, expected: Expected, status: RunStatus, *, limit: int
) -> None:
    """``list_runs`` for the operators and for each tenant: newest start first, every run once,
    each in ``status`` now."""
    for tenant in (None, *TENANTS):
        want = expected.newest_first(tenant)
        # Filtered by status (a filter on the headers read): the operators' listing.
        for query_status in (None, status) if tenant is None else (None,):
            runs = all_runs(journal, limit=limit, tenant=tenant, status=query_status)
            ids = [h.run_id for h in runs]
            assert len(ids) == len(set(ids)), f"tenant {tenant}: a run listed twice"
            assert ids == want, f"tenant {tenant}, status {query_status}: wrong listing"
            assert all(h.status is status for h in runs)
            assert all(tenant is None or h.tenant == tenant for h in runs)
    # Small pages, first few: the same order, cursors move on.
    first = all_runs_prefix(journal, limit=7, pages=6)
    assert first == expected.newest_first()[: len(first)] and len(first) >= 7


def all_runs_prefix(journal: DynamoDBJournal, *, limit: int, pages: int) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    for _ in range(pages):
        page = journal.list_runs(limit=limit, cursor=cursor)
        assert len(page.runs) <= limit
        ids += [h.run_id for h in page.runs]
        cursor = page.cursor
        if cursor is None:
            break
    return ids


# -- the items in the table -----------------------------------------------------------------


def scan_index_keys(journal: DynamoDBJournal) -> list[dict[str, Any]]:
    client = journal._client
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": "journal",
        "ProjectionExpression": "pk, sk, gsi1pk, gsi2pk, gsi3pk, gsi4pk",
    }
    while True:
        reply = client.scan(**kwargs)
        items += reply.get("Items", [])
        last = reply.get("LastEvaluatedKey")
        if not last:
            return items
        kwargs["ExclusiveStartKey"] = last


def check_spread(
    items: list[dict[str, Any]], attr: str, partitions: list[str], *, sk: str, expect: int
) -> None:
    """The items with sort key ``sk`` are spread over ``partitions`` (``attr``), each holding
    at least ``MIN_SHARE`` of the ``expect`` items, and none elsewhere."""
    counts = Counter(item[attr]["S"] for item in items if item["sk"]["S"] == sk and attr in item)
    assert set(counts) <= set(partitions), f"{attr}: {sorted(counts)} not in {partitions}"
    assert sum(counts.values()) == expect
    # A hash spreads evenly only in large numbers: every shard used, each with its share, is
    # checked from 1,000 items on (16 runs of a tenant over 8 shards may leave one empty).
    if expect >= 1_000:
        assert len(counts) == len(partitions), f"{attr}: a shard unused"
        assert min(counts.values()) >= MIN_SHARE * expect, f"{attr}: uneven shards {counts}"


def check_listing_items(items: list[dict[str, Any]], expected: Expected) -> None:
    shards = IndexShards(SHARDS)
    n = len(expected.created)
    check_spread(items, "gsi4pk", shards.started_partitions("STARTED"), sk="#LIST", expect=n)
    for tenant in TENANTS:
        mine = [
            i
            for i in items
            if i["sk"]["S"] == "#LIST" and expected.tenant[i["pk"]["S"][4:]] == tenant
        ]
        partitions = shards.partitions(f"TENANT#{tenant}#STARTED")
        count = sum(1 for r in expected.tenant.values() if r == tenant)
        counts = Counter(i["gsi3pk"]["S"] for i in mine)
        assert set(counts) <= set(partitions) and sum(counts.values()) == count
        if count >= 500:  # spread evenly only in large numbers (see check_spread)
            assert len(counts) == len(partitions), f"{tenant}: a shard unused"
            # A tenant's share is smaller: a looser bound (hash spread, ~count/8 each).
            assert min(counts.values()) >= MIN_SHARE * count / 2, f"{tenant}: {counts}"


def check_headers_in(items: list[dict[str, Any]], listing: str | None, n: int) -> None:
    """Every run header is in one shard of ``listing`` (None: in no listing)."""
    headers = [i for i in items if i["sk"]["S"] == "#RUN"]
    assert len(headers) == n
    if listing is None:
        assert not [h for h in headers if "gsi1pk" in h or "gsi2pk" in h]
        return
    assert not [h for h in headers if "gsi2pk" in h]  # nothing on the pre-ADR-0029 slot
    check_spread(items, "gsi1pk", IndexShards(SHARDS).partitions(listing), sk="#RUN", expect=n)


# -- the scenario ---------------------------------------------------------------------------


def woken_by_sweep(publisher: CollectingPublisher) -> list[str]:
    events = [e for e in publisher.drain() if e.detail_type == STEP_READY]
    assert all(e.detail["reason"] == "timer" for e in events), {e.detail["reason"] for e in events}
    return [e.detail["run_id"] for e in events]


def run_scale(
    env: tuple[Runtime, DynamoDBJournal, CollectingPublisher, SkipClock],
    n: int,
    *,
    sweep_limit: int,
) -> dict[str, float]:
    runtime, journal, publisher, clock = env
    timings: dict[str, float] = {}
    mark = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        timings[name] = round(now - mark, 2)
        mark = now

    big = max(50, n // 8 + 3)  # a page size that is not a divisor of anything
    limits = (3, big)
    expected = Expected()

    # 1. Start every run: two runs per millisecond (ties broken by run id), tenants in turn.
    started_at: dict[str, int] = {}
    n_of: dict[str, int] = {}
    for i in range(n):
        if i % 2 == 0:
            clock.advance(1)
        header, created = runtime.start_run(
            "napper", i, tenant=TENANTS[i % len(TENANTS)], run_id=f"scale-{i:05d}"
        )
        assert created
        n_of[header.run_id] = i
        expected.tenant[header.run_id] = header.tenant
        expected.created[header.run_id] = header.created_at_ms
        started_at[header.run_id] = header.updated_at_ms
    ready = [e.detail["run_id"] for e in publisher.drain() if e.detail_type == STEP_READY]
    assert sorted(ready) == sorted(expected.created)
    lap("start")

    items = scan_index_keys(journal)
    check_listing_items(items, expected)
    check_headers_in(items, status_listing(RunStatus.RUNNING), n)
    check_listing(
        "RUNNING",
        lambda c, lim: journal.changed_runs_page(RunStatus.RUNNING, limit=lim, cursor=c),
        by_key(started_at),
        limits=limits,
    )
    check_run_listings(journal, expected, RunStatus.RUNNING, limit=big)
    lap("check started")

    # 2. Drive each run (from its Step Ready) to its timer: one millisecond apart.
    for run_id in ready:
        clock.advance(1)
        outcome = runtime.execute(run_id, budget=None)
        assert outcome.kind is OutcomeKind.SUSPENDED, outcome
    publisher.drain()  # nothing wakes a timer but the reconciler here
    lap("suspend")

    headers = {r: journal.get_run(r) for r in expected.created}
    assert all(h.status is RunStatus.SUSPENDED for h in headers.values())
    wake_at = {r: h.wake_at_ms for h in headers.values() for r in [h.run_id]}
    assert all(w is not None for w in wake_at.values())
    wakes: dict[str, int] = {r: w for r, w in wake_at.items() if w is not None}
    items = scan_index_keys(journal)
    check_headers_in(items, WAKE_PK, n)
    for status in (RunStatus.RUNNING, RunStatus.SUSPENDED):
        assert journal.changed_runs_page(status, limit=10).items == []
    now = clock.now_ms()
    assert journal.due_runs_page(now, limit=10).items == []  # none due yet
    far = max(wakes.values())
    check_listing(
        "WAKE",
        lambda c, lim: journal.due_runs_page(far, limit=lim, cursor=c),
        by_key(wakes),
        limits=limits,
    )
    # Only those due by a time in between (the upper bound is inclusive).
    cutoff = sorted(wakes.values())[n // 3]
    due_early = {r: w for r, w in wakes.items() if w <= cutoff}
    check_listing(
        "WAKE (by cutoff)",
        lambda c, lim: journal.due_runs_page(cutoff, limit=lim, cursor=c),
        by_key(due_early),
        limits=(7, big),
    )
    check_run_listings(journal, expected, RunStatus.SUSPENDED, limit=big)
    lap("check suspended")

    # 3. The reconciler wakes them: first those due by the cutoff, then the rest. Each sweep
    #    is bounded (``sweep_limit``), and the runs it woke finish before the next sweep.
    woken: list[str] = []
    finished: dict[str, int] = {}
    stamped: list[int] = []

    def sweeps_until_quiet() -> None:
        for _ in range(n):
            report = sweep(runtime, stall_after_ms=STALL_NEVER_MS, limit=sweep_limit)
            assert report.unit_errors == 0 and report.infrastructure_errors == 0, report.errors
            assert report.stale_listings == 0, report
            fired = woken_by_sweep(publisher)
            assert len(fired) == report.timers_fired <= sweep_limit
            if not fired:
                return
            woken.extend(fired)
            for run_id in fired:  # on the sweep's clock: no other timer comes due meanwhile
                outcome = runtime.execute(run_id, budget=None)
                assert outcome.kind is OutcomeKind.SUCCEEDED, outcome
                finished[run_id] = clock.now_ms()
            stamped.append(report.items_stamped)
            publisher.drain()  # what finishing published: nothing for a StepRunner here
        raise AssertionError("the sweeps never went quiet")

    clock.advance_to(cutoff)
    sweeps_until_quiet()
    assert sorted(woken) == sorted(due_early), "the first sweeps woke other runs than were due"
    clock.advance_to(far)
    sweeps_until_quiet()
    assert len(woken) == len(set(woken)), "a run was woken twice"
    assert sorted(woken) == sorted(expected.created)
    lap("wake and finish")

    # The sweeps after each batch stamped the runs it had finished (a first pass): every run
    # is listed again for the second pass, the grace period after it finished.
    headers = {r: journal.get_run(r) for r in expected.created}
    assert all(h.status is RunStatus.SUCCEEDED for h in headers.values())
    assert all(json.loads(h.result or "null") == 2 * n_of[r] + 1 for r, h in headers.items())
    assert sum(stamped) >= n  # every run's journal entries at least
    later = {r: finished[r] + LATE_WRITE_GRACE_MS for r in expected.created}
    assert {r: h.stamp_due_at_ms for r, h in headers.items()} == later
    items = scan_index_keys(journal)
    check_headers_in(items, EXPIRING_PK, n)
    for status in (RunStatus.RUNNING, RunStatus.SUSPENDED):
        assert journal.changed_runs_page(status, limit=10).items == []
    assert journal.due_runs_page(clock.now_ms() + 10**9, limit=10).items == []
    assert journal.expiring_runs_page(clock.now_ms(), limit=10).items == []  # not due yet
    last = max(later.values())
    check_listing(
        "EXPIRING",
        lambda c, lim: journal.expiring_runs_page(last, limit=lim, cursor=c),
        by_key(later),
        limits=limits,
    )
    middle = sorted(later.values())[n // 2]
    check_listing(
        "EXPIRING (by cutoff)",
        lambda c, lim: journal.expiring_runs_page(middle, limit=lim, cursor=c),
        by_key({r: d for r, d in later.items() if d <= middle}),
        limits=(7, big),
    )
    check_run_listings(journal, expected, RunStatus.SUCCEEDED, limit=big)
    lap("check finished")

    # 4. The retention sweeps' second passes, the grace period later: then in no listing.
    clock.advance_to(last)
    for _ in range(n):
        report = sweep(runtime, stall_after_ms=STALL_NEVER_MS, limit=sweep_limit)
        assert report.unit_errors == 0 and report.infrastructure_errors == 0, report.errors
        assert report.timers_fired == 0
        if not journal.expiring_runs_page(last, limit=10).items:
            break
    items = scan_index_keys(journal)
    check_headers_in(items, None, n)  # stamped: in no listing
    check_listing_items(items, expected)  # the start-time listings never change
    assert journal.expiring_runs_page(last + 10**9, limit=10).items == []
    check_run_listings(journal, expected, RunStatus.SUCCEEDED, limit=big)
    lap("retention")
    return timings


def test_24_runs_through_8_shards(
    scale_env: tuple[Runtime, DynamoDBJournal, CollectingPublisher, SkipClock],
) -> None:
    timings = run_scale(scale_env, 24, sweep_limit=8)
    print(f"24 runs: {timings}")


@pytest.mark.reliability
@pytest.mark.reliability_full
@pytest.mark.timeout(3600)
@pytest.mark.skipif(
    os.environ.get("RELIABILITY_FULL") != "1", reason="heavy: run with RELIABILITY_FULL=1"
)
def test_2000_runs_through_8_shards(
    scale_env: tuple[Runtime, DynamoDBJournal, CollectingPublisher, SkipClock],
) -> None:
    timings = run_scale(scale_env, 2_000, sweep_limit=500)
    print(f"2,000 runs: {timings}")
