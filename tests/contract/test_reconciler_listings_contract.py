"""The listings the reconciler pages through, on both backends (in-memory and moto DynamoDB).

Every index listing the reconciler reads pages on with a cursor (a page is never the whole
story: records it cannot act on must not hide the ones behind them), and run listings can be
read oldest first (a stalled run is one whose last change is old).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    RunChange,
    RunHeader,
    RunStatus,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.journal.store import JournalStore, Page, input_hash

T = TypeVar("T")
ACTIVE = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED})


def header(run_id: str, at: int) -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent="a",
        versions={"workflow_version": "1"},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=at,
        updated_at_ms=at,
        input_hash=input_hash("a", "null"),
    )


def effect(run_id: str, stale_at: int) -> SideEffectRecord:
    op_id = f"{run_id}:ping:1"
    return SideEffectRecord(
        run_id=run_id,
        position="00000001",
        operation_id=op_id,
        tool="ping",
        tool_schema_version="1",
        canonical_request="{}",
        idempotency_key=op_id,
        status=EffectStatus.PREPARED,
        attempt=1,
        prepared_at_ms=1_000,
        updated_at_ms=1_000,
        lease_expires_at_ms=1_000,
        stale_at_ms=stale_at,
    )


def wait(run_id: str, deadline: int) -> WaitRecord:
    return WaitRecord(
        wait_id=f"cb-{run_id}",
        kind="callback",
        run_id=run_id,
        position="00000001",
        operation_id=f"{run_id}:cb:1",
        name="cb",
        status=WaitStatus.PENDING,
        created_at_ms=1_000,
        updated_at_ms=1_000,
        deadline_ms=deadline,
    )


def every_page(fetch: Callable[[str | None], Page[T]]) -> list[list[T]]:
    pages: list[list[T]] = []
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        pages.append(page.items)
        cursor = page.cursor
        if cursor is None or len(pages) > 20:
            return pages


def test_stale_effects_page_on_oldest_first(journal: JournalStore) -> None:
    for i in range(5):
        journal.create_run(header(f"run-{i}", at=1_000))
        journal.commit(f"run-{i}", [], None, EffectChange(effect(f"run-{i}", 2_000 + 10 * (5 - i))))
    journal.create_run(header("run-late", at=1_000))
    journal.commit("run-late", [], None, EffectChange(effect("run-late", 9_000)))
    pages = every_page(lambda c: journal.stale_effects_page(5_000, limit=2, cursor=c))
    assert [len(p) for p in pages if p] == [2, 2, 1]
    seen = [r.run_id for p in pages for r in p]
    assert seen == ["run-4", "run-3", "run-2", "run-1", "run-0"]  # oldest stale time first
    assert [r.run_id for r in journal.stale_effects(5_000, limit=10)] == seen


def test_due_waits_page_on(journal: JournalStore) -> None:
    for i in range(5):
        journal.create_run(header(f"run-{i}", at=1_000))
        journal.commit(f"run-{i}", [], None, wait=WaitChange(wait(f"run-{i}", 2_000 + i)))
    journal.create_run(header("run-late", at=1_000))
    journal.commit("run-late", [], None, wait=WaitChange(wait("run-late", 9_000)))
    pages = every_page(lambda c: journal.due_waits_page(5_000, limit=2, cursor=c))
    seen = [w.run_id for p in pages for w in p]
    assert seen == [f"run-{i}" for i in range(5)]
    assert max(len(p) for p in pages) == 2


def test_due_runs_page_on(journal: JournalStore) -> None:
    for i in range(5):
        journal.create_run(header(f"run-{i}", at=1_000))
        journal.commit(
            f"run-{i}",
            [],
            RunChange(
                expected=ACTIVE,
                status=RunStatus.SUSPENDED,
                updated_at_ms=1_500,
                wake_at_ms=2_000 + i,
            ),
        )
    pages = every_page(lambda c: journal.due_runs_page(2_003, limit=2, cursor=c))
    assert [h.run_id for p in pages for h in p] == [f"run-{i}" for i in range(4)]
    assert max(len(p) for p in pages) == 2


def test_runs_can_be_listed_oldest_first_with_a_cursor(journal: JournalStore) -> None:
    for i in range(5):
        journal.create_run(header(f"run-{i}", at=1_000 + i))

    def oldest(cursor: str | None) -> Page[RunHeader]:
        return journal.changed_runs_page(RunStatus.RUNNING, limit=2, cursor=cursor)

    assert [h.run_id for p in every_page(oldest) for h in p] == [f"run-{i}" for i in range(5)]
    newest = journal.list_runs(status=RunStatus.RUNNING, limit=2)
    assert [h.run_id for h in newest.runs] == ["run-4", "run-3"]
