"""Exact accounting per operation kind on DynamoDB + EventBridge + Scheduler + S3 (moto).

Run ``python scripts/bench_accounting.py`` (part of ``make bench``); ``--markdown PATH``
replaces the text between ``<!-- bench:accounting:start -->`` and
``<!-- bench:accounting:end -->``.

For every kind (plain step, llm, tool, wait, approval, callback, invoke, parallel branch,
emit, and a step whose value spills to S3) it bills one more operation: a run of two minus a
run of one, faithful mode (one operation per StepRunner invocation, as on AWS), so a run's
start and finish cancel out (``bench_kinds.marginal``). Requests by type, billed request units
(``bench_billing``), bytes on the wire, PutEvents, Scheduler and S3 calls, Lambda invocations
and the on-demand price of 1,000 such operations, next to the protocol's minimum.
Machine-independent: ``tests/unit/test_request_counts.py`` pins the request counts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bench_billing import PRICE_DATE, PRICE_REGION, PRICES, S3_GETS, S3_PUTS, Bill
from bench_common import Table
from bench_kinds import RERUN_REUSE, marginal, platform
from bench_markers import write_section

KINDS = (
    "step",
    "llm",
    "tool",
    "wait",
    "approval",
    "callback",
    "invoke",
    "parallel branch",
    "emit",
    "step 400 KB",
    RERUN_REUSE,
)
# The fewest durable (DynamoDB) writes any correct protocol needs for the operation.
MINIMUM: dict[str, tuple[int, str]] = {
    "step": (1, "its result"),
    "llm": (1, "the response"),
    "tool": (2, "a PREPARE and a COMMIT"),
    "wait": (1, "the deadline (waking needs no write)"),
    "approval": (2, "the pending request, the decision"),
    "callback": (2, "the callback, its completion"),
    "invoke": (2, "the child's start, its finish (the parent reads it)"),
    "parallel branch": (1, "the branch's result"),
    "emit": (1, "the outbox record"),
    "step 400 KB": (1, "its result's reference (+ 1 S3 PUT)"),
    RERUN_REUSE: (1, "its result, from the ledger: no PREPARE, the tool does not run"),
}
START, END = "<!-- bench:accounting:start -->", "<!-- bench:accounting:end -->"


def _requests(bill: Bill) -> str:
    return ", ".join(f"{op} {n}" for op, n in sorted(bill.requests.items()) if n)


def measure(kinds: Sequence[str] = KINDS) -> dict[str, Bill]:
    """The marginal bill of each kind."""
    with platform() as plat:
        return {kind: marginal(kind, plat) for kind in kinds}


def tables(bills: dict[str, Bill]) -> list[Table]:
    """The accounting table and the cost table."""
    requests = Table(
        "Requests per operation, faithful mode (exact; one more operation in a run)",
        ["kind", "requests", "durable writes", "protocol minimum", "Lambda invocations"],
    )
    cost = Table(
        f"Billed units and on-demand cost per 1,000 operations ({PRICE_REGION}, prices of "
        f"{PRICE_DATE})",
        [
            "kind",
            "WRU",
            "RRU",
            "events",
            "schedules",
            "S3 PUT/GET",
            "bytes sent / received",
            "moto ConsumedCapacity",
            "$ per 1,000",
            "$ per 1,000, minimum",
        ],
    )
    for kind, bill in bills.items():
        floor, why = MINIMUM[kind]
        requests.add(kind, _requests(bill), bill.durable_writes, f"{floor} ({why})", bill.lambdas)
        r = bill.requests
        s3 = f"{sum(r[o] for o in S3_PUTS)} / {sum(r[o] for o in S3_GETS)}"
        floor_cost = floor * PRICES["WRU"] + (PRICES["s3_put"] if "400" in kind else 0.0)
        cost.add(
            kind,
            f"{bill.wru:g}",
            f"{bill.rru:g}",
            bill.event_chunks,
            r["CreateSchedule"],
            s3,
            f"{bill.bytes_out:,} / {bill.bytes_in:,}",
            f"{bill.moto_capacity:g}",
            f"{1000 * bill.dollars():.4f}",
            f"{1000 * floor_cost:.4f}",
        )
    requests.notes += [
        "Durable writes: PutItem, UpdateItem, DeleteItem, TransactWriteItems (a transaction "
        "counts once). The protocol minimum counts writes only; faithful mode also pays the "
        "journal Query and the Step Ready PutEvents of the next invocation.",
        "A plain step writes twice (a claim, then the result) where one write would do for "
        "at-least-once; the claim is what fences two concurrent invocations (ADR 0002).",
        "emit: the Relay's PutEvents (stream -> Relay -> EventBridge) is added, not run.",
    ]
    cost.notes += [
        "WRU/RRU by DynamoDB's rules (scripts/bench_billing.py): 1 KB write blocks (2x in a "
        "transaction), every GSI the item is in before or after (4 GSIs, ALL projection: a "
        "status change moves the run header in the index: a delete and a put), 4 KB read "
        "blocks (strongly consistent journal Query). moto's own ConsumedCapacity is a "
        "constant per call (1 per write or Query, 0.5 per GetItem): shown, not used.",
        "Prices per unit: "
        + ", ".join(f"{k} ${v * 1e6:g}/million" for k, v in PRICES.items())
        + ". Lambda: requests only (duration is the agent's own code); free tiers ignored.",
        "The minimum's cost counts only its writes at 1 WRU each (no index, no read, no "
        "event, no Lambda): what a journal without secondary indexes would pay.",
    ]
    return [requests, cost]


def render(ts: Sequence[Table]) -> str:
    """The Markdown between the accounting markers."""
    return "\n\n".join(t.markdown() for t in ts) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measures every kind, prints the tables, optionally writes them into a Markdown file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path, metavar="PATH")
    args = parser.parse_args(argv)
    ts = tables(measure())
    for t in ts:
        print(t.text(), end="\n\n", flush=True)
    if args.markdown:
        write_section(args.markdown, START, END, render(ts))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
