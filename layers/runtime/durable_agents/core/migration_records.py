"""``run_migrated`` records in the journal, and how replay sees the journal through them.

A migration never rewrites a journal entry (entries are written once). It appends one
``run_migrated`` entry (kind ``migration``, positions ``~m00000001``, ``~m00000002``, … which
sort after every operation and never collide with one) that says what changed: the bundle
before and after, the operations the new code replays, and the recorded results it
transformed. Every reader that replays a run — the runtime, the migration's own dry run —
reads the journal through ``migrated_view``: the migration entries taken out, the transformed
results in place of the recorded ones. Tools that show history show both.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from durable_agents.core.models import Entry, EntryType, OpKind

MIGRATION_POSITION_PREFIX = "~m"
MIGRATION_NAME = "run_migrated"


def migration_position(number: int) -> str:
    """The journal position of the ``number``-th migration of a run (1-based)."""
    return f"{MIGRATION_POSITION_PREFIX}{number:08d}"


def migration_entries(entries: Sequence[Entry]) -> list[Entry]:
    """The run's ``run_migrated`` entries, oldest first."""
    return sorted((e for e in entries if e.kind is OpKind.MIGRATION), key=lambda e: e.position)


def migration_record(entry: Entry) -> dict[str, Any]:
    """The decoded ``run_migrated`` record of one migration entry."""
    value = json.loads(entry.value) if entry.value else {}
    return value if isinstance(value, dict) else {}


def migrated_view(entries: Sequence[Entry]) -> list[Entry]:
    """The journal as the migrated code replays it.

    Migration entries are left out; each result a migration transformed carries the value the
    latest migration gave it (``results``: position → JSON text).
    """
    overrides: dict[str, str] = {}
    program: list[Entry] = []
    for entry in entries:
        if entry.kind is OpKind.MIGRATION:
            results = migration_record(entry).get("results") or {}
            for position, change in results.items():
                overrides[str(position)] = str(change["value"])
        else:
            program.append(entry)
    if not overrides:
        return program
    return [
        dataclasses.replace(entry, value=overrides[entry.position])
        if entry.type is EntryType.SUCCEEDED and entry.position in overrides
        else entry
        for entry in program
    ]
