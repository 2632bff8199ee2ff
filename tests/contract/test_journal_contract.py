"""The journal contract: every backend (in-memory, DynamoDB on moto) must pass all of it."""

from __future__ import annotations

import pytest

from durable_agents import (
    EntryConflictError,
    IdempotencyConflictError,
    RunNotFoundError,
    RunStateConflictError,
)
from durable_agents.core.models import (
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
    RunChange,
    RunHeader,
    RunStatus,
)
from durable_agents.journal.store import InvalidTransitionError, JournalStore, input_hash

ACTIVE = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED})


def header(
    run_id: str = "run-1", *, key: str | None = None, input_json: str = '{"a":1}', at: int = 1_000
) -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent="agent-a",
        versions={"workflow_version": "1"},
        status=RunStatus.RUNNING,
        input=input_json,
        created_at_ms=at,
        updated_at_ms=at,
        idempotency_key=key,
        input_hash=input_hash("agent-a", input_json),
    )


def entry(
    position: str = "00000001",
    type_: EntryType = EntryType.SUCCEEDED,
    *,
    run_id: str = "run-1",
    attempt: int = 0,
    value: str | None = '"ok"',
    name: str = "a",
) -> Entry:
    return Entry(
        run_id=run_id,
        position=position,
        op_id=f"{run_id}:{name}:{int(position[-8:])}",
        kind=OpKind.STEP,
        name=name,
        type=type_,
        attempt=attempt,
        value=value,
        recorded_at_ms=2_000,
    )


def test_create_and_read_back(journal: JournalStore) -> None:
    stored, created = journal.create_run(header())
    assert created
    assert journal.get_run("run-1") == stored
    snapshot = journal.load("run-1")
    assert snapshot.header == stored
    assert snapshot.entries == []


def test_unknown_run_is_reported(journal: JournalStore) -> None:
    with pytest.raises(RunNotFoundError):
        journal.get_run("run-missing")
    with pytest.raises(RunNotFoundError):
        journal.load("run-missing")


def test_same_run_id_twice_conflicts(journal: JournalStore) -> None:
    journal.create_run(header())
    with pytest.raises(EntryConflictError):
        journal.create_run(header())


def test_idempotency_key_returns_the_first_run(journal: JournalStore) -> None:
    first, created = journal.create_run(header("run-1", key="order-7"))
    again, created_again = journal.create_run(header("run-2", key="order-7"))
    assert created and not created_again
    assert again.run_id == first.run_id == "run-1"
    with pytest.raises(RunNotFoundError):
        journal.get_run("run-2")


def test_idempotency_key_with_other_input_conflicts(journal: JournalStore) -> None:
    journal.create_run(header("run-1", key="order-7"))
    with pytest.raises(IdempotencyConflictError) as info:
        journal.create_run(header("run-2", key="order-7", input_json='{"a":2}'))
    assert info.value.existing_run_id == "run-1"


def test_an_entry_is_written_once(journal: JournalStore) -> None:
    journal.create_run(header())
    journal.commit("run-1", [entry(value='"first"')])
    with pytest.raises(EntryConflictError) as info:
        journal.commit("run-1", [entry(value='"second"')])
    # The winner's entry comes back as evidence, and it is the first one.
    if info.value.existing is not None:
        assert info.value.existing.value == '"first"'
    assert [e.value for e in journal.load("run-1").entries] == ['"first"']


def test_a_commit_is_all_or_nothing(journal: JournalStore) -> None:
    journal.create_run(header())
    journal.commit("run-1", [entry("00000001")])
    with pytest.raises(EntryConflictError):
        journal.commit("run-1", [entry("00000002"), entry("00000001")])
    assert [e.position for e in journal.load("run-1").entries] == ["00000001"]


def test_one_entry_twice_in_a_commit_writes_nothing(journal: JournalStore) -> None:
    journal.create_run(header())
    with pytest.raises(ValueError, match="cannot write an entry twice"):
        journal.commit("run-1", [entry("00000001"), entry("00000002"), entry("00000001")])
    assert journal.load("run-1").entries == []


