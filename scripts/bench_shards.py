"""What a reconciler sweep and a listing page cost at 1, 8 and 64 index shards (ADR 0029).

Every deployment-wide listing is spread over ``IndexShards`` partitions and read merged
(``journal.shard_merge``): at least one Query per shard. This bench measures, on in-process
moto with every request billed (``bench_billing.Ledger``), the DynamoDB requests and read
units of each listing a sweep reads and of one page of each listing the API serves:

* on an empty table (a sweep that finds nothing), and
* on a table of ``--runs`` runs over two tenants (running, suspended with and without a timer,
  paused, finished and not stamped yet; some with an approval wait with a deadline, a call
  between PREPARE and COMMIT, a call in review), everything due.

Usage: ``python scripts/bench_shards.py [--runs 300]`` (prints a markdown table).
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import boto3
from bench_billing import Ledger, peek_client
from bench_common import TABLE, TEMPLATE
from moto import mock_aws

from durable_agents.admin.stalled_runs import RUN_PAGE
from durable_agents.core.effect_wait_records import (
    EffectChange,
    EffectStatus,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
)
from durable_agents.core.models import RunChange, RunHeader, RunPage, RunStatus, WaitStatus
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import input_hash
from durable_agents_local.template import create_journal_table

SHARD_COUNTS = (1, 8, 64)
TENANTS = ("acme", "globex")
START_MS = 1_000_000_000
LATER_MS = 10**12  # after every due time written
SWEEP_PAGE = 100  # the reconciler's page_size
STATES = ("running", "timer", "no timer", "paused", "finished", "approval")
"""Run ``i`` is in ``STATES[i % 6]``; every third run also has a PREPARED call and every
fourth one a call in review."""

Read = Callable[[DynamoDBJournal, int], object]


def _changed(status: RunStatus, journal: DynamoDBJournal, _now: int) -> object:
    # The stall sweeps' page (durable_agents.admin.stalled_runs): at most 50.
    return journal.changed_runs_page(status, limit=min(RUN_PAGE, SWEEP_PAGE))


READS: dict[str, tuple[str, Read]] = {
    # (kind, read at time ``now``): "sweep" rows are the listings one reconciler sweep reads
    # (durable_agents.admin.reconciler.sweep, page_size 100), "page" rows an API page (and
    # the PAUSED listing, which the sweep does not read).
    "due_runs_page (WAKE)": ("sweep", lambda j, now: j.due_runs_page(now, limit=SWEEP_PAGE)),
    "stale_effects_page (PREPARED)": (
        "sweep",
        lambda j, now: j.stale_effects_page(now, limit=SWEEP_PAGE),
    ),
    "due_waits_page (WAITDUE)": ("sweep", lambda j, now: j.due_waits_page(now, limit=SWEEP_PAGE)),
    "expiring_runs_page (EXPIRING)": (
        "sweep",
        lambda j, now: j.expiring_runs_page(now, limit=SWEEP_PAGE),
    ),
    **{
        f"changed_runs_page({s.value})": (
            "sweep",
            partial(_changed, s),
        )
        for s in (
            RunStatus.RUNNING,
            RunStatus.SUSPENDED,
            RunStatus.VERSION_UNAVAILABLE,
        )
    },
    "changed_runs_page(PAUSED)": ("page", partial(_changed, RunStatus.PAUSED)),
    "list_runs(limit=50), operators": ("page", lambda j, now: j.list_runs(limit=50)),
    "list_runs(limit=50), a tenant": (
        "page",
        lambda j, now: j.list_runs(limit=50, tenant=TENANTS[0]),
    ),
    'waits_page("approval", PENDING), a tenant': (
        "page",
        lambda j, now: j.waits_page("approval", WaitStatus.PENDING, limit=100, tenant=TENANTS[0]),
    ),
    "reviews_page(), a tenant": ("page", lambda j, now: j.reviews_page(tenant=TENANTS[0])),
}
LEGACY_READS = frozenset({"due_runs_page (WAKE)", "expiring_runs_page (EXPIRING)"})
"""Listings that also read their partition in gsi2 (where runs were before ADR 0029)."""


@dataclass(frozen=True)
class Cost:
    """One read's DynamoDB requests by operation, read units and items returned."""

    requests: dict[str, int]
    rru: float
    items: int

    def cell(self) -> str:
        """``"8 Query, 4 RRU"``: the requests by operation, then the read units."""
        ops = " + ".join(f"{n} {op}" for op, n in sorted(self.requests.items()))
        return f"{ops}, {self.rru:g} RRU"


