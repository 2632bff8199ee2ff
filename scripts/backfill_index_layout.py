"""Moves a live journal table to the index layout and shard count of this code (ADR 0029).

Usage, with the stack's AWS credentials and region, after deploying::

    python scripts/backfill_index_layout.py --table <JournalTable> --shards <IndexShards>

Safe to run again and while the stack serves: every write is conditional on what the scan
read, and an item changed meanwhile is left to that change (which wrote it in the new layout).
It prints each page's progress and the key to resume from (``--resume``) if it is stopped.
Run it again after lowering ``IndexShards`` (before that, items in the dropped shards are not
read); raising it needs no pass.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import boto3

from durable_agents.journal.backfill import BackfillReport, backfill_index_layout
from durable_agents.journal.index_shards import DEFAULT_INDEX_SHARDS, IndexShards


def main(argv: Sequence[str] | None = None, client: object | None = None) -> int:
    """Runs the pass over ``--table``; prints progress and what it did.

    Raises:
        InfrastructureError: If DynamoDB fails (run it again with the last ``--resume``).
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--table", required=True, help="the journal table (JournalTable)")
    parser.add_argument(
        "--shards",
        type=int,
        default=DEFAULT_INDEX_SHARDS,
        help=f"the stack's IndexShards parameter (default {DEFAULT_INDEX_SHARDS})",
    )
    parser.add_argument("--resume", help="the resume key a stopped pass printed (JSON)")
    args = parser.parse_args(argv)

    def progress(report: BackfillReport) -> None:
        resume = json.dumps(report.resume, separators=(",", ":")) if report.resume else "-"
        print(
            f"scanned {report.scanned}, listed {report.listed}, moved {report.moved}, "
            f"skipped {report.skipped}; resume {resume}",
            flush=True,
        )

    report = backfill_index_layout(
        client if client is not None else boto3.client("dynamodb"),
        args.table,
        IndexShards(args.shards),
        start_key=json.loads(args.resume) if args.resume else None,
        on_page=progress,
    )
    print(
        f"done: {report.scanned} item(s) read, {report.listed} run(s) given a listing item, "
        f"{report.moved} item(s) moved, {report.skipped} changed meanwhile (left as written)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
