"""Flow control at scale on moto: a deep queue drained through a concurrency limit, a rate limit.

Two measurements of ADR 0030's rules on the real ``DynamoDBFlowItems`` (the journal table
created from ``template.yaml``), with every DynamoDB request counted by operation and the write
units it consumes per partition (``slots#<agent>``, ``keys#<agent>``, ``queue#<agent>#<key>``,
``rate#<limiter>#<shard>``: an item written in a TransactWriteItems is 2 units per started KB,
a single write 1; every flow item here is under 1 KB, which the bench checks):

* **Slots**: ``--runs`` runs over ``--keys`` keys are queued for one agent with
  ``Concurrency(limit=--limit)`` through the engine's ``Slots`` (key by key: the first key's
  runs all arrive before the second key's, the worst case for fairness), then granted until
  every slot is taken, then released and granted on, one for one (the oldest holder first),
  until the queue is empty. After every grant the agent's ``count`` item is read (not counted):
  its ``n`` must equal the holders this bench knows of and never exceed the limit. The grant
  order must be a strict round-robin of the keys.
* **Rate limit**: ``RateLimits.take`` of ``RateLimit(--rate, per_seconds=60)`` (one shard) and
  of a 4-shard limit, callers three times the limit in one period: requests per take taken and
  per take refused; then ``--threads`` threads, each with its own client, taking at once from
  an ``IsolatedMotoServer`` (DynamoDB requests handled one at a time, as DynamoDB applies
  conditional writes to one item) for ``--periods`` periods: exactly the limit is taken in each.

Usage: ``python scripts/bench_flow.py [--runs 10000 --keys 1000 --limit 100]`` (prints
markdown).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import logging
import math
import platform
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from bench_aws import item_size  # sets sys.path and a safe AWS environment, before any client
from bench_common import TABLE, TEMPLATE
from moto import mock_aws

from durable_agents.engine.flow.rates import RateLimits, Taken
from durable_agents.engine.flow.slots import Slots
from durable_agents.flow_control import Concurrency, RateLimit
from durable_agents.journal.dynamodb_flow_items import FLOW_PK_PREFIX, DynamoDBFlowItems
from durable_agents.journal.flow_items import (
    Check,
    Delete,
    FlowConflictError,
    FlowItem,
    FlowItems,
    FlowWrite,
    Increment,
    InMemoryFlowItems,
    Put,
)
from durable_agents_local.isolated_moto import IsolatedMotoServer
from durable_agents_local.moto_speed import faster_moto
from durable_agents_local.template import create_journal_table

AGENT = "bench"
START_MS = 1_800_000_000_000
PARTITION_WCU_PER_S = 1_000  # DynamoDB's write limit of one partition
ITEM_WCU_PER_S = 1_000  # and of one item (a partition split for heat cannot split an item)
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})


def partition_class(pk: str) -> str:
    """``slots#bench`` and ``keys#bench`` as they are; one key's queue as ``queue#bench#*``."""
    name = pk.removeprefix(FLOW_PK_PREFIX)
    if name.startswith("queue#"):
        return f"queue#{AGENT}#*"
    if name.startswith("rate#"):
        return name.rsplit("#", 1)[0] + "#*"
    return name


@dataclass
class Tally:
    """DynamoDB requests by operation; write units by partition, by item (``count``) too."""

    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    wcu: collections.Counter[str] = field(default_factory=collections.Counter)
    item_wcu: collections.Counter[str] = field(default_factory=collections.Counter)
    refused: int = 0
    largest_item: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            self.requests + other.requests,
            self.wcu + other.wcu,
            self.item_wcu + other.item_wcu,
            self.refused + other.refused,
            max(self.largest_item, other.largest_item),
        )

    def per(self, n: int) -> dict[str, Any]:
        """Requests and write units per one of ``n`` operations."""
        return {
            "requests": {op: c / n for op, c in sorted(self.requests.items())},
            "wcu": {p: c / n for p, c in sorted(self.wcu.items())},
            "item_wcu": {p: c / n for p, c in sorted(self.item_wcu.items())},
            "refused": self.refused / n,
        }