def header(i: int, at: int) -> RunHeader:
    """Run ``i``'s header, started at ``at`` by one of the two tenants."""
    return RunHeader(
        run_id=f"run-{i:05d}",
        agent="bench",
        versions={"workflow_version": "1"},
        status=RunStatus.RUNNING,
        input="0",
        created_at_ms=at,
        updated_at_ms=at,
        input_hash=input_hash("bench", "0"),
        tenant=TENANTS[(i // len(STATES)) % 2],  # every state for both tenants
    )


def effect(run: RunHeader, status: EffectStatus, position: str, at: int) -> SideEffectRecord:
    """A call of ``run`` in ``status`` (PREPARED: stale at ``at + 1``)."""
    op_id = f"{run.run_id}:ship:{position}"
    return SideEffectRecord(
        run_id=run.run_id,
        position=position,
        operation_id=op_id,
        tool="ship",
        tool_schema_version="1",
        canonical_request="{}",
        idempotency_key=op_id,
        status=status,
        attempt=1,
        prepared_at_ms=at,
        updated_at_ms=at,
        lease_expires_at_ms=at,
        stale_at_ms=at + 1,
        tenant=run.tenant,
    )


def approval(run: RunHeader, at: int) -> WaitRecord:
    """A PENDING approval of ``run``, due at ``at + 1``."""
    return WaitRecord(
        wait_id=f"apr-{run.run_id}",
        kind="approval",
        run_id=run.run_id,
        position="00000009",
        operation_id=f"{run.run_id}:ok:1",
        name="ok",
        status=WaitStatus.PENDING,
        created_at_ms=at,
        updated_at_ms=at,
        deadline_ms=at + 1,
        tenant=run.tenant,
    )


def populate(journal: DynamoDBJournal, runs: int) -> None:
    """Writes ``runs`` runs in the states of ``STATES`` (module docstring)."""
    for i in range(runs):
        at = START_MS + 10 * i
        run = header(i, at)
        journal.create_run(run)
        state = STATES[i % len(STATES)]
        moves: dict[str, tuple[RunStatus, dict[str, Any]]] = {
            "timer": (RunStatus.SUSPENDED, {"wake_at_ms": at + 5}),
            "no timer": (RunStatus.SUSPENDED, {"wake_at_ms": None}),
            "paused": (RunStatus.PAUSED, {}),
            "finished": (RunStatus.SUCCEEDED, {"result": "1"}),
        }
        move = moves.get(state)
        if move is not None:
            status, extra = move
            change = RunChange(
                expected=frozenset({RunStatus.RUNNING}),
                status=status,
                updated_at_ms=at + 1,
                **extra,
            )
            journal.commit(run.run_id, [], change)
        if state == "approval":
            journal.commit(run.run_id, [], wait=WaitChange(approval(run, at)))
        if i % 3 == 0 and state != "finished":
            prepared = effect(run, EffectStatus.PREPARED, "00000001", at)
            journal.commit(run.run_id, [], None, EffectChange(prepared))
        if i % 4 == 0 and state != "finished":
            review = effect(run, EffectStatus.NEEDS_REVIEW, "00000002", at)
            journal.commit(run.run_id, [], None, EffectChange(review))


def measure(shards: int, runs: int) -> dict[tuple[str, str], Cost]:
    """``(table, read) -> Cost`` at ``shards`` shards; table "empty" or "populated"."""
    out: dict[tuple[str, str], Cost] = {}
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        for table, count in (("empty", 0), ("populated", runs)):
            name = f"{TABLE}-{table}"
            create_journal_table(client, name, TEMPLATE)
            populate(DynamoDBJournal(client, name, index_shards=shards), count)
        ledger = Ledger(peek_client())
        ledger.attach(client)
        for table in ("empty", "populated"):
            for read_name, (_, read) in READS.items():
                # A new journal for each read: nothing remembered from an earlier one.
                journal = DynamoDBJournal(client, f"{TABLE}-{table}", index_shards=shards)
                began = ledger.take()
                page: Any = read(journal, LATER_MS)
                bill = ledger.take() - began
                requests = {op: n for op, n in bill.requests.items() if n}
                listed = page.runs if isinstance(page, RunPage) else page.items
                out[(table, read_name)] = Cost(requests, bill.rru, len(listed))
    return out


def table(results: dict[int, dict[tuple[str, str], Cost]], runs: int) -> str:
    """The markdown table of ``results`` (shard count -> ``measure``)."""
    counts = sorted(results)
    head = "| read | table | " + " | ".join(f"{n} shard{'s' * (n > 1)}" for n in counts) + " |"
    lines = [head, "|" + "---|" * (2 + len(counts))]
    for read_name, (kind, _) in READS.items():
        for which in ("empty", "populated"):
            first = results[counts[0]][(which, read_name)]
            label = "empty" if which == "empty" else f"{runs} runs ({first.items} listed)"
            cells = " | ".join(results[n][(which, read_name)].cell() for n in counts)
            lines.append(f"| {kind}: `{read_name}` | {label} | {cells} |")
    for which in ("empty", "populated"):
        label = "empty" if which == "empty" else f"{runs} runs"
        cells = " | ".join(sweep_total(results[n], which).cell() for n in counts)
        lines.append(f"| **one sweep's listings** | {label} | {cells} |")
    return "\n".join(lines)


def sweep_total(costs: dict[tuple[str, str], Cost], which: str) -> Cost:
    """What the "sweep" reads of one table cost together (one page each)."""
    parts = [costs[(which, name)] for name, (kind, _) in READS.items() if kind == "sweep"]
    requests: collections.Counter[str] = collections.Counter()
    for part in parts:
        requests.update(part.requests)
    return Cost(dict(requests), sum(p.rru for p in parts), sum(p.items for p in parts))


def main() -> None:
    """Prints the table (``--runs`` runs in the populated table)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    results = {n: measure(n, args.runs) for n in SHARD_COUNTS}
    print(f"`python scripts/bench_shards.py --runs {args.runs}` (moto, one read each):\n")
    print(table(results, args.runs))


if __name__ == "__main__":
    main()
