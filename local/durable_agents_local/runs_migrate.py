"""``durable-agents runs migrate RUN_ID --to V``: move a run through the Api.

A migration needs the deployed agents — both versions' code and the ``@migration`` between
them — which the Api's function (local mode's or a deployed stack's) has loaded and the CLI has
not, so the command asks the Api (``POST /runs/{run_id}/migrate``,
``durable_agents_local.cli.remote``)
rather than writing the journal itself. Here: its arguments and what it prints.
"""

from __future__ import annotations

from typing import Any


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


def add_command(actions: Any, parents: list[Any]) -> None:
    """Adds ``migrate`` to the ``runs`` sub-commands (``parents``: ``--json``, where the Api is)."""
    migrate = actions.add_parser(
        "migrate",
        parents=parents,
        help="move a run to another version of its agent (through the Api)",
        description="POST /runs/{run_id}/migrate: the deployed @migration says what changes, "
        "the new code is replayed over the run's journal first and a divergence refuses it. "
        "--dry-run checks everything and writes nothing.",
    )
    migrate.add_argument("run_id")
    migrate.add_argument("--to", required=True, metavar="VERSION", help="the version to move to")
    migrate.add_argument("--dry-run", action="store_true", help="check only, write nothing")
