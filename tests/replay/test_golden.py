"""Golden journals: recorded runs must replay on today's code without executing anything.

A change to the runtime's replay rules, id derivation or serialization — or to an agent without
a version bump — that would break runs in flight fails here. Every supported version counts:
each (agent, version) today's golden deployment registers must have a recorded journal, and
each journal replays on the code of the version it is pinned to (beside the newer ones), so a
change that would break in-flight runs of ANY deployed version fails the build. Re-record
deliberately with ``python -m tests.replay.golden_cases [FILE...]`` only when breaking them is
intended (or to record the journals of a new version: name its files).
"""

from __future__ import annotations

import json

import pytest

from durable_agents import AgentRegistry, SkipClock
from durable_agents.core.migration_records import migration_entries, migration_record
from durable_agents.core.models import EntryType, OpKind, RunStatus
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.export import snapshot_from_dict
from durable_agents.journal.memory import InMemoryJournal
from tests.replay.golden_cases import CASES, GOLDEN_DIR, GoldenCase


def load_in_flight(case: GoldenCase) -> tuple[Runtime, InMemoryJournal, SkipClock, dict]:
    data = json.loads((GOLDEN_DIR / case.file).read_text())
    return install(data, case.resolve_registry())


def install(
    data: dict, registry: AgentRegistry
) -> tuple[Runtime, InMemoryJournal, SkipClock, dict]:
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
    runtime = Runtime(journal, registry=registry, clock=clock)
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


def recorded(file: str) -> dict:
    return json.loads((GOLDEN_DIR / file).read_text())  # type: ignore[no-any-return]


# The cases whose agents live in the default registry, and the module each one stands for.
_DEFAULT_REGISTRY_MODULES = {"example": "agents.example", "chat": "agents.chat"}


def supported_versions() -> set[tuple[str, str]]:
    """Every (agent, version) the golden deployments carry: what must keep replaying.

    The golden registry counts whole; of the default registry only what ``agents.example``
    and ``agents.chat`` register (other example modules imported by other tests land there
    too).
    """
    registries: dict[str, AgentRegistry] = {c.registry: c.resolve_registry() for c in CASES}
    supported = set()
    for key, registry in registries.items():
        module = _DEFAULT_REGISTRY_MODULES.get(key)
        for definition in registry.definitions():
            if module is None or definition.fn.__module__ == module:
                supported.add((definition.name, definition.version))
    return supported


def test_every_supported_version_has_a_golden_journal() -> None:
    pinned = {
        (d["header"]["agent"], d["header"]["versions"]["workflow_version"])
        for d in (recorded(c.file) for c in CASES)
    }
    missing = supported_versions() - pinned
    assert not missing, f"deployed versions without a golden journal (record one): {missing}"
    assert ("golden-ticket", "1") in pinned and ("golden-ticket", "2") in pinned


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_each_journal_is_pinned_to_the_version_its_case_names(case: GoldenCase) -> None:
    header = recorded(case.file)["header"]
    assert (header["agent"], header["versions"]["workflow_version"]) == (case.agent, case.version)
    # Replayed on today's deployment, which carries that version beside any newer one.
    assert case.resolve_registry().pinned(case.agent, case.version).version == case.version


def test_v1_runs_replay_on_v1_beside_v2_which_would_diverge_from_them() -> None:
    """v2 is deployed (new runs start on it), and v1's journals need v1's code: not v2's."""
    case = next(c for c in CASES if c.file == "golden-ticket-v1-completed.json")
    assert case.resolve_registry().latest("golden-ticket").version == "2"
    data = recorded(case.file)
    data["header"]["versions"]["workflow_version"] = "2"  # as if v2 had picked it up
    runtime, journal, _, _ = install(data, case.resolve_registry())
    run_id = data["header"]["run_id"]
    outcome = runtime.execute(run_id, budget=0)
    assert outcome.kind is OutcomeKind.PAUSED, outcome.detail
    error = journal.get_run(run_id).error
    assert error is not None and error.type == "ReplayDivergedError"
    assert "escalate" in error.message and "close-ticket" in error.message