def test_an_entry_of_another_run_is_refused_before_anything_is_written(
    journal: JournalStore,
) -> None:
    journal.create_run(header())
    journal.create_run(header("run-2"))
    with pytest.raises(ValueError, match="belongs to another run"):
        journal.commit("run-1", [entry("00000001"), entry("00000002", run_id="run-2")])
    assert journal.load("run-1").entries == []
    assert journal.load("run-2").entries == []
    journal.commit("run-1", [])  # nothing to write: nothing happens
    assert journal.get_run("run-1").revision == journal.load("run-1").header.revision


def test_run_change_needs_the_expected_status(journal: JournalStore) -> None:
    journal.create_run(header())
    change = RunChange(
        expected=frozenset({RunStatus.SUSPENDED}), status=RunStatus.RUNNING, updated_at_ms=3_000
    )
    with pytest.raises(RunStateConflictError):
        journal.commit("run-1", [entry()], change)
    assert journal.load("run-1").entries == []  # the entry of the failed commit is not written
    assert journal.get_run("run-1").status is RunStatus.RUNNING


def test_entries_and_status_change_commit_together(journal: JournalStore) -> None:
    journal.create_run(header())
    change = RunChange(
        expected=ACTIVE,
        status=RunStatus.SUSPENDED,
        updated_at_ms=3_000,
        wake_at_ms=9_000,
        waiting_on={"kind": "wait", "op_id": "x"},
    )
    journal.commit("run-1", [entry(type_=EntryType.SCHEDULED, value=None)], change)
    run = journal.get_run("run-1")
    assert run.status is RunStatus.SUSPENDED
    assert run.wake_at_ms == 9_000
    assert run.waiting_on == {"kind": "wait", "op_id": "x"}
    assert run.updated_at_ms == 3_000


def test_finished_runs_never_change(journal: JournalStore) -> None:
    journal.create_run(header())
    done = RunChange(expected=ACTIVE, status=RunStatus.SUCCEEDED, updated_at_ms=3_000, result='"r"')
    journal.commit("run-1", [], done)
    assert journal.get_run("run-1").result == '"r"'
    with pytest.raises(RunStateConflictError):
        journal.commit(
            "run-1", [], RunChange(expected=ACTIVE, status=RunStatus.FAILED, updated_at_ms=4_000)
        )
    with pytest.raises(InvalidTransitionError):
        journal.commit(
            "run-1",
            [],
            RunChange(
                expected=frozenset({RunStatus.SUCCEEDED}),
                status=RunStatus.RUNNING,
                updated_at_ms=5_000,
            ),
        )


def test_load_returns_program_order_with_nested_scopes(journal: JournalStore) -> None:
    journal.create_run(header())
    entries = [
        entry("00000002", EntryType.SUCCEEDED, name="child"),
        entry("00000002/00000001", EntryType.STARTED, attempt=1, value=None, name="inner"),
        entry("00000001", EntryType.SUCCEEDED, name="first"),
        entry("00000002/00000001", EntryType.SUCCEEDED, name="inner"),
        entry("00000001", EntryType.STARTED, attempt=1, value=None, name="first"),
        entry("00000010", EntryType.SUCCEEDED, name="tenth"),
    ]
    for e in entries:
        journal.commit("run-1", [e])
    order = [(e.position, e.type.value) for e in journal.load("run-1").entries]
    assert order == [
        ("00000001", "started"),
        ("00000001", "succeeded"),
        ("00000002/00000001", "started"),
        ("00000002/00000001", "succeeded"),
        ("00000002", "succeeded"),  # a scope's result follows its children
        ("00000010", "succeeded"),
    ]


def test_a_loaded_snapshot_never_changes_under_its_holder(journal: JournalStore) -> None:
    journal.create_run(header())
    # Claims (no result yet) from position 1 on: a warm DynamoDB load reads from the first
    # top-level position without a result (ADR 0015), and entries land anywhere after it, as
    # a run's open operations' do.
    started = EntryType.STARTED
    journal.commit(
        "run-1", [entry("00000001", started, name="one"), entry("00000003", started, name="3")]
    )
    before = journal.load("run-1")
    held = list(before.entries)
    # One commit after everything and one right after the first, then one in the middle.
    journal.commit(
        "run-1",
        [entry("00000005", started, name="five"), entry("00000001/00000001", started, name="c")],
    )
    journal.commit("run-1", [entry("00000002", started, name="two")])
    assert before.entries == held
    after = [e.position for e in journal.load("run-1").entries]
    # (A scope's children sort before its own entries: "/" < "|".)
    assert after == ["00000001/00000001", "00000001", "00000002", "00000003", "00000005"]