class Counting:
    """Counts the DynamoDB requests of the clients it is attached to into its current tally."""

    def __init__(self) -> None:
        self.tally = Tally()
        self.paused = False
        self._lock = threading.Lock()

    def attach(self, client: Any) -> None:
        """Counts ``client``'s requests from now on."""
        client.meta.events.register("provide-client-params.dynamodb", self._params)
        client.meta.events.register("after-call.dynamodb", self._after)

    def take(self) -> Tally:
        """The tally so far; a new one starts."""
        with self._lock:
            out, self.tally = self.tally, Tally()
        return out

    def _params(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if self.paused:
            return
        op = model.name
        writes: list[tuple[str, str, int, int]] = []  # (pk, sk, units, size)
        if op == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((_kind, body),) = entry.items()
                item = body.get("Item") or body["Key"]
                size = item_size(item)
                writes.append((item["pk"]["S"], item["sk"]["S"], 2 * math.ceil(size / 1024), size))
        elif op in WRITES:
            item = params.get("Item") or params["Key"]
            size = item_size(item)
            writes.append((item["pk"]["S"], item["sk"]["S"], math.ceil(size / 1024), size))
        with self._lock:
            self.tally.requests[op] += 1
            for pk, sk, units, size in writes:
                self.tally.wcu[partition_class(pk)] += units
                if sk == "count":
                    self.tally.item_wcu[f"{partition_class(pk)} count"] += units
                self.tally.largest_item = max(self.tally.largest_item, size)

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if self.paused:
            return
        code = parsed.get("Error", {}).get("Code", "")
        if code in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            with self._lock:
                self.tally.refused += 1


_SINGLE = {Put: "PutItem", Delete: "DeleteItem", Increment: "UpdateItem"}


class CountingItems(FlowItems):
    """Flow items that count the DynamoDB requests ``DynamoDBFlowItems`` sends for each call.

    A ``get`` is one GetItem, a ``query`` one Query page (flow control's queries ask for at
    most 25 items of under 200 bytes: one page), a ``transact`` of one write (not a ``Check``)
    one PutItem / UpdateItem / DeleteItem, of more one TransactWriteItems (2 write units per
    item, DynamoDB's rule for items under 1 KB). The moto run checks that this is what the
    DynamoDB backend sends; it lets the big queue run on process memory (even with
    ``durable_agents_local.moto_speed``'s patches, moto evaluates a query over every item of
    its partition: the round-robin of 1,000 keys makes each grant slow, and a 10,000-run queue
    would take hours).
    """

    def __init__(self, inner: FlowItems) -> None:
        self.inner = inner
        self.tally = Tally()
        self.paused = False

    def take(self) -> Tally:
        """The tally so far; a new one starts."""
        out, self.tally = self.tally, Tally()
        return out

    def get(self, partition: str, key: str) -> FlowItem | None:
        """Counts a GetItem."""
        if not self.paused:
            self.tally.requests["GetItem"] += 1
        return self.inner.get(partition, key)

    def query(self, partition: str, **kwargs: Any) -> list[FlowItem]:  # type: ignore[override]
        """Counts a Query page."""
        if not self.paused:
            self.tally.requests["Query"] += 1
        return self.inner.query(partition, **kwargs)

    def transact(self, writes: Sequence[FlowWrite]) -> None:
        """Counts the write request and its write units per partition."""
        single = len(writes) == 1 and not isinstance(writes[0], Check)
        if not self.paused:
            op = _SINGLE[type(writes[0])] if single else "TransactWriteItems"
            self.tally.requests[op] += 1
            for write in writes:
                pk = FLOW_PK_PREFIX + write.partition
                units = 1 if single else 2
                self.tally.wcu[partition_class(pk)] += units
                if write.key == "count":
                    self.tally.item_wcu[f"{partition_class(pk)} count"] += units
        try:
            self.inner.transact(writes)
        except FlowConflictError:
            if not self.paused:
                self.tally.refused += 1
            raise


@dataclass
class SlotsResult:
    """What draining the queue cost and showed."""

    runs: int
    keys: int
    limit: int
    enqueue: Tally
    grant: Tally
    release: Tally
    refused_grant: Tally
    grants: int
    max_held: int
    round_robin: bool
    final_counts: dict[str, int]
    seconds: dict[str, float]


def _clock() -> Iterator[int]:
    return itertools.count(START_MS)


def measure_slots(runs: int, keys: int, limit: int, *, backend: str = "memory") -> SlotsResult:
    """Queues ``runs`` runs over ``keys`` keys and drains them through ``limit`` slots.

    ``backend``: "moto" (``DynamoDBFlowItems`` on in-process moto; the requests botocore sends
    are counted too and must equal what ``CountingItems`` counts) or "memory".
    """
    with mock_aws(), pytest.MonkeyPatch.context() as patcher:
        if backend == "moto":
            # moto would copy its whole table for every item of every transaction (O(table)
            # a request); patched to cost what a request touches, answers unchanged.
            faster_moto(patcher)
            client = boto3.client("dynamodb", region_name="us-east-1")
            create_journal_table(client, TABLE, TEMPLATE)
            wire = Counting()
            wire.attach(client)
            return _drain(CountingItems(DynamoDBFlowItems(client, TABLE)), runs, keys, limit, wire)
    return _drain(CountingItems(InMemoryFlowItems()), runs, keys, limit, None)


def _drain(
    items: CountingItems, runs: int, keys: int, limit: int, wire: Counting | None
) -> SlotsResult:
    assert runs % keys == 0, "the same number of runs per key (a strict round-robin is checked)"
    per_key = runs // keys
    limits = Concurrency(limit=limit, key="input.user")
    slots = Slots(items)
    clock = _clock()
    names = [f"k{k:05d}" for k in range(keys)]
    seconds: dict[str, float] = {}

    def take() -> Tally:
        tally = items.take()
        if wire is not None:  # what went over the wire is what the port counted
            sent = wire.take()
            assert (sent.requests, sent.wcu, sent.refused) == (
                tally.requests,
                tally.wcu,
                tally.refused,
            ), (sent, tally)
            tally.largest_item = sent.largest_item
        return tally

    began = time.perf_counter()
    for key in names:  # key by key: the first key's runs all arrive first
        for j in range(per_key):
            now = next(clock)
            assert slots.enqueue(AGENT, f"r-{key}-{j:04d}", key, 3, now, now)
    seconds["enqueue"] = time.perf_counter() - began
    enqueue = take()

    def count_n() -> int:
        items.paused = True
        if wire is not None:
            wire.paused = True
        try:
            count, _ = slots.counts(AGENT)
        finally:
            items.paused = False
            if wire is not None:
                wire.paused = False
        assert count is not None
        return count.counters.get("n", 0)

    held: collections.deque[str] = collections.deque()
    order: list[str] = []
    grant, release = Tally(), Tally()
    max_held = 0

    def grant_one() -> bool:
        nonlocal grant, max_held
        granted = slots.grant_next(AGENT, limits, next(clock))
        spent = take()
        if granted is None:
            return False
        grant += spent
        held.append(granted.run_id)
        order.append(granted.key)
        n = count_n()
        assert n == len(held) <= limit, (n, len(held), limit)
        max_held = max(max_held, n)
        return True

    began = time.perf_counter()
    while len(held) < limit and grant_one():
        pass
    # Every slot taken: one more grant is refused (and what that costs).
    assert slots.grant_next(AGENT, limits, next(clock)) is None
    refused_grant = take()
    while held:
        run_id = held.popleft()
        assert slots.release(AGENT, run_id)
        release += take()
        grant_one()
    seconds["drain"] = time.perf_counter() - began

    items.paused = True
    if wire is not None:
        wire.paused = True
    count, _ = slots.counts(AGENT)
    assert count is not None
    assert slots.holders(AGENT) == [] and not slots.has_waiting(AGENT)
    expected = [key for _ in range(per_key) for key in names]
    return SlotsResult(
        runs=runs,
        keys=keys,
        limit=limit,
        enqueue=enqueue,
        grant=grant,
        release=release,
        refused_grant=refused_grant,
        grants=len(order),
        max_held=max_held,
        round_robin=order == expected,
        final_counts=dict(count.counters),
        seconds=seconds,
    )


@dataclass
class RateResult:
    """Takes of one period, one after the other (in-process moto)."""

    name: str
    limit: RateLimit
    callers: int
    taken: int
    taken_tally: Tally
    refused_tally: Tally


def measure_rate_sequential(limit: RateLimit, name: str, callers: int) -> RateResult:
    """``callers`` takes in one period, one at a time: what a take taken and refused costs."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_journal_table(client, TABLE, TEMPLATE)
        counting = Counting()
        counting.attach(client)
        rates = RateLimits(DynamoDBFlowItems(client, TABLE))
        taken, refused = Tally(), Tally()
        n_taken = 0
        for i in range(callers):
            counting.take()
            got = rates.take(f"tool#{name}", limit, f"op-{i}", 3, START_MS + i)
            spent = counting.take()
            if isinstance(got, Taken):
                n_taken += 1
                taken += spent
            else:
                refused += spent
        return RateResult(name, limit, callers, n_taken, taken, refused)


@dataclass
class ThreadsResult:
    """Concurrent takes against one server, per period."""

    limit: RateLimit
    threads: int
    callers_per_period: int
    taken_per_period: list[int]
    requests: dict[str, int]
    seconds: float


def measure_rate_threads(
    limit: RateLimit, threads: int, periods: int, callers_per_period: int
) -> ThreadsResult:
    """``threads`` threads take at once for ``periods`` periods, against an isolated server."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = IsolatedMotoServer(store_key=None, ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"

        def new_client() -> Any:
            return boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)

        create_journal_table(new_client(), TABLE, TEMPLATE)
        counting = Counting()
        clients = [new_client() for _ in range(threads)]
        for c in clients:
            counting.attach(c)
        taken_per_period = [0] * periods
        lock = threading.Lock()
        barrier = threading.Barrier(threads)
        period_ms = limit.period_ms

        def work(t: int) -> None:
            rates = RateLimits(DynamoDBFlowItems(clients[t], TABLE))
            for p in range(periods):
                barrier.wait()  # every thread in the same period at once
                mine = 0
                for i in range(t, callers_per_period, threads):
                    now = START_MS + p * period_ms + i % period_ms
                    if isinstance(rates.take("tool#shared", limit, f"{p}-{i}", 3, now), Taken):
                        mine += 1
                with lock:
                    taken_per_period[p] += mine

        began = time.perf_counter()
        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        seconds = time.perf_counter() - began
        return ThreadsResult(
            limit,
            threads,
            callers_per_period,
            taken_per_period,
            dict(counting.take().requests),
            seconds,
        )
    finally:
        server.stop()


