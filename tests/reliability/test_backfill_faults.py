"""The index layout backfill (ADR 0029) interrupted, resumed and raced, on moto.

A journal of runs in every state is rewritten into the layout before ADR 0029
(``tests.contract.test_index_layout_backfill``). Each schedule (a seed) then runs the backfill
page by page while:

* a write fails on storage (``InfrastructureError``) before it lands, or after it landed (the
  caller never saw the answer), or the process dies after k writes (nothing after them runs);
  the pass is then resumed from the last report's ``resume`` key, or run again from the start;
* runs suspend, resume, pause, finish and are stamped, and a wait is decided, between pages.

Invariants: after every page, every fault and every change, each listing the reconciler and the
operators read holds exactly the records the table holds (nothing lost, nothing twice); at the
end every item's keys are what ``index_keys`` computes, the tenants' listings are complete,
and one more pass has nothing to do. ``RELIABILITY_EXAMPLES`` sets the schedules of the full
suite (``make reliability``); the fast subset runs one.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from durable_agents.core.models import RunStatus, WaitStatus
from durable_agents.errors import InfrastructureError
from durable_agents.journal.backfill import BackfillReport, backfill_index_layout
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.index_shards import IndexShards
from durable_agents_local.template import create_journal_table
from tests.contract.test_index_layout_backfill import (
    TABLE,
    as_old_layout,
    build_world,
    change,
    layout_problems,
    listing_problems,
    settle,
    stamp_fully,
)
from tests.reliability import tally

pytestmark = pytest.mark.reliability

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
# A schedule takes seconds (a moto table, a listing check per page): one per 20 examples
# (``make reliability``'s 800: 40 schedules).
EXAMPLES = max(5, int(os.environ.get("RELIABILITY_EXAMPLES", "100")) // 20)
SHARDS = 2  # fewer Queries per merged read than the default 8: more schedules a second
MODES = ("infra_before", "infra_after", "die")


class Died(BaseException):
    """The backfill's process died here: nothing after this point ran."""


class FaultyWrites:
    """Wraps a client: the ``at``-th write (PutItem, UpdateItem) of the pass faults.

    ``infra_before``: the write fails and never lands; ``infra_after``: it lands and the caller
    sees a failure; ``die``: the process dies right before it.
    """

    def __init__(self, inner: Any, at: int, mode: str):
        self._inner, self.at, self.mode = inner, at, mode
        self.writes = 0
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _write(self, name: str, kwargs: dict[str, Any]) -> Any:
        self.writes += 1
        if self.fired or self.writes != self.at:
            return getattr(self._inner, name)(**kwargs)
        self.fired = True
        if self.mode == "die":
            raise Died()
        if self.mode == "infra_before":
            raise InfrastructureError(name, "InternalServerError")
        getattr(self._inner, name)(**kwargs)
        raise InfrastructureError(name, "RequestTimeout")

    def put_item(self, **kwargs: Any) -> Any:
        return self._write("put_item", kwargs)

    def update_item(self, **kwargs: Any) -> Any:
        return self._write("update_item", kwargs)


class Changes:
    """Real changes of the runs between pages, as the runtime and the reconciler make them."""

    def __init__(self, journal: DynamoDBJournal, rng: random.Random):
        self.journal, self.rng, self.at, self.made = journal, rng, 30_000, 0

    def one(self) -> None:
        journal, rng = self.journal, self.rng
        self.at += 1
        runs = [h.run_id for h in _headers(journal)]
        header = journal.get_run(rng.choice(runs))
        status = header.status
        if status.terminal:
            if header.stamp_due_at_ms is not None:
                stamp_fully(journal, header.run_id)
                self.made += 1
            return
        choices: dict[RunStatus, list[tuple[RunStatus, int | None]]] = {
            RunStatus.RUNNING: [
                (RunStatus.SUSPENDED, self.at + 500),
                (RunStatus.SUSPENDED, None),
                (RunStatus.PAUSED, None),
                (RunStatus.SUCCEEDED, None),
            ],
            RunStatus.SUSPENDED: [(RunStatus.RUNNING, None), (RunStatus.FAILED, None)],
            RunStatus.PAUSED: [(RunStatus.RUNNING, None), (RunStatus.TERMINATED, None)],
            RunStatus.VERSION_UNAVAILABLE: [(RunStatus.RUNNING, None), (RunStatus.SUSPENDED, None)],
        }
        to, wake = rng.choice(choices[status])
        change(journal, header.run_id, to, self.at, wake=wake)
        self.made += 1
        if rng.random() < 0.3 and journal.get_wait("apr-old").status is WaitStatus.PENDING:
            # The default tenant's approval (another tenant's: see the contract test's
            # TENANT_BUG, which the fault suite leaves to it).
            settle(journal, "apr-old", self.at)
            self.made += 1


