"""Golden journals: recorded runs must replay on today's code without executing anything.

A change to the runtime's replay rules, id derivation or serialization — or to an agent without
a version bump — that would break runs in flight fails here. Re-record deliberately with
``python -m tests.replay.golden_cases`` only when breaking them is intended.
"""

from __future__ import annotations

import json

import pytest

from durable_agents import InMemoryJournal, Runtime, SkipClock
from durable_agents.journal.export import snapshot_from_dict
from durable_agents.models import RunStatus
from durable_agents.runtime import OutcomeKind
from tests.replay.golden_cases import CASES, GOLDEN_DIR, GoldenCase


def load_in_flight(case: GoldenCase) -> tuple[Runtime, InMemoryJournal, SkipClock, dict]:
    data = json.loads((GOLDEN_DIR / case.file).read_text())
    snapshot = snapshot_from_dict(data)
    recorded = snapshot.header
    journal = InMemoryJournal()
    # Put the journal back as it was while the run was still going: entries recorded, header
    # RUNNING with no result yet.
    journal.create_run(
        recorded.replace(
            status=RunStatus.RUNNING, result=None, error=None, wake_at_ms=None, waiting_on=None
        )
    )
    journal.commit(recorded.run_id, snapshot.entries)
    clock = SkipClock(start_ms=recorded.updated_at_ms)
    runtime = Runtime(journal, registry=case.resolve_registry(), clock=clock)
    return runtime, journal, clock, data


@pytest.mark.parametrize("case", [c for c in CASES if c.stop_at_wait is None], ids=lambda c: c.file)
def test_completed_runs_replay_to_the_same_result(case: GoldenCase) -> None:
    runtime, journal, _, data = load_in_flight(case)
    run_id = data["header"]["run_id"]
    outcome = runtime.execute(run_id, budget=0)  # budget 0: replay only, execute nothing
    assert outcome.kind is OutcomeKind.SUCCEEDED, outcome.detail
    assert outcome.executed == []
    replayed = json.loads(journal.get_run(run_id).result or "null")
    assert replayed == json.loads(data["header"]["result"])


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.stop_at_wait is not None], ids=lambda c: c.file
)
def test_in_flight_runs_resume_where_they_stopped(case: GoldenCase) -> None:
    runtime, journal, clock, data = load_in_flight(case)
    run_id = data["header"]["run_id"]
    recorded_ops = {e["op_id"] for e in data["entries"]}
    outcome = runtime.execute(run_id, budget=0)
    assert outcome.kind is OutcomeKind.SUSPENDED, outcome.detail
    assert outcome.wake_at_ms == data["header"]["wake_at_ms"]
    assert outcome.executed == []
    clock.advance_to(outcome.wake_at_ms or 0)
    outcome = runtime.execute(run_id, budget=None)
    assert outcome.kind is OutcomeKind.SUCCEEDED, outcome.detail
    assert not set(outcome.executed) & recorded_ops  # nothing recorded ran again
    assert journal.get_run(run_id).status is RunStatus.SUCCEEDED


def test_every_case_has_a_golden_file() -> None:
    assert sorted(p.name for p in GOLDEN_DIR.glob("*.json")) == sorted(c.file for c in CASES)
