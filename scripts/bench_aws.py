"""Benchmarks on DynamoDB + EventBridge (in-process moto): exact AWS request counts per step,
and journal Query pages once the journal outgrows one 1 MB page.
"""

from __future__ import annotations

import collections
import itertools
import re
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from bench_common import (  # sets sys.path and a safe AWS environment, before any client
    BUS,
    ONE_MB,
    REMAINING_MS,
    REQUEST_COLUMNS,
    TABLE,
    TEMPLATE,
    WRITES,
    Config,
    Table,
    _ms,
    _runtime,
    plain_steps_agent,
)
from moto import mock_aws

from durable_agents.agent import AgentDefinition
from durable_agents.aws.eventbridge import EventBridgePublisher
from durable_agents.engine.outcomes import OutcomeKind
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.template import create_journal_table


def item_size(item: dict[str, Any]) -> int:
    """Approximate DynamoDB item size (AWS's rules: names + values, numbers ~1 byte/2 digits)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(str(raw).encode())
    if kind == "N":
        digits = re.sub(r"[^0-9]", "", str(raw)).lstrip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) + 1 for k, v in raw.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in raw)
    return len(str(raw).encode())


class RequestRecorder:
    """Counts API calls per operation on boto3 clients (botocore event hooks) and their time.

    ``before-call`` fires once per API call, before the request is sent (moto answers at
    ``before-send``); ``after-call`` gives the parsed response, whose Query items are sized.
    """

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.aws_ns = 0
        self.query_bytes = 0
        self._started: list[int] = []

    def attach(self, client: Any) -> None:
        """Starts counting the calls ``client`` makes."""
        client.meta.events.register("before-call", self._before)
        client.meta.events.register("after-call", self._after)

    def _before(self, model: Any, **_: Any) -> None:
        self.counts[model.name] += 1
        self._started.append(time.perf_counter_ns())

    def _after(self, model: Any, parsed: dict[str, Any] | None = None, **_: Any) -> None:
        if self._started:
            self.aws_ns += time.perf_counter_ns() - self._started.pop()
        if model.name == "Query" and parsed:
            self.query_bytes += sum(item_size(i) for i in parsed.get("Items", []))

    def take(self) -> collections.Counter[str]:
        """Returns the counts so far and starts again from zero."""
        counts, self.counts = self.counts, collections.Counter()
        self.query_bytes = 0
        return counts


@contextmanager
def moto_runtime(
    definition: AgentDefinition[Any, Any],
) -> Iterator[tuple[Runtime, RequestRecorder]]:
    """A runtime on a moto DynamoDB table (from template.yaml) and a moto EventBridge bus.

    Its journal reads the whole partition on every load (``tail_reads=False``), as a container
    that never saw the run does: the tables here are the whole read's cost. What a warm
    container reads instead (ADR 0015) is ``scripts/bench_tail.py``'s.
    """
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        events = boto3.client("events", region_name="us-east-1")
        create_journal_table(dynamodb, TABLE, TEMPLATE)
        events.create_event_bus(Name=BUS)
        recorder = RequestRecorder()
        recorder.attach(dynamodb)
        recorder.attach(events)
        runtime = _runtime(
            definition,
            DynamoDBJournal(dynamodb, TABLE, tail_reads=False),
            publisher=EventBridgePublisher(events, BUS),
        )
        yield runtime, recorder


def drive_faithful(
    runtime: Runtime, run_id: str, on_invocation: Callable[[int], None] | None = None
) -> int:
    """Calls ``execute(budget=1)`` like the StepRunner until the run stops; returns the count."""
    invocations = 0
    while True:
        outcome = runtime.execute(run_id, budget=1, remaining_ms=REMAINING_MS)
        invocations += 1
        if on_invocation is not None:
            on_invocation(invocations)
        if outcome.kind is not OutcomeKind.CONTINUE:
            if outcome.kind is not OutcomeKind.SUCCEEDED:
                raise RuntimeError(f"run ended {outcome.kind}: {outcome.detail}")
            return invocations


def _counts_row(label: str, counts: collections.Counter[str]) -> list[object]:
    writes = sum(n for op, n in counts.items() if op in WRITES)
    other = {op: n for op, n in counts.items() if op not in REQUEST_COLUMNS}
    return [
        label,
        *(counts.get(c, 0) for c in REQUEST_COLUMNS),
        writes,
        ", ".join(f"{k}={v}" for k, v in sorted(other.items())) or "-",
    ]


def bench_request_counts(cfg: Config) -> list[Table]:
    """Exact request counts per plain step, per run start and finish (faithful, moto)."""
    steps = cfg.moto_steps
    per_invocation: list[collections.Counter[str]] = []
    with moto_runtime(plain_steps_agent(steps)) as (runtime, recorder):
        header, _ = runtime.start_run("bench", 0)
        start = recorder.take()
        stamps = [time.perf_counter_ns()]
        recorder.aws_ns = 0

        def record(_: int) -> None:
            stamps.append(time.perf_counter_ns())
            per_invocation.append(recorder.take())

        drive_faithful(runtime, header.run_id, record)
        wall_ns = stamps[-1] - stamps[0]
        durations = [b - a for a, b in itertools.pairwise(stamps)]
        aws_ns = recorder.aws_ns
        runtime.start_run("bench", 0, idempotency_key="bench-key")
        start_idem = recorder.take()
        runtime.start_run("bench", 0, idempotency_key="bench-key")
        start_repeat = recorder.take()

    steady = per_invocation[:-1]
    kinds = {tuple(sorted(c.items())) for c in steady}
    if len(kinds) != 1:
        raise RuntimeError(f"steady-state invocations differ: {kinds}")
    step = steady[0]
    last = per_invocation[-1]
    finish = last - step
    total = sum(per_invocation, collections.Counter()) + start

    counts = Table(
        f"AWS requests per plain step, faithful mode, {steps}-step run (exact)",
        ["", *REQUEST_COLUMNS, "writes", "other"],
    )
    counts.rows.append(
        [
            str(c)
            for c in _counts_row(f"each step's invocation (all {len(steady)} but the last)", step)
        ]
    )
    counts.rows.append([str(c) for c in _counts_row("last invocation (last step + finish)", last)])
    counts.rows.append([str(c) for c in _counts_row("fixed: start_run", start)])
    counts.rows.append(
        [str(c) for c in _counts_row("fixed: start_run with idempotency key", start_idem)]
    )
    counts.rows.append([str(c) for c in _counts_row("repeated start_run, same key", start_repeat)])
    counts.rows.append([str(c) for c in _counts_row("fixed: finish (last minus a step)", finish)])
    counts.rows.append([str(c) for c in _counts_row(f"whole run, {steps} steps", total)])
    counts.notes += [
        "Targets per plain step: at most 2 writes, 1 journal Query page (journal under 1 MB), "
        f"1 PutEvents. Measured: {sum(step[w] for w in WRITES)} writes, {step['Query']} Query "
        f"page, {step['PutEvents']} PutEvents: "
        + (
            "**met**."
            if sum(step[w] for w in WRITES) <= 2 and step["Query"] == 1 and step["PutEvents"] == 1
            else "**NOT met**."
        ),
        "The finish adds one UpdateItem to the last step's invocation; its Run Finished event "
        "takes the place of that invocation's Step Ready.",
        "A start with an idempotency key writes the run header and the key item in one "
        "TransactWriteItems (2 items, billed at 2x write units each).",
        f"Wall time of the {steps} invocations on moto: {_ms(wall_ns)} ms "
        f"({_ms(wall_ns / steps)} ms per invocation), {100 * aws_ns / wall_ns:.0f}% of it inside "
        "boto3 calls to moto: moto-bound, not a prediction of AWS latency. The invocation "
        f"time grows with the journal (first 10: {_ms(statistics.mean(durations[:10]))} ms, "
        f"last 10: {_ms(statistics.mean(durations[-10:]))} ms each), mostly moto's Query.",
    ]

    with moto_runtime(plain_steps_agent(steps)) as (runtime, recorder):
        header, _ = runtime.start_run("bench", 0)
        recorder.take()
        runtime.execute(header.run_id, budget=None, remaining_ms=REMAINING_MS)
        batch = recorder.take()
        snapshot_bytes = _journal_bytes(runtime, header.run_id, recorder)
    batch_table = Table(
        f"Same {steps} steps in one invocation (budget=None), for comparison",
        ["", *REQUEST_COLUMNS, "writes", "other"],
    )
    batch_table.rows.append(
        [str(c) for c in _counts_row(f"one invocation, {steps} steps + finish", batch)]
    )
    per_step_bytes = snapshot_bytes / steps
    batch_table.notes += [
        "Executing several operations per invocation amortizes the journal Query and the "
        "Step Ready event; the 2 writes per step remain.",
        f"Journal size of this run: ~{snapshot_bytes:,} bytes (DynamoDB item-size rules), "
        f"~{per_step_bytes:,.0f} bytes per plain step (2 entries), so one 1 MB Query page "
        f"holds ~{ONE_MB / per_step_bytes:,.0f} plain steps.",
    ]
    return [counts, batch_table]


def _journal_bytes(runtime: Runtime, run_id: str, recorder: RequestRecorder) -> int:
    recorder.take()
    runtime.store.load(run_id)
    size = recorder.query_bytes
    recorder.take()
    return size


def bench_query_pages(cfg: Config) -> Table:
    """Query pages per invocation as the journal grows past 1 MB (steps with big values)."""
    steps, value = cfg.big_steps, cfg.big_value_bytes
    rows: list[tuple[int, int, collections.Counter[str]]] = []
    with moto_runtime(plain_steps_agent(steps, value_bytes=value)) as (runtime, recorder):
        header, _ = runtime.start_run("bench", 0)
        recorder.take()

        def record(n: int) -> None:
            size = recorder.query_bytes
            rows.append((n - 1, size, recorder.take()))

        drive_faithful(runtime, header.run_id, record)
    table = Table(
        f"Journal Query pages per invocation, steps returning {value // 1000} KB values "
        f"({steps} steps, moto)",
        [
            "steps already in journal",
            "journal read (bytes, approx.)",
            "Query pages",
            "writes",
            "PutEvents",
        ],
    )
    first_two = next((r for r in rows if r[2]["Query"] >= 2), None)
    rows = rows[:-1]  # the last invocation also finishes the run (one more write)
    shown: set[int] = {0, steps // 4, steps // 2, steps - 2}
    if first_two is not None:
        shown |= {first_two[0] - 1, first_two[0]}
    previous = 0
    for done, size, counts in rows:
        if done in shown or counts["Query"] != previous:
            table.add(
                done,
                f"{size:,}",
                counts["Query"],
                sum(counts[w] for w in WRITES),
                counts["PutEvents"],
            )
        previous = counts["Query"]
    if first_two is not None:
        table.notes.append(
            f"The second Query page starts at {first_two[0]} recorded steps "
            f"(~{first_two[1]:,} bytes read): from there each invocation pays one more "
            "sequential, strongly consistent Query per ~1 MB of journal. moto cuts pages at "
            "1,000,000 bytes, DynamoDB at 1 MB; writes and events per step do not change."
        )
    return table