def test_entry_fields_round_trip(journal: JournalStore) -> None:
    journal.create_run(header())
    original = Entry(
        run_id="run-1",
        position="00000003",
        op_id="run-1:pay:3",
        kind=OpKind.STEP,
        name="pay",
        type=EntryType.ATTEMPT_FAILED,
        attempt=2,
        value=None,
        error=ErrorInfo(type="TimeoutError", message="slow", module="builtins"),
        recorded_at_ms=5,
        lease_expires_at_ms=None,
        due_at_ms=77,
        meta={"semantics": "x"},
    )
    journal.commit("run-1", [original])
    assert journal.load("run-1").entries == [original]


def test_large_values_round_trip(journal: JournalStore) -> None:
    journal.create_run(header())
    big = '"' + "x" * 600_000 + '"'
    journal.commit("run-1", [entry(value=big)])
    journal.commit(
        "run-1",
        [],
        RunChange(expected=ACTIVE, status=RunStatus.SUCCEEDED, updated_at_ms=3_000, result=big),
    )
    snapshot = journal.load("run-1")
    assert snapshot.entries[0].value == big
    assert snapshot.header.result == big


def test_listing_and_due_timers(journal: JournalStore) -> None:
    for i, run_id in enumerate(["run-a", "run-b", "run-c"]):
        journal.create_run(header(run_id, at=1_000 + i))
    journal.commit(
        "run-a",
        [],
        RunChange(
            expected=ACTIVE, status=RunStatus.SUSPENDED, updated_at_ms=2_000, wake_at_ms=5_000
        ),
    )
    journal.commit(
        "run-b",
        [],
        RunChange(
            expected=ACTIVE, status=RunStatus.SUSPENDED, updated_at_ms=2_001, wake_at_ms=50_000
        ),
    )
    assert [h.run_id for h in journal.due_runs(5_000)] == ["run-a"]
    assert journal.due_runs(4_999) == []
    suspended = journal.list_runs(status=RunStatus.SUSPENDED).runs
    assert [h.run_id for h in suspended] == ["run-b", "run-a"]
    assert [h.run_id for h in journal.list_runs(status=RunStatus.RUNNING).runs] == ["run-c"]
    assert {h.run_id for h in journal.list_runs().runs} == {"run-a", "run-b", "run-c"}
    # Waking up takes the run out of the timer index.
    journal.commit(
        "run-a",
        [],
        RunChange(expected=ACTIVE, status=RunStatus.RUNNING, updated_at_ms=6_000, wake_at_ms=None),
    )
    assert journal.due_runs(10**13) == [journal.get_run("run-b")]


def test_listing_pages_with_a_cursor(journal: JournalStore) -> None:
    for i in range(5):
        journal.create_run(header(f"run-{i}", at=1_000 + i))
    first = journal.list_runs(status=RunStatus.RUNNING, limit=2)
    assert [h.run_id for h in first.runs] == ["run-4", "run-3"]
    assert first.cursor is not None
    second = journal.list_runs(status=RunStatus.RUNNING, limit=2, cursor=first.cursor)
    assert [h.run_id for h in second.runs] == ["run-2", "run-1"]


def test_two_loads_of_an_unchanged_journal_are_equal_however_they_were_read(
    journal: JournalStore,
) -> None:
    # The first load of a run in a process reads it whole, the next ones warm (ADR 0015): how
    # a snapshot was read is not what it holds.
    journal.create_run(header())
    journal.commit("run-1", [entry(f"0000000{i}", name=f"s{i}") for i in range(1, 6)])
    first = journal.load("run-1")
    assert journal.load("run-1") == first
