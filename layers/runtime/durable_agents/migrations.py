"""Explicit migrations: moving a chosen in-flight run to another version of its agent.

A run is only ever continued by the code it is pinned to. Moving it to other code is a
decision, declared in code and taken for one run at a time::

    @migration("support", from_version="1", to_version="2")
    def support_1_to_2(run: RecordedRun) -> MigrationPlan:
        ticket = run.result("create-ticket")
        return MigrationPlan(
            replays=run.names(),  # v2 replays every recorded operation, in order
            results={"create-ticket": {**ticket, "priority": "normal"}},  # v2's state shape
        )

``durable_agents.admin.migration_commit.migrate_run`` then (1) reads the run (consistently), (2)
asks the migration for its plan, (3) checks that the plan names exactly the recorded
operations, in order, (4) **replays the
recorded journal — transformed as planned — with the new code** in a dry run that can write
nothing and execute nothing, and refuses the migration if the new code diverges from it
(another operation, name or kind at a recorded position; code that stops short of recorded
operations), and only then (5) appends one ``run_migrated`` entry saying what changed and
re-pins the run, in one write fenced by the revision it read. See ``docs/versions.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from durable_agents._moved import moved_attribute
from durable_agents.agent import AgentDefinition, AgentRegistry, default_registry
from durable_agents.core.ids import check_name
from durable_agents.core.migration_records import (
    MIGRATION_NAME,
    migrated_view,
    migration_entries,
    migration_position,
)
from durable_agents.core.models import Entry, EntryType, OpKind, RunSnapshot, RunStatus
from durable_agents.core.serde import encode
from durable_agents.errors import MigrationRefusedError
from durable_agents.journal.generation_keys import id_prefix, pos_prefix

MIGRATABLE = frozenset({RunStatus.SUSPENDED, RunStatus.PAUSED, RunStatus.VERSION_UNAVAILABLE})


def __getattr__(name: str) -> object:
    """``MigrationNotFoundError`` moved to ``durable_agents.errors`` (warns, for one release).

    Raises:
        AttributeError: If ``name`` is not a name that moved.
    """
    return moved_attribute(__name__, name)


@dataclass(frozen=True, slots=True)
class RecordedOperation:
    """One recorded operation of a run, as a migration sees it.

    Attributes:
        op_id: Its id relative to the run (``create-ticket:2``; nested: ``a:1/b:1``).
        position: Its journal position.
        kind: The operation kind.
        name: The operation name.
        status: ``succeeded``, ``failed`` or ``pending`` (started or waiting, no result).
        value: Its recorded result (decoded JSON), when it succeeded.
    """

    op_id: str
    position: str
    kind: str
    name: str
    status: str
    value: Any = None

    @property
    def top_level(self) -> bool:
        """Whether it is an operation of the agent function itself (not inside a scope)."""
        return "/" not in self.position


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """What a migration function is given: the run as it is recorded (after earlier migrations).

    Attributes:
        run_id: The run.
        agent: Its agent.
        versions: The bundle it is pinned to now.
        input: Its input (decoded JSON).
        operations: Every recorded operation, in program order.
    """

    run_id: str
    agent: str
    versions: Mapping[str, str]
    input: Any
    operations: Sequence[RecordedOperation]

    def names(self) -> list[str]:
        """The names of the agent function's own recorded operations, in order."""
        return [op.name for op in self.operations if op.top_level]

    def operation(self, key: str) -> RecordedOperation:
        """The operation with id ``key`` (``name:n``), or the only one named ``key``.

        Raises:
            KeyError: If there is none, or several share that name (use the id then).
        """
        by_id = [op for op in self.operations if op.op_id == key]
        if by_id:
            return by_id[0]
        named = [op for op in self.operations if op.name == key]
        if len(named) != 1:
            ids = [op.op_id for op in named]
            raise KeyError(f"{key!r} names {len(named)} recorded operations {ids}; use an id")
        return named[0]

    def result(self, key: str) -> Any:
        """The recorded result of operation ``key`` (see ``operation``).

        Raises:
            KeyError: If there is no such operation or it has no result.
        """
        op = self.operation(key)
        if op.status != "succeeded":
            raise KeyError(f"operation {op.op_id!r} has no result (it is {op.status})")
        return op.value