def test_the_migrated_journal_records_the_migration_and_keeps_the_original_result() -> None:
    data = recorded("golden-ticket-v1-migrated-v2-completed.json")
    snapshot = snapshot_from_dict(data)
    (entry,) = migration_entries(snapshot.entries)
    assert entry.kind is OpKind.MIGRATION and entry.name == "run_migrated"
    record = migration_record(entry)
    assert record["from"]["workflow_version"] == "1" and record["to"]["workflow_version"] == "2"
    assert record["replays"] == ["open-ticket", "cool-off"]
    assert record["status_before"] == "SUSPENDED"
    (change,) = record["results"].values()
    assert change["op_id"] == "open-ticket:1"
    assert json.loads(change["value"]) == {"id": "T-order-2005", "priority": "normal"}
    (original,) = [
        e for e in snapshot.entries if e.name == "open-ticket" and e.type is EntryType.SUCCEEDED
    ]
    assert json.loads(original.value or "null") == {"id": "T-order-2005"}  # written once
    # v2 ran from the frontier on, over the transformed ticket.
    assert json.loads(data["header"]["result"])["escalated"] == "T-order-2005 at normal"


def test_the_migrated_run_in_flight_resumes_on_v2_with_the_transformed_state() -> None:
    case = next(c for c in CASES if c.file == "golden-ticket-v1-migrated-v2-waiting.json")
    runtime, journal, clock, data = load_in_flight(case)
    run_id = data["header"]["run_id"]
    outcome = runtime.execute(run_id, budget=0)
    assert outcome.kind is OutcomeKind.SUSPENDED, outcome.detail
    clock.advance_to(outcome.wake_at_ms or 0)
    assert runtime.execute(run_id, budget=None).kind is OutcomeKind.SUCCEEDED
    result = json.loads(journal.get_run(run_id).result or "{}")
    assert result["ticket"] == {"id": "T-order-2006", "priority": "normal"}
    assert result["version"] == "2"


def test_a_run_replays_with_the_prompt_and_model_config_it_pinned_not_the_newest() -> None:
    case = next(c for c in CASES if c.file == "golden-writer-v1-completed.json")
    data = recorded(case.file)
    versions = data["header"]["versions"]
    assert versions["prompt/golden-tone"].startswith("1#")
    assert versions["model_config/golden-model"].startswith("1#")
    prompts = case.resolve_registry().prompts
    # Today's deployment has newer versions of both: a new run would pin those.
    newest = prompts.pin(["golden-tone"], ["golden-model"])
    assert newest["prompt/golden-tone"].startswith("2#")
    assert newest["model_config/golden-model"].startswith("2#")
    runtime, journal, _, _ = load_in_flight(case)
    run_id = data["header"]["run_id"]
    outcome = runtime.execute(run_id, budget=0)
    assert outcome.kind is OutcomeKind.SUCCEEDED, outcome.detail
    result = json.loads(journal.get_run(run_id).result or "{}")
    assert result["tone"] == "Answer in one short sentence."  # v1's text
    assert (result["model"], result["temperature"]) == ("m-small", 0.0)  # v1's config


def test_the_rerun_journals_hold_their_copied_and_reused_records() -> None:
    # What makes them reruns (ADR 0027): they must keep replaying as recorded.
    start = recorded("golden-shop-v1-rerun-start-completed.json")
    assert start["header"]["rerun"]["from"] == "start"
    vias = [e["meta"].get("via") for e in start["entries"] if e["name"] == "book-courier"]
    assert vias == ["reused"]
    copied = recorded("golden-shop-v1-rerun-copied-completed.json")
    assert copied["header"]["rerun"]["copied"] == 3
    assert sum("copied_from" in e["meta"] for e in copied["entries"]) == 3
