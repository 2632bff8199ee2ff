"""Golden journals replay byte-identically with plugins and step contexts in the runtime.

Plugins only listen: replaying a recorded run with a recording plugin and one that raises in
every hook reaches the very same result string, writes nothing, and reports every recorded
operation as ``replayed=True`` — never as executed, never with an attempt.
"""

from __future__ import annotations

import json

import pytest

from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.export import snapshot_to_dict
from tests.contract.test_plugins_contract import Raising, Recorder
from tests.replay.golden_cases import CASES, GoldenCase
from tests.replay.test_golden import load_in_flight


def with_plugins(runtime: Runtime, *plugins: object) -> Runtime:
    return Runtime(
        runtime.store,
        registry=runtime.registry,
        clock=runtime.clock,
        plugins=list(plugins),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("case", [c for c in CASES if c.stop_at_wait is None], ids=lambda c: c.file)
def test_completed_runs_replay_identically_and_are_reported_replayed(case: GoldenCase) -> None:
    plain, journal, _, data = load_in_flight(case)
    recorder = Recorder()
    runtime = with_plugins(plain, Raising(), recorder)
    run_id = data["header"]["run_id"]
    outcome = runtime.execute(run_id, budget=0)
    assert outcome.kind is OutcomeKind.SUCCEEDED and outcome.executed == []
    assert journal.get_run(run_id).result == data["header"]["result"]  # the same bytes
    assert snapshot_to_dict(journal.load(run_id))["entries"] == data["entries"]
    ends = recorder.of("on_operation_end")
    # Every operation of the run's top scope; a recorded child scope returns its result
    # without being entered, so what is nested in it is not even replayed.
    # (A run_migrated record is no operation: replay never reports it.)
    top = {
        e["op_id"] for e in data["entries"] if "/" not in e["op_id"] and e["kind"] != "migration"
    }
    assert {e.op_id for e in ends} == top
    assert all(e.replayed and e.duration_ms is None for e in ends)
    assert all(s.replayed for s in recorder.of("on_operation_start"))
    assert recorder.of("on_operation_attempt_start") == []
    assert recorder.of("on_operation_attempt_end") == []


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.stop_at_wait is not None], ids=lambda c: c.file
)
def test_in_flight_runs_report_only_new_work_as_executed(case: GoldenCase) -> None:
    plain, journal, clock, data = load_in_flight(case)
    recorder = Recorder()
    runtime = with_plugins(plain, Raising(), recorder)
    run_id = data["header"]["run_id"]
    outcome = runtime.execute(run_id, budget=0)
    assert outcome.kind is OutcomeKind.SUSPENDED and outcome.executed == []
    clock.advance_to(outcome.wake_at_ms or 0)
    outcome = runtime.execute(run_id, budget=None)
    assert outcome.kind is OutcomeKind.SUCCEEDED
    recorded = {e["op_id"] for e in data["entries"] if e["type"] in ("succeeded", "failed")}
    for end in recorder.of("on_operation_end"):
        if end.op_id in recorded:
            assert end.replayed, end
        else:  # new work: executed in one of these invocations (or still pending then)
            assert not end.replayed, end
    executed = {e.op_id for e in recorder.of("on_operation_attempt_start")}
    assert executed <= set(outcome.executed) - recorded
    # The wait that was pending is now done: executed here, not replayed.
    assert any(not e.replayed and e.outcome == "succeeded" for e in recorder.of("on_operation_end"))
    assert json.loads(journal.get_run(run_id).result or "null") is not None
