"""The warm grouping of a run's journal: folds only what is new, and is never wrong.

``WarmRecords`` is a cache, so every test compares what it hands out with a grouping from
scratch (``group_entries``) of the same journal.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.ids import format_position
from durable_agents.core.models import EffectStatus, Entry, EntryType, OpKind, SideEffectRecord
from durable_agents.engine.replay_index import WarmRecords, group_entries
from durable_agents_local.testing import AgentTestRunner


def _entry(position: str, type_: EntryType, attempt: int = 0, **fields: Any) -> Entry:
    return Entry(
        run_id="run-1",
        position=position,
        op_id=f"run-1:s:{position}",
        kind=OpKind.STEP,
        name="s",
        type=type_,
        attempt=attempt,
        **fields,
    )


def _effect() -> SideEffectRecord:
    return SideEffectRecord(
        run_id="run-1",
        position="00000001",
        operation_id="run-1:pay:1",
        tool="pay",
        tool_schema_version="1",
        canonical_request="{}",
        idempotency_key="k",
        status=EffectStatus.PREPARED,
        attempt=1,
        prepared_at_ms=1,
        updated_at_ms=1,
        lease_expires_at_ms=2,
        stale_at_ms=3,
    )


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert list(a) == list(b)
    for position in a:
        got, want = dataclasses.replace(a[position], decoded=None), b[position]
        assert got == dataclasses.replace(want, decoded=None), position


def test_appended_entries_are_folded_into_the_grouping_without_regrouping() -> None:
    warm = WarmRecords()
    journal = [_entry("00000001", EntryType.STARTED, 1), _entry("00000001", EntryType.SUCCEEDED)]
    _same(warm.records("run-1", journal, ()), group_entries(journal))
    assert warm.folded == 2
    journal = [*journal, _entry("00000002", EntryType.STARTED, 1)]
    _same(warm.records("run-1", journal, ()), group_entries(journal))
    assert warm.folded == 3  # only the new entry was folded


def test_a_record_handed_out_never_changes_when_newer_entries_are_folded() -> None:
    warm = WarmRecords()
    started = _entry("00000001", EntryType.STARTED, 1)
    before = warm.records("run-1", [started], ())
    record = before["00000001"]
    after = warm.records("run-1", [started, _entry("00000001", EntryType.SUCCEEDED)], ())
    assert record.result is None and record.entries == [started]  # copied on write
    assert after["00000001"].result is not None


def test_a_dict_handed_out_never_gains_the_positions_folded_later() -> None:
    # The cached grouping is extended in place; what callers got is theirs.
    warm = WarmRecords()
    journal = [_entry("00000001", EntryType.STARTED, 1)]
    before = warm.records("run-1", journal, ())
    journal = [*journal, _entry("00000002", EntryType.STARTED, 1)]
    after = warm.records("run-1", journal, ())
    assert list(before) == ["00000001"] and list(after) == ["00000001", "00000002"]


def test_entries_inserted_before_and_after_the_known_ones_regroup_from_scratch() -> None:
    warm = WarmRecords()
    a, c = _entry("00000001", EntryType.STARTED, 1), _entry("00000003", EntryType.STARTED, 1)
    warm.records("run-1", [a, c], ())
    b, d = _entry("00000002", EntryType.STARTED, 1), _entry("00000004", EntryType.STARTED, 1)
    journal = [a, b, c, d]  # as long as the known ones plus two: only c's index tells
    _same(warm.records("run-1", journal, ()), group_entries(journal))
    assert warm.folded == 6


def test_an_entry_inserted_before_the_known_ones_regroups_from_scratch() -> None:
    # A parallel branch writes below positions another branch already wrote.
    warm = WarmRecords()
    first, later = (
        _entry("00000001/00000001", EntryType.STARTED, 1),
        _entry("00000002", EntryType.STARTED, 1),
    )
    warm.records("run-1", [first, later], ())
    inserted = _entry("00000001/00000002", EntryType.STARTED, 1)
    journal = [first, inserted, later]
    _same(warm.records("run-1", journal, ()), group_entries(journal))
    assert warm.folded == 5


def test_equal_but_other_entry_objects_regroup_from_scratch() -> None:
    # Only the very objects a store handed out before prove the journal is the one grouped.
    warm = WarmRecords()
    journal = [_entry("00000001", EntryType.STARTED, 1)]
    warm.records("run-1", journal, ())
    copy = [dataclasses.replace(journal[0])]
    _same(warm.records("run-1", copy, ()), group_entries(copy))
    assert warm.folded == 2


def test_side_effect_records_are_attached_as_loaded_each_time() -> None:
    warm = WarmRecords()
    journal = [_entry("00000001", EntryType.STARTED, 1)]
    effect = _effect()
    changed = dataclasses.replace(effect, status=EffectStatus.COMMITTED, external_id="ch_1")
    assert warm.records("run-1", journal, [effect])["00000001"].effect is effect
    assert warm.records("run-1", journal, [changed])["00000001"].effect is changed
    assert warm.records("run-1", journal, [])["00000001"].effect is None


def test_the_grouping_is_bounded() -> None:
    warm = WarmRecords(capacity=2)
    for run in ("a", "b", "c"):
        warm.records(run, [_entry("00000001", EntryType.STARTED, 1)], ())
    journal = [_entry("00000001", EntryType.STARTED, 1)]
    warm.records("a", journal, ())  # "a" was dropped: grouped from scratch
    assert warm.folded == 4


def test_the_inlined_position_format_is_format_position() -> None:
    registry = AgentRegistry()
    seen: list[str] = []

    @agent(name="positions", version="1", registry=registry)
    def positions(ctx: DurableContext, n: int) -> int:
        for i in range(n):
            ctx.step(lambda: None, name=f"s{i}")
        return n

    runner = AgentTestRunner(positions, mode="faithful")
    result = runner.run(12)
    seen = sorted({e.position for e in runner.journal.load(result.run_id).entries})
    assert seen == [format_position("", i) for i in range(1, 13)]


@pytest.mark.parametrize("value", [{"a": [1]}, [1, 2]])
def test_a_mutable_result_is_decoded_afresh_on_every_replay(value: Any) -> None:
    registry = AgentRegistry()
    seen: list[Any] = []

    @agent(name="mutates", version="1", registry=registry)
    def mutates(ctx: DurableContext, _: int) -> str:
        got = ctx.step(lambda: value, name="load")
        seen.append(repr(got))
        if isinstance(got, dict):
            got["mutated"] = True  # agent code changing what a step returned
        else:
            got.append(99)
        ctx.step(lambda: 1, name="next")
        ctx.wait(timedelta(seconds=1), name="pause")
        return "done"

    result = AgentTestRunner(mutates, mode="faithful").run(0)
    assert result.status == "SUCCEEDED"
    assert set(seen) == {repr(value)}  # every replay saw the recorded value, not a mutated one


def test_an_immutable_result_is_decoded_once_per_process() -> None:
    record = group_entries([_entry("00000001", EntryType.SUCCEEDED, value="7")])["00000001"]
    decoded: list[str] = []

    def decode(entry: Entry, hint: Any, serdes: Any) -> Any:
        decoded.append(entry.value or "")
        return int(entry.value or "0") if hint is None else [7]

    assert record.replayed(None, None, decode) == 7
    assert record.replayed(None, None, decode) == 7
    assert len(decoded) == 1  # kept
    assert record.replayed(list, None, decode) == [7]  # another hint: decoded for it
    assert record.replayed(list, None, decode) == [7]
    assert len(decoded) == 3  # mutable: never kept
