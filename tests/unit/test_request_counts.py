"""Exact AWS request counts per step on moto: a regression in the write path fails CI.

Requests are counted with botocore ``before-call`` hooks on real boto3 clients (one count per
API call). The runtime is driven like the StepRunner: ``execute(budget=1)`` per invocation.
Targets per plain step: at most 2 DynamoDB writes, 1 journal Query page while the journal is
under 1 MB, and 1 EventBridge PutEvents. ``scripts/bench.py`` reports the same numbers. Past
about 8 KB of journal a warm container reads the header and the tail instead (1 GetItem + 1
Query whatever the length, ADR 0015; ``scripts/bench_tail.py``).
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, SkipClock, agent
from durable_agents.agent import AgentDefinition
from durable_agents.aws.eventbridge import EventBridgePublisher
from durable_agents.engine.outcomes import OutcomeKind
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.template import create_journal_table

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
BUS = "durable-agents-test"
WRITES = ("PutItem", "UpdateItem", "TransactWriteItems", "DeleteItem", "BatchWriteItem")
STEP = {"Query": 1, "PutItem": 2, "PutEvents": 1}


class Counter:
    """Counts API calls per operation name on the clients it is attached to."""

    def __init__(self, *clients: Any) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        for client in clients:
            client.meta.events.register("before-call", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.counts[model.name] += 1

    def take(self) -> dict[str, int]:
        """Returns the counts since the last call and resets them."""
        counts, self.counts = self.counts, collections.Counter()
        return dict(counts)


@dataclass
class Stack:
    """A moto journal table (from template.yaml), a moto bus and a request counter."""

    journal: DynamoDBJournal
    events: Any
    counter: Counter

    def runtime(self, definition: AgentDefinition[Any, Any]) -> Runtime:
        registry = AgentRegistry()
        registry.add(definition)
        return Runtime(
            self.journal,
            registry=registry,
            publisher=EventBridgePublisher(self.events, BUS),
            clock=SkipClock(),
        )


@pytest.fixture
def stack(aws: None) -> Iterator[Stack]:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    create_journal_table(dynamodb, "journal", TEMPLATE)
    events = boto3.client("events", region_name="us-east-1")
    events.create_event_bus(Name=BUS)
    yield Stack(DynamoDBJournal(dynamodb, "journal"), events, Counter(dynamodb, events))


def steps_agent(steps: int, value: str | None = None) -> AgentDefinition[Any, Any]:
    """``steps`` plain steps returning their index (or ``value``), then the count."""

    @agent(name="counted", version="1", registry=AgentRegistry())
    def counted(ctx: Any, _: int) -> int:
        for i in range(steps):
            ctx.step(lambda i=i: i if value is None else value, name=f"s{i}")
        return steps

    return counted


def drive_faithful(runtime: Runtime, run_id: str, counter: Counter) -> list[dict[str, int]]:
    """One ``execute(budget=1)`` per invocation until the run ends; counts per invocation."""
    per_invocation = []
    for _ in range(1000):
        outcome = runtime.execute(run_id, budget=1, remaining_ms=60_000)
        per_invocation.append(counter.take())
        if outcome.kind is not OutcomeKind.CONTINUE:
            assert outcome.kind is OutcomeKind.SUCCEEDED, outcome.detail
            return per_invocation
    raise AssertionError("the run did not finish")


def writes(counts: dict[str, int]) -> int:
    return sum(counts.get(op, 0) for op in WRITES)


def test_each_plain_step_costs_one_query_two_writes_one_event(stack: Stack) -> None:
    steps = 6
    runtime = stack.runtime(steps_agent(steps))
    header, _ = runtime.start_run("counted", 0)
    stack.counter.take()

    per_invocation = drive_faithful(runtime, header.run_id, stack.counter)

    assert len(per_invocation) == steps
    for counts in per_invocation[:-1]:
        assert counts == STEP
        assert writes(counts) <= 2
    # The last step's invocation also finishes the run: one UpdateItem of the header after the
    # PutItem of its echo (ADR 0019), and the Run Finished event instead of Step Ready.
    assert per_invocation[-1] == {**STEP, "PutItem": 3, "UpdateItem": 1}


def test_run_fixed_costs(stack: Stack) -> None:
    runtime = stack.runtime(steps_agent(0))

    header, _ = runtime.start_run("counted", 0)
    # One transaction (the header and its listing item, ADR 0029), then the echo (ADR 0019).
    assert stack.counter.take() == {"TransactWriteItems": 1, "PutItem": 1, "PutEvents": 1}

    runtime.start_run("counted", 0, idempotency_key="k1")
    assert stack.counter.take() == {"TransactWriteItems": 1, "PutItem": 1, "PutEvents": 1}

    # A run without steps: the invocation reads the journal and records the result.
    assert drive_faithful(runtime, header.run_id, stack.counter) == [
        {"Query": 1, "PutItem": 1, "UpdateItem": 1, "PutEvents": 1}
    ]


def test_whole_run_totals(stack: Stack) -> None:
    steps = 5
    runtime = stack.runtime(steps_agent(steps))
    header, _ = runtime.start_run("counted", 0)
    total = collections.Counter(stack.counter.take())

    for counts in drive_faithful(runtime, header.run_id, stack.counter):
        total.update(counts)

    # start (a transaction: header and listing item; then the echo) + 2 writes, 1 Query and
    # 1 event per step + finish (echo and header); no GetItem, nothing else.
    assert dict(total) == {
        "TransactWriteItems": 1,
        "PutItem": 1 + 2 * steps + 1,
        "Query": steps,
        "UpdateItem": 1,
        "PutEvents": 1 + steps,
    }


def test_continuous_invocation_reads_once_and_publishes_once(stack: Stack) -> None:
    steps = 5
    runtime = stack.runtime(steps_agent(steps))
    header, _ = runtime.start_run("counted", 0)
    stack.counter.take()

    outcome = runtime.execute(header.run_id, budget=None, remaining_ms=60_000)

    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert stack.counter.take() == {
        "Query": 1,
        "PutItem": 2 * steps + 1,  # and the echo of the finish
        "UpdateItem": 1,
        "PutEvents": 1,
    }


def test_cold_loads_take_a_second_query_page_once_the_journal_passes_1_mb(stack: Stack) -> None:
    # 300 KB results (under the 350 KB inline limit): the 4th step takes the journal past 1 MB.
    # Every invocation on a cold container (a journal instance of its own): a whole read.
    value = "x" * 300_000
    definition = steps_agent(6, value)
    header, _ = stack.runtime(definition).start_run("counted", 0)
    stack.counter.take()
    client = stack.journal._client.raw

    per_invocation = []
    for _ in range(6):
        stack.journal = DynamoDBJournal(client, "journal")
        stack.runtime(definition).execute(header.run_id, budget=1, remaining_ms=60_000)
        per_invocation.append(stack.counter.take())

    pages = [counts["Query"] for counts in per_invocation]
    assert pages == [1, 1, 1, 1, 2, 2]
    assert all("GetItem" not in counts for counts in per_invocation)
    assert all(writes(counts) == 2 for counts in per_invocation[:-1])
    assert all(counts["PutEvents"] == 1 for counts in per_invocation)


def test_warm_invocations_read_only_the_tail_once_the_journal_passes_8_kb(stack: Stack) -> None:
    # ADR 0015: past about 8 KB of journal, a warm container reads the journal's tail (one
    # Query) instead of the whole partition, whatever its length; the header echo in that
    # tail says the header it keeps is current (ADR 0019), so no GetItem of the header.
    value = "x" * 300_000
    runtime = stack.runtime(steps_agent(6, value))
    header, _ = runtime.start_run("counted", 0)
    stack.counter.take()

    per_invocation = drive_faithful(runtime, header.run_id, stack.counter)

    # The first invocation of the run in this process reads it whole (1 Query, the header in
    # it), and so does the second (what it read then was under 8 KB: a whole read was as
    # cheap); every later one: 1 Query, even past 1 MB.
    reads = [(counts.get("GetItem", 0), counts["Query"]) for counts in per_invocation]
    assert reads == [(0, 1)] * 6
    assert all(writes(counts) == 2 for counts in per_invocation[:-1])
    assert all(counts["PutEvents"] == 1 for counts in per_invocation)


# -- per operation kind (scripts/bench_kinds.py, the accounting of scripts/bench_accounting.py) --

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from bench_billing import Bill  # noqa: E402
from bench_kinds import STATUS_CHANGES, Platform, marginal, platform, status_change_bills  # noqa: E402

# One more operation of each kind in a faithful run: requests by type, durable writes, billed
# write/read units (DynamoDB's rules, GSIs included) and Lambda invocations. A change in the
# write path shows up here first; update docs/benchmarks.md (`make bench`) with it.
PER_KIND: dict[str, tuple[dict[str, int], float, float, int]] = {
    "step": ({"PutEvents": 1, "PutItem": 2, "Query": 1}, 2, 1, 1),
    "llm": ({"PutEvents": 1, "PutItem": 2, "Query": 1}, 2, 1, 1),
    "tool": ({"PutEvents": 1, "PutItem": 1, "Query": 1, "TransactWriteItems": 1}, 7, 1, 1),
    "wait": (
        {"CreateSchedule": 1, "GetItem": 1, "PutEvents": 1, "Query": 1, "TransactWriteItems": 2},
        16,  # the header echo rides in both transactions (ADR 0019)
        2,
        2,
    ),
    "approval": (
        {"GetItem": 1, "PutEvents": 2, "PutItem": 1, "Query": 1, "TransactWriteItems": 2},
        27,
        2,
        2,
    ),
    "callback": (
        {
            "GetItem": 2,
            "PutEvents": 1,
            "PutItem": 4,  # the echo before the header's UpdateItem
            "Query": 1,
            "TransactWriteItems": 2,
            "UpdateItem": 1,
        },
        27,
        3,
        2,
    ),
    "invoke": (
        {
            "GetItem": 1,
            "PutEvents": 2,
            "PutItem": 2,  # the child's echo at its start and before its finish
            "Query": 2,
            "TransactWriteItems": 3,  # the child's start: its header and listing item
            "UpdateItem": 1,
        },
        28,  # the child's listing item enters the start-time indexes (gsi4, gsi3)
        3,
        2,
    ),
    "parallel branch": ({"PutEvents": 2, "PutItem": 3, "Query": 2}, 3, 2, 2),
    "emit": ({"PutEvents (relay)": 1, "PutItem": 1}, 1, 0, 0),
    "step 400 KB": (
        {"GetObject": 1, "PutEvents": 1, "PutItem": 2, "PutObject": 1, "Query": 1},
        2,
        1,
        1,
    ),
    # A rerun's call the original made (ADR 0027): one write (no PREPARE), and the ledger's
    # reads: the rerun's own calls and the original's.
    "tool reused (rerun)": ({"PutEvents": 1, "Query": 3, "TransactWriteItems": 1}, 4, 3, 1),
}


@pytest.fixture(scope="module")
def billed() -> Iterator[Platform]:
    with platform() as plat:
        yield plat


@pytest.mark.parametrize("kind", list(PER_KIND))
def test_requests_and_units_per_operation_kind(billed: Platform, kind: str) -> None:
    requests, wru, rru, lambdas = PER_KIND[kind]

    bill = marginal(kind, billed)

    assert {op: n for op, n in bill.requests.items() if n} == requests
    assert (bill.wru, bill.rru, bill.lambdas) == (wru, rru, lambdas)


# -- write units per run status change (ADR 0029: a header is in one listing, gsi1's) ----------

# Each change of a run's status as the journal writes it on its own (bench_kinds.
# status_change_bills): billed write units in all, and the run header's share. A header under
# 1 KB is in one index, so a change is its UpdateItem (1) and a move in gsi1 (a delete and a
# put: 2); the echo (1, in no index) is written with it. The start is one transaction: the
# header (2 + gsi1 1) and its listing item (2 + gsi4 1 + gsi3 1), then the echo.
STATUS_CHANGE_WRU: dict[str, tuple[float, float]] = {
    "start": (8, 3),
    "RUNNING -> SUSPENDED (timer)": (4, 3),
    "SUSPENDED (timer) -> RUNNING": (4, 3),
    "RUNNING -> SUSPENDED (no timer)": (4, 3),
    "SUSPENDED (no timer) -> RUNNING": (4, 3),
    "RUNNING -> PAUSED": (4, 3),
    "PAUSED -> RUNNING": (4, 3),
    "finish (SUCCEEDED)": (4, 3),
    # The stamping passes also stamp the listing item (1 + gsi4 1 + gsi3 1); the header moves
    # on to a later EXPIRING key (3), then leaves gsi1 (1 + a delete in gsi1: 2).
    "first stamping pass (EXPIRING, later)": (6, 3),
    "second stamping pass (out of EXPIRING)": (2, 2),
}


@pytest.fixture(scope="module")
def status_changes(billed: Platform) -> dict[str, Bill]:
    return status_change_bills(billed)


def test_status_changes_measured_are_the_pinned_ones(status_changes: dict[str, Bill]) -> None:
    assert list(status_changes) == list(STATUS_CHANGES) == list(STATUS_CHANGE_WRU)


@pytest.mark.parametrize("change", list(STATUS_CHANGE_WRU))
def test_write_units_per_status_change(status_changes: dict[str, Bill], change: str) -> None:
    total, header = STATUS_CHANGE_WRU[change]

    bill = status_changes[change]

    assert (bill.wru, bill.item_wru["header"]) == (total, header)
    assert header <= 3  # was 7: the header moved in gsi1, gsi2 and gsi3 (1 + 3 x 2)
