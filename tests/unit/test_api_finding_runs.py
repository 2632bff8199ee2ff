"""``GET /runs``: start-time range, sub-agent runs, cursors bound to their query (ADR 0012).

The journal's side (order, filters, paging) is the contract suite
(tests/contract/test_finding_runs_contract.py); here: what the Api accepts and refuses.
"""

from __future__ import annotations

import boto3
import pytest

from durable_agents.core.models import RunHeader, RunStatus
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import input_hash
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api_hostile_input import assert_rejected, send

T0 = 1_796_155_200_000  # 2026-12-01T20:00:00Z


def _run(run_id: str, at: int, parent: str | None = None) -> None:
    journal = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    journal.create_run(
        RunHeader(
            run_id=run_id,
            agent="example-research",
            versions={},
            status=RunStatus.RUNNING,
            input="null",
            created_at_ms=at,
            updated_at_ms=at,
            input_hash=input_hash("example-research", "null"),
            parent_run_id=parent,
        )
    )


def _ids(query: dict[str, str]) -> list[str]:
    status, body = send("GET", "/runs", query=query)
    assert status == 200, body
    assert "cursor" in body
    return [r["run_id"] for r in body["runs"]]


def test_runs_are_found_by_start_time_and_children_on_request(deployment: Deployment) -> None:
    _run("run-early", T0 - 3_600_000)
    _run("run-on-time", T0)
    _run("run-child", T0 + 1, parent="run-on-time")
    _run("run-late", T0 + 3_600_000)
    assert _ids({}) == ["run-late", "run-on-time", "run-early"]
    assert _ids({"since": "2026-12-01T20:00:00Z", "until": "2026-12-01T21:30:00+01:00"}) == [
        "run-on-time"
    ]
    assert _ids({"since": "2026-12-01T20:00:00.001Z"}) == ["run-late"]
    assert _ids({"until": "2026-12-01T20:00:00.001+00:00"}) == ["run-on-time", "run-early"]
    assert _ids({"children": "true"}) == ["run-late", "run-child", "run-on-time", "run-early"]
    assert _ids({"parent": "run-on-time"}) == ["run-child"]
    assert _ids({"children": "false", "status": "running"})[0] == "run-late"


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"since": "2026-12-01T20:00:00"}, ("since", "timezone")),
        ({"until": "yesterday"}, ("until", "ISO-8601")),
        ({"since": "2026-12-01T20:00:00Z", "until": "2026-12-01T20:00:00Z"}, ("before",)),
        ({"since": "9" * 60}, ("since",)),
        ({"children": "maybe"}, ("children",)),
        ({"parent": "no/such id"}, ("run id",)),
    ],
    ids=["no-timezone", "not-a-time", "empty-range", "long", "children", "parent"],
)
def test_a_malformed_query_is_a_400_that_names_it(
    deployment: Deployment, query: dict[str, str], words: tuple[str, ...]
) -> None:
    assert_rejected(send("GET", "/runs", query=query), 400, *words)


def test_a_cursor_is_refused_with_other_filters(deployment: Deployment) -> None:
    for i in range(3):
        _run(f"run-{i}", T0 + i)
    status, first = send("GET", "/runs", query={"limit": "1", "since": "2026-12-01T19:00:00Z"})
    assert status == 200 and first["cursor"]
    other = {"limit": "1", "since": "2026-12-01T18:00:00Z", "cursor": first["cursor"]}
    assert_rejected(send("GET", "/runs", query=other), 400, "cursor", "same filters")
    same = {"limit": "5", "since": "2026-12-01T19:00:00Z", "cursor": first["cursor"]}
    assert _ids(same) == ["run-1", "run-0"]
