"""``durable-agents runs list --since``: runs started since a time (ADR 0012)."""

from __future__ import annotations

import pytest

from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import input_hash
from durable_agents.local.runs import RunsClient, RunsError
from durable_agents.models import RunHeader, RunStatus

T0 = 1_796_155_200_000  # 2026-12-01T20:00:00Z


def _client() -> RunsClient:
    client = RunsClient.__new__(RunsClient)  # no moto server: the journal is in memory
    client.endpoint, client.table = "memory", "journal"
    client.store = InMemoryJournal()  # type: ignore[assignment]
    for run_id, at in (("run-before", T0 - 1), ("run-at", T0), ("run-after", T0 + 60_000)):
        client.store.create_run(
            RunHeader(
                run_id=run_id,
                agent="flow",
                versions={},
                status=RunStatus.RUNNING,
                input="null",
                created_at_ms=at,
                updated_at_ms=at,
                input_hash=input_hash("flow", "null"),
            )
        )
    return client


def test_runs_list_since_keeps_runs_started_at_or_after_it() -> None:
    listing, _ = _client().list(None, 10, since="2026-12-01T20:00:00Z")
    assert [r["run_id"] for r in listing["runs"]] == ["run-after", "run-at"]
    listing, _ = _client().list(None, 10, since="2026-12-01T21:00:30+01:00")
    assert [r["run_id"] for r in listing["runs"]] == ["run-after"]


@pytest.mark.parametrize("since", ["2026-12-01T20:00:00", "last week"])
def test_runs_list_since_needs_a_time_with_a_timezone(since: str) -> None:
    with pytest.raises(RunsError, match="--since"):
        _client().list(None, 10, since=since)
