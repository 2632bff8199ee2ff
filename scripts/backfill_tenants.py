"""Puts run headers written before tenants (ADR 0008) or start-time listing (ADR 0012) into
those indexes; run it once after deploying either.

Usage: ``python scripts/backfill_tenants.py --table <journal table>`` with the stack's AWS
credentials and region. Safe to run again and while the stack serves requests: each header is
updated only if it still has no tenant index key and has not changed since it was read.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import boto3

from durable_agents.journal.backfill import backfill_start_index, backfill_tenant_index


def main(argv: Sequence[str] | None = None) -> int:
    """Backfills the table named by ``--table``; prints how many headers were updated."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="the journal table (JournalTable)")
    args = parser.parse_args(argv)
    updated = backfill_tenant_index(boto3.client("dynamodb"), args.table)
    print(f"{updated} run header(s) put into the default tenant's index")
    started = backfill_start_index(boto3.client("dynamodb"), args.table)
    print(f"{started} run header(s) put into the start-time index (GET /runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
