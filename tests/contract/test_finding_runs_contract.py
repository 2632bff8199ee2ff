"""Finding runs (issue 13 item 5, ADR 0012): newest start first, filters, cursors (both journals).

What the contract promises: runs come newest *start* first whatever their status does meanwhile;
every filter and combination pages with a cursor; following the cursors returns every run that
matched throughout exactly once, while runs start and change status between pages; sub-agent
runs are hidden unless asked for.
"""

from __future__ import annotations

import random

import pytest

from durable_agents.core.models import UNSET, RunChange, RunHeader, RunStatus
from durable_agents.errors import InvalidCursorError
from durable_agents.journal.store import JournalStore, input_hash

RUNNING = RunStatus.RUNNING


def header(
    run_id: str,
    at: int,
    *,
    agent: str = "flow",
    tenant: str = "default",
    parent: str | None = None,
) -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent=agent,
        versions={"workflow_version": "1"},
        status=RUNNING,
        input="null",
        created_at_ms=at,
        updated_at_ms=at,
        input_hash=input_hash(agent, "null"),
        tenant=tenant,
        parent_run_id=parent,
    )


def move(journal: JournalStore, run_id: str, status: RunStatus, at: int) -> None:
    current = journal.get_run(run_id).status
    wake = None if status is RunStatus.SUSPENDED else UNSET  # a suspension says its timer
    journal.commit(
        run_id,
        [],
        RunChange(expected=frozenset({current}), status=status, updated_at_ms=at, wake_at_ms=wake),
    )


def every_page(journal: JournalStore, **query: object) -> list[str]:
    """Follows the cursors to the end; the run ids in listing order."""
    seen: list[str] = []
    cursor: str | None = None
    limit = int(str(query.get("limit", 50)))
    for _ in range(200):
        page = journal.list_runs(cursor=cursor, **query)  # type: ignore[arg-type]
        assert len(page.runs) <= limit
        seen += [h.run_id for h in page.runs]
        cursor = page.cursor
        if cursor is None:
            return seen
    raise AssertionError("the listing never ended")


def test_runs_are_listed_newest_start_first_while_their_status_changes(
    journal: JournalStore,
) -> None:
    for i in range(6):
        journal.create_run(header(f"run-{i}", 1_000 + i))
    # The oldest runs change last: a listing by last change would put them first.
    move(journal, "run-0", RunStatus.SUCCEEDED, 9_000)
    move(journal, "run-1", RunStatus.SUSPENDED, 8_000)
    expected = [f"run-{i}" for i in reversed(range(6))]
    assert every_page(journal) == expected
    assert every_page(journal, limit=1) == expected
    assert every_page(journal, limit=4) == expected


def test_each_filter_and_their_combinations(journal: JournalStore) -> None:
    for i in range(12):
        agent = "flow" if i % 2 == 0 else "other"
        journal.create_run(header(f"run-{i:02d}", 1_000 + i * 10, agent=agent))
    for i in (0, 4, 5, 8):
        move(journal, f"run-{i:02d}", RunStatus.SUCCEEDED, 5_000 + i)
    assert every_page(journal, status=RunStatus.SUCCEEDED, limit=2) == [
        "run-08",
        "run-05",
        "run-04",
        "run-00",
    ]
    flow = [f"run-{i:02d}" for i in (10, 8, 6, 4, 2, 0)]
    assert every_page(journal, agent="flow", limit=2) == flow
    # Start time: since inclusive, until exclusive.
    window = every_page(journal, since_ms=1_020, until_ms=1_060, limit=3)
    assert window == ["run-05", "run-04", "run-03", "run-02"]
    assert every_page(journal, since_ms=1_110) == ["run-11"]
    assert every_page(journal, until_ms=1_000) == []
    both = every_page(
        journal, agent="flow", status=RunStatus.SUCCEEDED, since_ms=1_010, until_ms=1_090, limit=1
    )
    assert both == ["run-08", "run-04"]
    assert every_page(journal, agent="flow", status=RunStatus.SUSPENDED, limit=1) == []


