"""A snapshot handed out never changes, whatever is written to the run after it (ADR 0018).

Stores hand out views of the lists they append to instead of copies (``prefix_view``): an
append must stay invisible to every snapshot loaded before it, and anything that is not an
append (a parallel branch's entry sorting before the last one, a side-effect record's status
moving on, a new generation) must be made on a copy.
"""

from __future__ import annotations

from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    EntryType,
    RunChange,
    RunSnapshot,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.journal.store import JournalStore
from tests.contract.test_journal_contract import entry, header
from tests.unit.tail_journal import effect

_RUNNING = frozenset({RunStatus.RUNNING})


def record(position: str, status: EffectStatus, result: str | None = None) -> SideEffectRecord:
    return effect(position, status, result, run_id="run-1")


class Kept:
    """Snapshots as loaded, with a copy of what each held then."""

    def __init__(self, journal: JournalStore) -> None:
        self.journal = journal
        self.kept: list[tuple[RunSnapshot, list[object], list[object]]] = []

    def load(self) -> RunSnapshot:
        snapshot = self.journal.load("run-1")
        self.kept.append((snapshot, list(snapshot.entries), list(snapshot.effects)))
        return snapshot

    def unchanged(self) -> None:
        for snapshot, entries, effects in self.kept:
            assert list(snapshot.entries) == entries
            assert len(snapshot.entries) == len(entries)
            assert snapshot.entries == entries
            assert list(snapshot.effects) == effects


def test_appends_leave_earlier_snapshots_as_they_were(journal: JournalStore) -> None:
    journal.create_run(header())
    kept = Kept(journal)
    kept.load()
    for p in range(1, 6):
        journal.commit("run-1", [entry(f"{p:08d}", EntryType.STARTED, attempt=1)])
        kept.load()
        journal.commit("run-1", [entry(f"{p:08d}")])
        kept.load()
    kept.unchanged()
    assert len(kept.load().entries) == 10


def test_a_branch_sorting_before_the_last_entry_is_not_seen_by_earlier_snapshots(
    journal: JournalStore,
) -> None:
    journal.create_run(header())
    kept = Kept(journal)
    journal.commit("run-1", [entry("00000001", EntryType.STARTED, attempt=1)])
    journal.commit("run-1", [entry("00000001/00000002/00000001")])  # branch 2 finished first
    kept.load()
    journal.commit("run-1", [entry("00000001/00000001/00000001")])  # then branch 1
    middle = kept.load()
    journal.commit("run-1", [entry("00000001/00000001/00000002")])
    journal.commit("run-1", [entry("00000001")])
    kept.load()
    kept.unchanged()
    assert [e.position for e in middle.entries] == [
        "00000001/00000001/00000001",
        "00000001/00000002/00000001",
        "00000001",
    ]


def test_a_side_effect_record_moving_on_is_not_seen_by_earlier_snapshots(
    journal: JournalStore,
) -> None:
    journal.create_run(header())
    kept = Kept(journal)
    journal.commit("run-1", [], effect=EffectChange(record("00000002", EffectStatus.PREPARED)))
    kept.load()
    journal.commit("run-1", [], effect=EffectChange(record("00000001", EffectStatus.PREPARED)))
    kept.load()
    done = record("00000002", EffectStatus.COMMITTED, result='"shipped"')
    expected = frozenset({EffectStatus.PREPARED})
    journal.commit("run-1", [entry("00000002")], effect=EffectChange(done, expected, 1))
    last = kept.load()
    kept.unchanged()
    assert [r.status for r in last.effects] == [EffectStatus.PREPARED, EffectStatus.COMMITTED]


def test_a_new_generation_leaves_snapshots_of_the_last_one_as_they_were(
    journal: JournalStore,
) -> None:
    journal.create_run(header())
    kept = Kept(journal)
    journal.commit("run-1", [entry("00000001")])
    journal.commit("run-1", [entry("00000002")])
    first = kept.load()
    change = RunChange(_RUNNING, RunStatus.RUNNING, 3_000, input="{}", generation=1)
    journal.commit("run-1", [entry("G000001:00000001")], change=change)
    second = kept.load()
    journal.commit("run-1", [entry("G000001:00000002")])
    journal.commit("run-1", [entry("00000003")])  # a late write to generation 0
    third = kept.load()
    kept.unchanged()
    assert [e.position for e in first.entries] == ["00000001", "00000002"]
    assert [e.position for e in second.entries] == ["G000001:00000001"]
    assert [e.position for e in third.entries] == ["G000001:00000001", "G000001:00000002"]
    old = journal.load_generation("run-1", 0)
    assert [e.position for e in old.entries] == ["00000001", "00000002", "00000003"]
