"""Listing runs by agent and by pinned workflow version (both journals).

The filters are not part of any index key: on DynamoDB they are a ``FilterExpression``, so a
page may hold fewer than ``limit`` runs and still carry a cursor. What the contract promises is
that following the cursors yields every matching run exactly once, and nothing else.
"""

from __future__ import annotations

from durable_agents.core.models import RunChange, RunHeader, RunStatus
from durable_agents.journal.store import JournalStore, input_hash


def header(run_id: str, agent: str, version: str, at: int, tenant: str = "default") -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent=agent,
        versions={"workflow_version": version},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=at,
        updated_at_ms=at,
        input_hash=input_hash(agent, "null"),
        tenant=tenant,
    )


def every_page(journal: JournalStore, **query: object) -> list[str]:
    """Follows the cursors to the end; the run ids in listing order."""
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(50):
        page = journal.list_runs(cursor=cursor, **query)  # type: ignore[arg-type]
        assert len(page.runs) <= int(str(query.get("limit", 50)))
        seen += [h.run_id for h in page.runs]
        cursor = page.cursor
        if cursor is None:
            return seen
    raise AssertionError("the listing never ended")


def populate(journal: JournalStore, tenant: str = "default") -> None:
    # Interleaved: every other run is flow v1, so a filtered index page is always partial.
    plan = [("flow", "1"), ("flow", "2"), ("other", "1"), ("flow", "1"), ("flow", "2")] * 3
    for i, (agent, version) in enumerate(plan):
        journal.create_run(header(f"run-{i:02d}", agent, version, 1_000 + i, tenant))


def test_runs_are_listed_by_agent_and_version(journal: JournalStore) -> None:
    populate(journal)
    flow_v1 = ["run-13", "run-10", "run-08", "run-05", "run-03", "run-00"]
    running = RunStatus.RUNNING
    assert every_page(journal, status=running, agent="flow", version="1", limit=2) == flow_v1
    assert every_page(journal, status=running, agent="flow", version="1", limit=4) == flow_v1
    assert every_page(journal, status=running, agent="flow", version="1") == flow_v1
    assert len(every_page(journal, status=running, agent="flow", limit=3)) == 12
    # Version alone: every agent's runs pinned to it.
    assert len(every_page(journal, status=running, version="1", limit=3)) == 9
    assert every_page(journal, status=running, agent="nobody", limit=2) == []
    # Without a status: every status (its true end has no cursor).
    merged = journal.list_runs(agent="flow", version="1", limit=100)
    assert [h.run_id for h in merged.runs] == flow_v1 and merged.cursor is None


def test_a_migrated_run_is_listed_under_its_new_version(journal: JournalStore) -> None:
    populate(journal)
    journal.commit(
        "run-00",
        [],
        RunChange(
            expected=frozenset({RunStatus.RUNNING}),
            status=RunStatus.VERSION_UNAVAILABLE,
            updated_at_ms=5_000,
            versions={"workflow_version": "2"},
        ),
    )
    unavailable = journal.list_runs(
        status=RunStatus.VERSION_UNAVAILABLE, agent="flow", version="2"
    ).runs
    assert [h.run_id for h in unavailable] == ["run-00"]
    assert "run-00" not in every_page(journal, status=RunStatus.RUNNING, version="1", limit=5)


def test_filters_apply_within_a_tenant(journal: JournalStore) -> None:
    populate(journal, tenant="a")
    journal.create_run(header("run-b", "flow", "1", 9_000, tenant="b"))
    ours = every_page(journal, status=RunStatus.RUNNING, agent="flow", version="1", limit=2)
    assert ours[0] == "run-b" and len(ours) == 7  # no tenant: every tenant's
    theirs = every_page(
        journal, status=RunStatus.RUNNING, agent="flow", version="1", limit=2, tenant="b"
    )
    assert theirs == ["run-b"]
    assert len(every_page(journal, agent="flow", version="1", tenant="a")) == 6