# -- the report ------------------------------------------------------------------------------


def _fmt(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _ops(requests: dict[str, float]) -> str:
    return ", ".join(f"{_fmt(n)} {op}" for op, n in requests.items() if n) or "-"


def _units(wcu: dict[str, float]) -> str:
    return ", ".join(f"`{p}` {_fmt(n)}" for p, n in wcu.items() if n) or "-"


def slots_table(result: SlotsResult) -> str:
    """Requests and write units per queued run, per grant, per release (markdown)."""
    rows = [
        ("enqueue (per run)", result.enqueue.per(result.runs)),
        ("grant (per grant)", result.grant.per(result.grants)),
        ("release (per release)", result.release.per(result.grants)),
        ("a grant refused (every slot taken)", result.refused_grant.per(1)),
    ]
    lines = [
        "| operation | requests | write units by partition | refused conditions |",
        "|---|---|---|---|",
    ]
    for name, per in rows:
        lines.append(
            f"| {name} | {_ops(per['requests'])} | {_units(per['wcu'])} | {_fmt(per['refused'])} |"
        )
    return "\n".join(lines)


def per_cycle(result: SlotsResult) -> dict[str, float]:
    """Write units per run that goes through (queued, granted, released), by partition."""
    total = result.enqueue + result.grant + result.release
    return {p: n / result.grants for p, n in sorted(total.wcu.items())}


def count_item_per_cycle(result: SlotsResult) -> float:
    """Write units per run through on the agent's one ``count`` item."""
    total = result.enqueue + result.grant + result.release
    return sum(total.item_wcu.values()) / result.grants


def report(
    small: SlotsResult,
    big: SlotsResult,
    rates: list[RateResult],
    threads: ThreadsResult,
    command: str,
) -> str:
    """The markdown report (``small`` ran on moto, ``big`` on process memory)."""
    cycle = per_cycle(big)
    slots_wcu = cycle.get(f"slots#{AGENT}", 0.0)
    keys_wcu = cycle.get(f"keys#{AGENT}", 0.0)
    count_wcu = count_item_per_cycle(big)
    largest = max(small.enqueue.largest_item, small.grant.largest_item, small.release.largest_item)
    same = slots_table(small) == slots_table(big)
    t = threads
    exact = set(t.taken_per_period) == {t.limit.requests}
    out = [
        f"`{command}` (python {platform.python_version()}, {platform.machine()}):",
        "",
        f"**Slots, on moto**: {small.runs:,} runs over {small.keys:,} keys, "
        f"`Concurrency(limit={small.limit})`, queued in {small.seconds['enqueue']:.0f} s and "
        f"drained in {small.seconds['drain']:.0f} s; every request botocore sent was counted "
        "and equals what the port-level count says (checked call by call). Per operation:",
        "",
        slots_table(small),
        "",
        f"**Slots, {big.runs:,} runs over {big.keys:,} keys** ({big.runs // big.keys} each, "
        f"queued key by key), `Concurrency(limit={big.limit})`, the same `Slots` code on the "
        "in-memory flow items with the DynamoDB requests counted at the port (moto reads every "
        "item of a partition for each query, so this queue would take hours there): "
        f"queued in {big.seconds['enqueue']:.1f} s, drained in {big.seconds['drain']:.1f} s. "
        "Requests and write units per operation: "
        + ("**the same as on moto**." if same else "different from moto:\n\n" + slots_table(big)),
        "",
        f"- Grants: {big.grants:,}; slots held at most: {big.max_held} (the `count` item read "
        f"after every grant: never above {big.limit}, always equal to the holders); at the end "
        f"`count` = `{json.dumps(big.final_counts, sort_keys=True)}`, no holder, no key waiting.",
        "- Grant order a strict round-robin of the keys: "
        f"**{'yes' if big.round_robin else 'no'}** (each of the {big.runs // big.keys} rounds "
        f"served all {big.keys:,} keys once, in the same order, although the first key's runs "
        "were all queued first).",
        f"- Largest flow item written: {largest} bytes (under 1 KB: one write unit per item, "
        "two in a transaction).",
        f"- Per run that goes through (queued, granted, released): `slots#{AGENT}` "
        f"{_fmt(slots_wcu)} WCU, of which {_fmt(count_wcu)} on its `count` item; "
        f"`keys#{AGENT}` {_fmt(keys_wcu)} WCU; its key's `queue#` partition "
        f"{_fmt(cycle.get(f'queue#{AGENT}#*', 0.0))} WCU. At {PARTITION_WCU_PER_S:,} WCU a "
        f"second per partition: **{PARTITION_WCU_PER_S / slots_wcu:.0f} grants a second** per "
        f"agent (`slots#`), {PARTITION_WCU_PER_S / keys_wcu:.0f} for `keys#`; the `count` "
        f"item alone bounds it at {ITEM_WCU_PER_S / count_wcu:.0f} even after DynamoDB splits "
        "the partition for heat.",
        "",
        "**Rate limit**, one period, callers one after another (moto):",
        "",
        "| limit | callers | taken | per take taken | per take refused |",
        "|---|---|---|---|---|",
    ]
    for r in rates:
        refused = r.callers - r.taken
        shards = r.limit.shard_count
        declared = "" if r.limit.shards is None else f", shards={r.limit.shards}"
        out.append(
            f"| {r.name}: `RateLimit({r.limit.requests}, per_seconds={r.limit.per_seconds:g}"
            f"{declared})` ({shards} shard{'s' * (shards > 1)}) | {r.callers} | {r.taken} "
            f"| {_ops(r.taken_tally.per(max(r.taken, 1))['requests'])} "
            f"| {_ops(r.refused_tally.per(max(refused, 1))['requests']) if refused else '-'} |"
        )
    out += [
        "",
        f"**Rate limit, concurrent**: {t.threads} threads (a client each) against one "
        f"`IsolatedMotoServer`, `RateLimit({t.limit.requests}, per_seconds="
        f"{t.limit.per_seconds:g})`, {t.callers_per_period} takes per period: taken per "
        f"period {t.taken_per_period} (the limit exactly: **{'yes' if exact else 'no'}**); "
        f"requests {_ops(dict(sorted(t.requests.items())))}, in {t.seconds:.1f} s.",
    ]
    return "\n".join(out)


def main() -> None:
    """Runs the measurements and prints the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--moto-runs", type=int, default=1_000)
    parser.add_argument("--moto-keys", type=int, default=100)
    parser.add_argument("--moto-limit", type=int, default=20)
    parser.add_argument("--rate", type=int, default=50, help="requests per minute")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--periods", type=int, default=3)
    args = parser.parse_args()
    small = measure_slots(args.moto_runs, args.moto_keys, args.moto_limit, backend="moto")
    big = measure_slots(args.runs, args.keys, args.limit)
    rates = [
        measure_rate_sequential(RateLimit(args.rate, per_seconds=60), "per-minute", 3 * args.rate),
        measure_rate_sequential(
            RateLimit(args.rate, per_seconds=60, shards=4), "sharded", 3 * args.rate
        ),
    ]
    threads = measure_rate_threads(
        RateLimit(args.rate, per_seconds=60), args.threads, args.periods, 3 * args.rate
    )
    command = (
        f"python scripts/bench_flow.py --runs {args.runs} --keys {args.keys} --limit {args.limit}"
        f" --moto-runs {args.moto_runs} --moto-keys {args.moto_keys} --moto-limit"
        f" {args.moto_limit} --rate {args.rate} --threads {args.threads} --periods {args.periods}"
    )
    print(report(small, big, rates, threads, command))


if __name__ == "__main__":
    main()