def test_a_tenant_sees_only_its_runs_with_every_filter(journal: JournalStore) -> None:
    for i in range(8):
        journal.create_run(header(f"run-{i}", 1_000 + i, tenant="a" if i % 3 else "b"))
    assert every_page(journal, tenant="b", limit=1) == ["run-6", "run-3", "run-0"]
    assert every_page(journal, tenant="a", since_ms=1_004, limit=2) == ["run-7", "run-5", "run-4"]
    assert len(every_page(journal, limit=3)) == 8  # no tenant: every tenant's (trusted callers)


def test_a_short_filtered_page_still_carries_a_cursor_to_more(journal: JournalStore) -> None:
    # Only the oldest run matches: on DynamoDB the first page reads newer runs and may match
    # none; on either journal following the cursor reaches it, and the end has no cursor.
    journal.create_run(header("run-match", 1_000, agent="rare"))
    for i in range(30):
        journal.create_run(header(f"run-{i:02d}", 2_000 + i))
    first = journal.list_runs(agent="rare", limit=2)
    if not first.runs:
        assert first.cursor is not None
    assert every_page(journal, agent="rare", limit=2) == ["run-match"]
    last = journal.list_runs(limit=100)
    assert len(last.runs) == 31 and last.cursor is None


def test_paging_while_runs_start_and_change_status_misses_and_repeats_nothing(
    journal: JournalStore,
) -> None:
    rng = random.Random(13)
    for i in range(40):
        journal.create_run(header(f"run-{i:02d}", 1_000 + i))
    seen: list[str] = []
    cursor: str | None = None
    for started in range(100):
        page = journal.list_runs(limit=3, cursor=cursor)
        seen += [h.run_id for h in page.runs]
        cursor = page.cursor
        # Between pages: new runs start (newer than any cursor) and old ones move on.
        journal.create_run(header(f"new-{started:02d}", 5_000 + started))
        for run_id in rng.sample([f"run-{i:02d}" for i in range(40)], 3):
            status = journal.get_run(run_id).status
            if status is RUNNING:
                move(journal, run_id, RunStatus.SUSPENDED, 6_000 + started)
            elif status is RunStatus.SUSPENDED:
                move(journal, run_id, RUNNING, 6_000 + started)
        if cursor is None:
            break
    assert seen == [f"run-{i:02d}" for i in reversed(range(40))]


def test_sub_agent_runs_are_hidden_unless_asked_for(journal: JournalStore) -> None:
    journal.create_run(header("run-parent", 1_000))
    journal.create_run(header("run-child-1", 1_001, parent="run-parent"))
    journal.create_run(header("run-other", 1_002))
    journal.create_run(header("run-child-2", 1_003, parent="run-parent"))
    journal.create_run(header("run-child-x", 1_004, parent="run-other"))
    assert every_page(journal, limit=1) == ["run-other", "run-parent"]
    everything = every_page(journal, include_children=True, limit=2)
    assert everything == [
        "run-child-x",
        "run-child-2",
        "run-other",
        "run-child-1",
        "run-parent",
    ]
    assert every_page(journal, parent="run-parent", limit=1) == ["run-child-2", "run-child-1"]
    assert every_page(journal, parent="run-parent", tenant="elsewhere") == []


def test_a_cursor_continues_only_its_own_listing(journal: JournalStore) -> None:
    for i in range(5):
        journal.create_run(header(f"run-{i}", 1_000 + i))
    page = journal.list_runs(agent="flow", limit=2)
    assert page.cursor is not None
    for other in ({"agent": "other"}, {"tenant": "b", "agent": "flow"}, {}):
        with pytest.raises(InvalidCursorError):
            journal.list_runs(limit=2, cursor=page.cursor, **other)  # type: ignore[arg-type]
    with pytest.raises(InvalidCursorError):
        journal.list_runs(cursor="not-a-cursor")
    rest = journal.list_runs(agent="flow", limit=10, cursor=page.cursor)
    assert [h.run_id for h in rest.runs] == ["run-2", "run-1", "run-0"]


def test_the_run_listing_module_examples_hold() -> None:
    import doctest

    from durable_agents.journal import cursors, run_listing

    for module in (run_listing, cursors):
        results = doctest.testmod(module)
        assert results.attempted > 0 and results.failed == 0, module.__name__
