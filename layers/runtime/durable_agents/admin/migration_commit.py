"""Committing a migration: the dry run of the new code over the journal, then one fenced write.

The dry run is a real replay — the same ``Invocation`` and ``DurableContext`` the StepRunner
uses — over the run's journal as it will read after the migration, with a store that refuses
every write and a budget of zero operations: the new code can replay, but never execute or
record anything. It ends at the frontier (the first operation that is not recorded, or a wait
that is still pending), by finishing, or with a divergence, which refuses the migration.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_agents.agent import AgentDefinition
from durable_agents.core.migration_records import migration_entries, migration_record
from durable_agents.core.models import (
    EffectChange,
    Entry,
    RunChange,
    RunHeader,
    RunSnapshot,
    RunStatus,
    WaitChange,
    WaitRecord,
)
from durable_agents.core.observability import ReplayAwareLogger
from durable_agents.core.serde import decode
from durable_agents.engine import generations
from durable_agents.engine.context import DurableContext
from durable_agents.engine.events import EventPublishError, step_ready
from durable_agents.engine.invocation import Invocation, Reason
from durable_agents.engine.ports import InvocationStore
from durable_agents.errors import (
    DurableError,
    EntryConflictError,
    MigrationNotFoundError,
    MigrationRefusedError,
    RunRevisionConflictError,
    RunStateConflictError,
    SuspendExecution,
    VersionUnavailableError,
)
from durable_agents.journal.flow_items import FlowItems
from durable_agents.migrations import (
    MIGRATABLE,
    MigrationPlan,
    migration_entry,
    plan_results,
    recorded_run,
)

if TYPE_CHECKING:
    # A type only: the Api's routes import this module, and its init need not load the runtime.
    from durable_agents.engine.runtime import Runtime

ATTEMPTS = 3  # a decision or a timer may land between the read and the write: read again

_log = logging.getLogger("durable_agents.migrations")


@dataclass(frozen=True, slots=True)
class MigrationResult:
    """What ``migrate_run`` did.

    Attributes:
        run: The run header after the migration (before it, for a dry run).
        record: The ``run_migrated`` record (what changed).
        committed: False for a dry run (True as well when it was done by an earlier request).
    """

    run: RunHeader
    record: dict[str, Any]
    committed: bool


class _DryRunStore(InvocationStore):
    """Reads from the journal; any write ends the dry run (the new code reached the frontier).

    A write raises ``SuspendExecution`` (CONTINUE): the dry run stops where the new code
    would write, as an invocation whose budget is spent would. The reads are the store's.
    """

    def __init__(self, store: InvocationStore):
        self._store = store

    def flow_items(self) -> FlowItems:
        """Nothing of flow control: the new code reached an operation that would go out.

        Raises:
            SuspendExecution: Always (CONTINUE, "the new code would write here").
        """
        raise _would_write()

    def commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None = None,
        effect: EffectChange | None = None,
        wait: WaitChange | Sequence[WaitChange] | None = None,
    ) -> None:
        """Writes nothing: the new code reached the frontier.

        Raises:
            SuspendExecution: Always (CONTINUE, "the new code would write here").
        """
        raise _would_write()

    def create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        """Creates nothing (a sub-agent's run): the new code reached the frontier.

        Raises:
            SuspendExecution: Always (CONTINUE, "the new code would write here").
        """
        raise _would_write()

    def get_run(self, run_id: str) -> RunHeader:
        """The store's ``get_run``.

        Raises:
            RunNotFoundError: If there is no such run.
        """
        return self._store.get_run(run_id)

    def load(self, run_id: str) -> RunSnapshot:
        """The store's ``load``.

        Raises:
            RunNotFoundError: If there is no such run.
        """
        return self._store.load(run_id)

    def get_wait(self, wait_id: str) -> WaitRecord:
        """The store's ``get_wait``.

        Raises:
            WaitNotFoundError: If there is none with that id.
        """
        return self._store.get_wait(wait_id)


def _would_write() -> SuspendExecution:
    return SuspendExecution(Reason.CONTINUE, detail="dry run: the new code would write here")


def migrate_run(
    runtime: Runtime, run_id: str, to_version: str, *, by: str, dry_run: bool = False
) -> MigrationResult:
    """Moves one run to ``to_version`` of its agent, or refuses with the reason.

    Args:
        runtime: The deployment (its registry holds both versions and the migration).
        run_id: The run to move.
        to_version: The agent version to move it to.
        by: Who asked (recorded).
        dry_run: Check everything, write nothing.

    Returns:
        The result; the run continues on the new version (a ``Step Ready`` is published).
        Asked again after it was done (an answer lost on the way), the same result.

    Raises:
        RunNotFoundError: If there is no such run.
        MigrationNotFoundError: If no migration between the two versions is deployed.
        VersionUnavailableError: If ``to_version`` (or what it pins) is not deployed.
        MigrationRefusedError: If the run cannot be moved (its status, the plan, the dry run),
            or it kept changing while the migration was being decided.
    """
    for _ in range(ATTEMPTS):
        snapshot = runtime.store.load(run_id)
        header = snapshot.header
        done = _already_migrated(snapshot, to_version)
        if done is not None:  # a repeated request (its answer was lost): the same answer
            return MigrationResult(header, done, committed=True)
        target, record = _decide(runtime, snapshot, to_version, by)
        if dry_run:
            return MigrationResult(header, record, committed=False)
        entry = migration_entry(snapshot, record, runtime.clock.now_ms())
        new_status = (
            RunStatus.SUSPENDED if header.status is RunStatus.SUSPENDED else RunStatus.RUNNING
        )
        change = RunChange(
            expected=frozenset({header.status}),
            status=new_status,
            updated_at_ms=runtime.clock.now_ms(),
            versions=record["to"],
            error=header.error if new_status is RunStatus.SUSPENDED else None,
            waiting_on=header.waiting_on if new_status is RunStatus.SUSPENDED else None,
            wake_at_ms=header.wake_at_ms if new_status is RunStatus.SUSPENDED else None,
            expected_revision=header.revision,
        )
        try:
            runtime.store.commit(run_id, [entry], change)
        except (RunRevisionConflictError, RunStateConflictError, EntryConflictError) as exc:
            # Another writer moved the run (or migrated it: its run_migrated took the slot).
            _log.info("run %s changed while its migration was decided (%s): again", run_id, exc)
            continue
        # The new code takes it from here (for a suspended run it replays and waits again).
        try:
            runtime.publisher.publish([step_ready(run_id, "migrated")])
        except EventPublishError:
            # Committed: the answer must say so. A RUNNING run nobody advances is re-driven
            # by the reconciler; a SUSPENDED one is woken by what it waits for.
            _log.warning("run %s migrated; Step Ready not published (reconciler)", run_id)
        _log.info("run %s migrated to %s version %s by %s", run_id, target.name, to_version, by)
        return MigrationResult(change.apply(header), record, committed=True)
    raise MigrationRefusedError(run_id, f"the run kept changing; tried {ATTEMPTS} times")


def _already_migrated(snapshot: RunSnapshot, to_version: str) -> dict[str, Any] | None:
    """The last ``run_migrated`` record, if it moved the run to ``to_version`` (and it still is)."""
    if snapshot.header.versions.get("workflow_version") != to_version:
        return None
    entries = migration_entries(snapshot.entries)
    if not entries:
        return None
    record = migration_record(entries[-1])
    moved_to = (record.get("to") or {}).get("workflow_version")
    return record if moved_to == to_version else None


def _decide(
    runtime: Runtime, snapshot: RunSnapshot, to_version: str, by: str
) -> tuple[AgentDefinition[Any, Any], dict[str, Any]]:
    header = snapshot.header
    if header.status not in MIGRATABLE:
        raise MigrationRefusedError(
            header.run_id,
            f"the run is {header.status.value}: only SUSPENDED, PAUSED or VERSION_UNAVAILABLE "
            "runs are moved (a RUNNING run's invocation may be writing with the old code)",
        )
    from_version = header.versions.get("workflow_version", "")
    if from_version == to_version:
        raise MigrationRefusedError(header.run_id, f"the run is already on {to_version!r}")
    found = runtime.registry.migration(header.agent, from_version, to_version)
    if found is None:
        known = [m.to_version for m in runtime.registry.migrations_from(header.agent, from_version)]
        raise MigrationNotFoundError(header.agent, from_version, to_version, known)
    target = runtime.registry.pinned(header.agent, to_version)
    run = recorded_run(snapshot)
    try:
        plan = found.fn(run)
    except Exception as exc:  # the user's migration code: its error is the refusal's reason
        raise MigrationRefusedError(
            header.run_id, f"the migration raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(plan, MigrationPlan):
        raise MigrationRefusedError(header.run_id, "the migration did not return a MigrationPlan")
    results = plan_results(run, plan)
    to_bundle = target.versions.as_dict() | runtime.registry.prompts.pin(
        target.prompts, target.model_configs
    )
    record: dict[str, Any] = {
        "from": dict(header.versions),
        "to": to_bundle,
        "replays": list(plan.replays),
        "results": results,
        "note": plan.note,
        "by": by,
        "at_ms": runtime.clock.now_ms(),
        "status_before": header.status.value,
    }
    frontier = _dry_run(runtime, snapshot, target, record)
    record["frontier"] = frontier
    return target, record


def _dry_run(
    runtime: Runtime,
    snapshot: RunSnapshot,
    target: AgentDefinition[Any, Any],
    record: dict[str, Any],
) -> str:
    """Replays the journal, as migrated, with the new code; returns where it stopped.

    Raises:
        MigrationRefusedError: If the new code diverges from the journal.
    """
    header = snapshot.header.replace(versions=record["to"], status=RunStatus.RUNNING)
    staged = migration_entry(snapshot, record, runtime.clock.now_ms())
    migrated = RunSnapshot(header, [*snapshot.entries, staged], snapshot.effects)
    inv = Invocation(
        _DryRunStore(runtime.store),
        migrated,
        clock=runtime.clock,
        budget=0,
        lease_ms=0,
        registry=runtime.registry,
        memory=runtime.memory,  # a read at the frontier stops there (budget 0), not fails
    )
    ctx = DurableContext(
        inv,
        id_prefix=generations.id_prefix(header.run_id, header.generation),
        pos_prefix=generations.pos_prefix(header.generation),
        logger=ReplayAwareLogger(inv, logging.getLogger("durable_agents.migrations"), ""),
    )
    try:
        runtime.registry.prompts.check_pins(header.agent, header.versions)
        target.fn(ctx, decode(header.input, target.input_type))
        ctx.check_scope_end()
        where = "the new code finishes the run"
    except SuspendExecution as stop:
        where = f"the new code stops at: {stop.detail or stop.reason}"
    except generations.ContinueAsNew as ending:  # nothing is written in a dry run
        where = f"the new code continues as new at: {ending.op_id}"
    except VersionUnavailableError as exc:
        raise MigrationRefusedError(header.run_id, str(exc)) from exc
    except Exception as exc:
        if inv.fault is not None:
            raise MigrationRefusedError(
                header.run_id, f"the new code diverges from the journal: {inv.fault}"
            ) from exc
        # The run did not fail there on its own code: moving it to code that fails on the
        # recorded (transformed) state would turn a healthy run into a failed one.
        raise MigrationRefusedError(
            header.run_id,
            f"the new code fails the run on replay: {type(exc).__name__}: {exc} "
            "(does the plan transform every result whose shape the new code expects?)",
        ) from exc
    if inv.fault is not None:
        raise MigrationRefusedError(
            header.run_id, f"the new code diverges from the journal: {inv.fault}"
        )
    if inv.executed:  # cannot happen with a budget of 0; checked because it must never
        raise DurableError(f"the dry run executed {inv.executed}")
    return where