def _headers(journal: DynamoDBJournal) -> list[Any]:
    return journal.list_runs(limit=100, include_children=True).runs


def _world(seed: int) -> tuple[Any, DynamoDBJournal]:
    client = boto3.client("dynamodb", region_name="us-east-1")
    if TABLE in client.list_tables()["TableNames"]:
        client.delete_table(TableName=TABLE)
    create_journal_table(client, TABLE, TEMPLATE)
    journal = DynamoDBJournal(client, TABLE, index_shards=SHARDS)
    build_world(journal, filler=seed % 4)
    as_old_layout(client)
    return client, journal


def schedule(seed: int, *, check_every: int) -> dict[str, int]:
    """One schedule (module docstring); returns what it did, for the report."""
    rng = random.Random(seed)
    client, journal = _world(seed)
    shards = IndexShards(SHARDS)
    changes = Changes(journal, rng)
    mode = MODES[seed % len(MODES)]
    faults = 1 + (seed % 2)
    page_size = rng.randint(2, 6)
    done: dict[str, int] = {"pages": 0, "faults": 0, "restarts": 0, "resumes": 0}

    def check(when: str) -> None:
        problems = listing_problems(journal, client)
        assert problems == [], f"seed {seed}, {when}: {problems}"

    start: dict[str, Any] | None = None
    last: BackfillReport | None = None
    for _ in range(500):
        faulty: Any = client
        if done["faults"] < faults and rng.random() < 0.6:
            faulty = FaultyWrites(client, rng.randint(1, page_size), mode)
        try:
            last = backfill_index_layout(
                faulty, TABLE, shards, start_key=start, max_pages=1, page_size=page_size
            )
        except (InfrastructureError, Died):
            done["faults"] += 1
            check(f"after fault {done['faults']} ({mode})")
            if rng.random() < 0.5 or last is None:
                start, last = None, None  # run again from the start
                done["restarts"] += 1
            else:
                start = last.resume  # resume after the last page that completed
                done["resumes"] += 1
            continue
        done["pages"] += 1
        if rng.random() < 0.6:
            changes.one()
        if done["pages"] % check_every == 0:
            check(f"after page {done['pages']}")
        start = last.resume
        if start is None:
            break
    else:
        raise AssertionError(f"seed {seed}: the backfill never ended")
    # Changes that met a header before the pass did leave it the old layout's start-time keys
    # (a commit rewrites gsi1/gsi2/gsi3 only): the pass run again finishes them.
    again = backfill_index_layout(client, TABLE, shards)
    assert again.listed == 0, f"seed {seed}: a run left without a listing item"
    problems = layout_problems(client, shards) + listing_problems(journal, client, tenants=True)
    assert problems == [], f"seed {seed}: {problems}"
    final = backfill_index_layout(client, TABLE, shards)
    assert (final.listed, final.moved, final.skipped) == (0, 0, 0), f"seed {seed}: {final}"
    done["changes"] = changes.made
    return done


def _run(seed: int, check_every: int) -> None:
    tally.schedules["backfill"] += 1
    try:
        done = schedule(seed, check_every=check_every)
    except AssertionError:
        tally.violations["backfill"] += 1
        raise
    tally.injected[f"backfill-{MODES[seed % len(MODES)]}"] += done["faults"]
    assert done["pages"] > 3, f"seed {seed}: too few pages to interleave anything: {done}"


@pytest.mark.parametrize("seed", [1])  # two faults: writes that failed after they landed
def test_an_interrupted_backfill_loses_nothing(aws: None, seed: int) -> None:
    _run(seed, check_every=4)


@pytest.mark.reliability_full
@pytest.mark.parametrize("seed", [0, 2, *range(3, 3 + EXAMPLES)])
def test_an_interrupted_backfill_loses_nothing_full(aws: None, seed: int) -> None:
    _run(seed, check_every=1)


@pytest.mark.reliability_full
def test_a_death_on_every_write_of_a_page_is_resumed(aws: None) -> None:
    """The process dies before the k-th write of one page, for k = 1, 2, ...; each time the
    page is resumed (from the previous page's key) and dies again one write later."""
    client, journal = _world(0)
    shards = IndexShards(SHARDS)
    first = backfill_index_layout(client, TABLE, shards, max_pages=1, page_size=3)
    assert first.resume is not None
    writes = first.listed + first.moved
    probe: Callable[[int], FaultyWrites] = lambda k: FaultyWrites(client, k, "die")  # noqa: E731
    for k in range(1, writes + 2):
        faulty = probe(k)
        with contextlib.suppress(Died):
            backfill_index_layout(
                faulty, TABLE, shards, start_key=first.resume, max_pages=1, page_size=3
            )
        assert listing_problems(journal, client) == [], f"died before write {k}"
    backfill_index_layout(client, TABLE, shards)
    assert layout_problems(client, shards) == []
    assert listing_problems(journal, client, tenants=True) == []
