"""Journal reads per warm invocation against journal length, whole reads vs tail reads (ADR 0015).

Run ``python scripts/bench_tail.py`` (``--quick``: smaller journals); ``--markdown PATH``
replaces the text between ``<!-- bench:tail:start -->`` and ``<!-- bench:tail:end -->``.

On moto behind real boto3 clients: one client writes the journal (unbilled), another reads it,
billed by ``bench_billing.Ledger`` (requests, read units by DynamoDB's rules, response bytes).
At each length a step is added the way the StepRunner adds one (a claim, then its result), and
the next invocation's load is measured twice: as before ADR 0015 (``tail_reads=False``: the
whole partition, every invocation) and as now (the default: a container that loaded the run at
the previous invocation reads the header and the journal's tail).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import boto3
from bench_billing import Ledger, peek_client
from bench_common import (  # sets sys.path and a safe AWS environment, before any client
    REMAINING_MS,
    TABLE,
    TEMPLATE,
    Table,
    _runtime,
    plain_steps_agent,
    step_entry,
)
from bench_markers import write_section
from moto import mock_aws

from durable_agents.core.models import EntryType, RunHeader, RunStatus
from durable_agents.engine.outcomes import OutcomeKind
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.item_size import item_size
from durable_agents_local.template import create_journal_table

START, END = "<!-- bench:tail:start -->", "<!-- bench:tail:end -->"
RUN = "bench-tail"


def _step(writer: DynamoDBJournal, position: int, value: str) -> None:
    for type_ in (EntryType.STARTED, EntryType.SUCCEEDED):
        entry = step_entry(RUN, position, type_, value)
        writer.commit(RUN, [entry])


def measure(lengths: Sequence[int], value_bytes: int) -> list[tuple[int, int, tuple[float, ...]]]:
    """(steps, journal bytes, (requests, RRU, bytes) before and after) at each length."""
    value = '"' + "x" * value_bytes + '"'
    rows = []
    with mock_aws():
        raw = boto3.client("dynamodb", region_name="us-east-1")
        create_journal_table(raw, TABLE, TEMPLATE)
        reader = boto3.client("dynamodb", region_name="us-east-1")
        ledger = Ledger(peek_client())
        ledger.attach(reader)
        writer = DynamoDBJournal(raw, TABLE)
        writer.create_run(RunHeader(RUN, "bench", {"agent": "1"}, RunStatus.RUNNING, "null", 1, 1))
        before = DynamoDBJournal(reader, TABLE, tail_reads=False)
        after = DynamoDBJournal(reader, TABLE)
        done = 0
        for length in lengths:
            while done < length:
                _step(writer, done + 1, value)
                done += 1
            after.load(RUN)  # the previous invocation's load, in this container
            _step(writer, done + 1, value)  # that invocation's step
            done += 1
            cells: list[float] = []
            for store in (before, after):
                start = ledger.take()
                snapshot = store.load(RUN)
                bill = ledger.take()
                requests = sum(bill.requests.values()) - sum(start.requests.values())
                cells += [requests, bill.rru - start.rru, bill.bytes_in - start.bytes_in]
            whole = DynamoDBJournal(raw, TABLE, tail_reads=False).load(RUN)
            assert snapshot.entries == whole.entries and snapshot.header == whole.header
            rows.append((done - 1, _partition_bytes(raw), tuple(cells)))
    return rows


def _partition_bytes(raw: object) -> int:
    """The run partition's size by DynamoDB's item-size rules."""
    size, kwargs = 0, {"TableName": TABLE, "KeyConditionExpression": "pk = :pk"}
    kwargs["ExpressionAttributeValues"] = {":pk": {"S": f"RUN#{RUN}"}}
    while True:
        page = raw.query(**kwargs)  # type: ignore[attr-defined]
        size += sum(item_size(item) for item in page["Items"])
        if "LastEvaluatedKey" not in page:
            return size
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def measure_run(steps: int, value_bytes: int, tail_reads: bool | None) -> tuple[int, float]:
    """(DynamoDB read requests, read units) of a whole faithful run of ``steps`` steps."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_journal_table(client, TABLE, TEMPLATE)
        ledger = Ledger(peek_client())
        ledger.attach(client)
        store = DynamoDBJournal(client, TABLE, tail_reads=tail_reads)
        runtime = _runtime(plain_steps_agent(steps, value_bytes=value_bytes), store)
        header, _ = runtime.start_run("bench", 0)
        for _ in range(steps + 1):
            outcome = runtime.execute(header.run_id, budget=1, remaining_ms=REMAINING_MS)
            if outcome.kind is OutcomeKind.SUCCEEDED:
                break
        else:
            raise RuntimeError("the run did not finish")
        bill = ledger.take()
        reads = sum(bill.requests[op] for op in ("GetItem", "Query"))
        return reads, bill.rru


def run_table(plain: int, big: int) -> Table:
    """Whole faithful runs: read requests and read units, before and after."""
    out = Table(
        "Journal reads of a whole faithful run (one step per invocation, moto)",
        ["run", "before: read requests", "before: read units", "after: read requests",
         "after: read units"],
    )  # fmt: skip
    for steps, value in ((plain, 0), (big, 10_000)):
        before = measure_run(steps, value, tail_reads=False)
        after = measure_run(steps, value, tail_reads=None)
        label = f"{steps} plain steps" if not value else f"{steps} steps returning 10 KB"
        out.add(label, f"{before[0]:,}", f"{before[1]:,.0f}", f"{after[0]:,}", f"{after[1]:,.0f}")
    out.notes.append(
        "Read requests are GetItem and Query calls (the start and finish write only). Before, "
        "the read units grow with the square of the run's length; after, linearly."
    )
    return out


def table(title: str, rows: list[tuple[int, int, tuple[float, ...]]]) -> Table:
    """One table of ``measure``'s rows."""
    out = Table(
        title,
        [
            "steps already in journal",
            "journal (bytes)",
            "before: requests",
            "before: read units",
            "before: bytes read",
            "after: requests",
            "after: read units",
            "after: bytes read",
        ],
    )
    for done, size, cells in rows:
        out.add(done, f"{size:,}", *(f"{int(c):,}" for c in cells))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Measures, prints the tables, optionally writes them into a Markdown file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller journals")
    parser.add_argument("--markdown", type=Path, metavar="PATH")
    args = parser.parse_args(argv)
    plain = (0, 10, 100) if args.quick else (0, 10, 100, 1000)
    big = (0, 10, 50) if args.quick else (0, 10, 50, 150)
    ts = [
        table(
            "Journal reads of one warm invocation, plain steps (moto, billed by DynamoDB's rules)",
            measure(plain, 1),
        ),
        table("Same, steps returning 10 KB values", measure(big, 10_000)),
    ]
    ts.append(run_table(*((100, 30) if args.quick else (300, 100))))
    ts[1].notes.append(
        "before: every invocation reads the whole partition (one strongly consistent Query, "
        "one page per MB). after: a warm container reads the journal from the first top-level "
        "operation without a result (one Query), whose header echo says the header it keeps "
        "is current (ADR 0019; the header is read, GetItem, only after another writer changed "
        "it). Bytes are the response bodies' sizes."
    )
    for t in ts:
        print(t.text(), end="\n\n", flush=True)
    if args.markdown:
        write_section(args.markdown, START, END, "\n\n".join(t.markdown() for t in ts))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