@dataclass(frozen=True, slots=True)
class MigrationPlan:
    """What a migration does to one run.

    Attributes:
        replays: The names of the agent function's recorded operations, in order, that the
            new code replays — all of them: a recorded operation (a payment that happened)
            cannot be unrecorded, only replayed. The dry run checks it.
        results: New recorded results for operations whose state shape changed (an id or a
            unique name → the value the new code is to replay). Only operations that
            succeeded have results to transform.
        note: Why, in a person's words (kept in the ``run_migrated`` record).
    """

    replays: Sequence[str]
    results: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True, slots=True)
class Migration:
    """A registered migration between two versions of one agent."""

    agent: str
    from_version: str
    to_version: str
    fn: Callable[[RecordedRun], MigrationPlan]


def migration(
    agent: str | AgentDefinition[Any, Any],
    *,
    from_version: str,
    to_version: str,
    registry: AgentRegistry | None = None,
) -> Callable[[Callable[[RecordedRun], MigrationPlan]], Migration]:
    """Registers a migration of runs of ``agent`` from one version to another.

    Raises:
        InvalidNameError: If a name or version is not valid.
        ConfigurationError: If a migration between these versions is already registered.
    """
    name = agent if isinstance(agent, str) else agent.name
    check_name(name, "agent")
    check_name(from_version, "version")
    check_name(to_version, "version")

    def decorate(fn: Callable[[RecordedRun], MigrationPlan]) -> Migration:
        found = Migration(name, from_version, to_version, fn)
        (registry or default_registry).add_migration(found)
        return found

    return decorate


def recorded_run(snapshot: RunSnapshot) -> RecordedRun:
    """The run as a migration sees it (through its earlier migrations)."""
    header = snapshot.header
    prefix = f"{header.run_id}:"
    ops: dict[str, RecordedOperation] = {}
    for entry in migrated_view(snapshot.entries):
        current = ops.get(entry.position)
        status = current.status if current else "pending"
        value = current.value if current else None
        if entry.type is EntryType.SUCCEEDED:
            status, value = "succeeded", json.loads(entry.value) if entry.value else None
        elif entry.type is EntryType.FAILED:
            status = "failed"
        op_id = entry.op_id[len(prefix) :] if entry.op_id.startswith(prefix) else entry.op_id
        ops[entry.position] = RecordedOperation(
            op_id, entry.position, entry.kind.value, entry.name, status, value
        )
    return RecordedRun(
        header.run_id,
        header.agent,
        dict(header.versions),
        json.loads(header.input) if header.input else None,
        [ops[p] for p in sorted(ops)],
    )


def plan_results(run: RecordedRun, plan: MigrationPlan) -> dict[str, dict[str, str]]:
    """The plan's transformed results, by position (what the ``run_migrated`` entry keeps).

    Raises:
        MigrationRefusedError: If the plan does not match the journal.
    """
    names = run.names()
    if list(plan.replays) != names:
        raise MigrationRefusedError(
            run.run_id,
            f"the plan says the new code replays {list(plan.replays)}, but the journal "
            f"records {names}: every recorded operation is replayed, in order",
        )
    out: dict[str, dict[str, str]] = {}
    for key, value in plan.results.items():
        try:
            op = run.operation(key)
        except KeyError as exc:
            raise MigrationRefusedError(run.run_id, f"results: {exc.args[0]}") from exc
        if op.status != "succeeded":
            raise MigrationRefusedError(
                run.run_id, f"results: {op.op_id!r} has no result to transform ({op.status})"
            )
        out[op.position] = {"op_id": op.op_id, "value": encode(value)}
    return out


def migration_entry(snapshot: RunSnapshot, record: dict[str, Any], now_ms: int) -> Entry:
    """The ``run_migrated`` entry of the run's next migration."""
    number = len(migration_entries(snapshot.entries)) + 1
    run_id = snapshot.header.run_id
    generation = snapshot.header.generation  # in the generation it changes (ADR 0016)
    return Entry(
        run_id=run_id,
        position=pos_prefix(generation) + migration_position(number),
        op_id=f"{id_prefix(run_id, generation)}{MIGRATION_NAME}:{number}",
        kind=OpKind.MIGRATION,
        name=MIGRATION_NAME,
        type=EntryType.SUCCEEDED,
        value=encode(record),
        recorded_at_ms=now_ms,
    )
