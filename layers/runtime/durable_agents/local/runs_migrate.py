"""``durable-agents runs migrate RUN_ID --to V``: move a run through the local Api.

A migration needs the deployed agents — both versions' code and the ``@migration`` between
them — which local mode has loaded and the CLI has not, so the command asks local mode's Api
(``POST /runs/{run_id}/migrate``), exactly as a client of a deployment would, rather than
writing the journal itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from durable_agents.local.runs_start import post_run_action

EXIT_ERROR = 1


class RunMigrateError(Exception):
    """The Api refused the migration or could not be reached (the message says why)."""


def migrate_run(api: str, run_id: str, to_version: str, *, dry_run: bool) -> dict[str, Any]:
    """Asks the Api to move ``run_id`` to ``to_version`` (or only to check, with ``dry_run``).

    Args:
        api: The Api's base URL.
        run_id: The run to move.
        to_version: The agent version to move it to.
        dry_run: Check everything (the new code replayed over the journal), write nothing.

    Returns:
        The Api's answer: ``{"run": ..., "migration": ..., "committed": ...}``.

    Raises:
        RunMigrateError: If nothing answers at ``api``, or it refuses (the error's message,
            and for a refusal the reason).
    """
    body = {"to_version": to_version, "dry_run": dry_run}
    return post_run_action(api, run_id, "migrate", body, ok=200, error=RunMigrateError)


def describe(answer: dict[str, Any]) -> str:
    """What happened, in a few lines: the versions, where the new code stops, the run's status."""
    record = answer["migration"]
    run = answer["run"]
    before = record["from"].get("workflow_version")
    after = record["to"].get("workflow_version")
    changed = [str(r.get("op_id")) for r in record["results"].values()]
    verb = "migrated" if answer["committed"] else "would migrate (dry run, nothing written)"
    lines = [
        f"{run['run_id']} {verb}: {run['agent']} version {before} -> {after}",
        f"  replays: {', '.join(record['replays']) or 'nothing'}",
        f"  changed results: {', '.join(changed) or 'none'}",
        f"  {record['frontier']}",
        f"  status: {run['status']}",
    ]
    if record.get("note"):
        lines.insert(1, f"  note: {record['note']}")
    return "\n".join(lines)


def add_command(actions: Any, url: Callable[[str], str]) -> None:
    """Adds ``migrate`` to the ``runs`` sub-commands (``url`` checks ``--api``)."""
    migrate = actions.add_parser(
        "migrate",
        help="move a run to another version of its agent (through the local Api)",
        description="POST /runs/{run_id}/migrate to the Api local mode serves: the deployed "
        "@migration says what changes, the new code is replayed over the run's journal first "
        "and a divergence refuses it. --dry-run checks everything and writes nothing.",
    )
    migrate.add_argument("run_id")
    migrate.add_argument("--to", required=True, metavar="VERSION", help="the version to move to")
    migrate.add_argument("--dry-run", action="store_true", help="check only, write nothing")
    migrate.add_argument("--api", type=url, default="http://127.0.0.1:3000")
    migrate.add_argument("--json", action="store_true", help="print the Api's answer as JSON")


def command(args: argparse.Namespace) -> int:
    """``durable-agents runs migrate``: 0 when the Api moved (or checked) the run, else 1."""
    try:
        answer = migrate_run(args.api, args.run_id, args.to, dry_run=args.dry_run)
    except RunMigrateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(answer, indent=2) if args.json else describe(answer))
    return 0
