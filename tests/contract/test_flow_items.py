"""The flow-items port (``journal.flow_items``): one contract, in memory, SQLite and DynamoDB.

Each backend gets the same injected clock (epoch seconds), so expiry is tested alike. The
DynamoDB one reads two items a Query request, so every query of more items pages.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from durable_agents.core.models import RunHeader, RunSnapshot, RunStatus
from durable_agents.engine.sticky.carriers import ParkedRunAbandonedError
from durable_agents.engine.sticky.parking import REFUSING_STORE, WriteTally
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.dynamodb_flow_items import DynamoDBFlowItems
from durable_agents.journal.flow_items import (
    MAX_WRITES,
    Check,
    Delete,
    FlowConflictError,
    FlowItem,
    FlowItems,
    Increment,
    InMemoryFlowItems,
    Put,
)
from durable_agents.journal.sqlite import SCHEMA_VERSION, SqliteJournal
from durable_agents.journal.sqlite_flow_items import SqliteFlowItems
from durable_agents.journal.store import JournalStore

START_S = 1_767_225_600
FAR = 4_000_000_000  # an expiry the real clock of a journal's own flow items is before


class Now:
    """A clock in epoch seconds that moves only when told."""

    def __init__(self) -> None:
        self.s: float = START_S

    def __call__(self) -> float:
        return self.s


@pytest.fixture
def now() -> Now:
    return Now()


@pytest.fixture(params=["memory", "sqlite", "dynamodb"])
def flow(request: pytest.FixtureRequest, now: Now, tmp_path: Path) -> Iterator[FlowItems]:
    if request.param == "memory":
        yield InMemoryFlowItems(now_s=now)
    elif request.param == "sqlite":
        with SqliteJournal(tmp_path / "journal.sqlite3") as journal:
            yield SqliteFlowItems(journal._write, journal._read, now_s=now)
    else:
        request.getfixturevalue("dynamodb_journal")  # the table, from template.yaml
        client = boto3.client("dynamodb", region_name="us-east-1")
        yield DynamoDBFlowItems(client, "journal", now_s=now, page_size=2)


def conflict_index(flow: FlowItems, *writes: Put | Delete | Check | Increment) -> int | None:
    with pytest.raises(FlowConflictError) as raised:
        flow.transact(writes)
    return raised.value.index


def keys(items: list[FlowItem]) -> list[str]:
    return [item.key for item in items]


# -- Put ------------------------------------------------------------------------------------


def test_a_put_creates_an_item_that_reads_back(flow: FlowItems) -> None:
    assert flow.get("p", "k") is None
    flow.transact([Put("p", "k", {"x": [1, "two"], "y": None}, counters={"n": 3})])
    assert flow.get("p", "k") == FlowItem("p", "k", {"x": [1, "two"], "y": None}, {"n": 3}, 1)
    assert flow.get("p", "other") is None
    assert flow.get("other", "k") is None


def test_a_put_at_the_version_read_replaces_the_item_whole(flow: FlowItems) -> None:
    flow.transact([Put("p", "k", {"x": 1}, counters={"a": 1, "b": 2}, expires_at_s=START_S + 99)])
    flow.transact([Put("p", "k", {"y": 2}, expected_version=1, counters={"b": 5})])
    assert flow.get("p", "k") == FlowItem("p", "k", {"y": 2}, {"b": 5}, 2, None)


def test_a_put_is_refused_when_the_item_is_absent_present_or_stale(flow: FlowItems) -> None:
    assert conflict_index(flow, Put("p", "k", {}, expected_version=1)) == 0
    assert flow.get("p", "k") is None
    flow.transact([Put("p", "k", {"v": 1})])
    flow.transact([Put("p", "k", {"v": 2}, expected_version=1)])
    assert conflict_index(flow, Put("p", "k", {"v": 3})) == 0
    assert conflict_index(flow, Put("p", "k", {"v": 3}, expected_version=1)) == 0
    assert conflict_index(flow, Put("p", "k", {"v": 3}, expected_version=3)) == 0
    assert flow.get("p", "k") == FlowItem("p", "k", {"v": 2}, {}, 2)


def test_every_write_moves_the_version_on_by_one(flow: FlowItems) -> None:
    flow.transact([Put("p", "k", {})])
    flow.transact([Increment("p", "k", {"n": 1})])
    flow.transact([Increment("p", "k", {})])
    flow.transact([Put("p", "k", {"a": 1}, expected_version=3)])
    flow.transact([Increment("p", "k", {"n": 1}, expected_version=4)])
    item = flow.get("p", "k")
    assert item is not None
    assert (item.version, item.data, item.counters) == (5, {"a": 1}, {"n": 1})


def test_what_a_caller_does_to_data_never_changes_what_is_stored(flow: FlowItems) -> None:
    data = {"queue": ["a"]}
    flow.transact([Put("p", "k", data)])
    data["queue"].append("written")
    read = flow.get("p", "k")
    assert read is not None
    read.data["queue"].append("read")
    read.counters["n"] = 9
    assert flow.get("p", "k") == FlowItem("p", "k", {"queue": ["a"]}, {}, 1)


# -- Delete and Check -----------------------------------------------------------------------


def test_a_delete_needs_the_item_and_the_version_when_given(flow: FlowItems) -> None:
    assert conflict_index(flow, Delete("p", "k")) == 0
    flow.transact([Put("p", "k", {})])
    flow.transact([Put("p", "k", {}, expected_version=1)])
    assert conflict_index(flow, Delete("p", "k", expected_version=1)) == 0
    assert flow.get("p", "k") is not None
    flow.transact([Delete("p", "k", expected_version=2)])
    assert flow.get("p", "k") is None
    flow.transact([Put("p", "k", {})])
    flow.transact([Delete("p", "k")])
    assert flow.get("p", "k") is None
    assert conflict_index(flow, Delete("p", "k")) == 0


def test_a_check_holds_the_transaction_to_what_was_read(flow: FlowItems) -> None:
    flow.transact([Check("p", "k", None)])
    assert flow.get("p", "k") is None  # a check writes nothing
    assert conflict_index(flow, Check("p", "k", 1)) == 0
    flow.transact([Put("p", "k", {})])
    flow.transact([Check("p", "k", 1)])
    assert conflict_index(flow, Check("p", "k", None)) == 0
    assert conflict_index(flow, Put("p", "other", {}), Check("p", "k", 2)) == 1
    assert flow.get("p", "other") is None
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {}, 1)


# -- Increment ------------------------------------------------------------------------------


def test_an_increment_creates_the_item_then_adds_in_place(flow: FlowItems) -> None:
    flow.transact([Increment("p", "k", {"n": 2})])
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 2}, 1)
    flow.transact([Increment("p", "k", {"n": 3, "m": -1})])
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 5, "m": -1}, 2)


def test_an_increment_keeps_the_data_and_the_other_counters(flow: FlowItems) -> None:
    flow.transact([Put("p", "k", {"x": 1}, counters={"a": 7})])
    flow.transact([Increment("p", "k", {"b": 1})])
    assert flow.get("p", "k") == FlowItem("p", "k", {"x": 1}, {"a": 7, "b": 1}, 2)


def test_a_ceiling_refuses_an_increment_past_it_and_writes_nothing(flow: FlowItems) -> None:
    flow.transact([Increment("p", "k", {"n": 2}, ceilings={"n": 3})])
    assert conflict_index(flow, Increment("p", "k", {"n": 2}, ceilings={"n": 3})) == 0
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 2}, 1)
    flow.transact([Increment("p", "k", {"n": 1}, ceilings={"n": 3})])  # exactly the ceiling
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 3}, 2)
    # A counter bounded but not added to is checked as it is.
    assert conflict_index(flow, Increment("p", "k", {"m": 1}, ceilings={"n": 2})) == 0
    flow.transact([Increment("p", "k", {"m": 1}, ceilings={"n": 3})])
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 3, "m": 1}, 3)


def test_an_absent_counter_or_item_counts_zero_against_a_ceiling(flow: FlowItems) -> None:
    assert conflict_index(flow, Increment("p", "new", {"n": 4}, ceilings={"n": 3})) == 0
    assert flow.get("p", "new") is None
    flow.transact([Put("p", "k", {})])
    assert conflict_index(flow, Increment("p", "k", {"n": 4}, ceilings={"n": 3})) == 0
    flow.transact([Increment("p", "k", {"n": 3}, ceilings={"n": 3})])
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 3}, 2)


def test_a_floor_refuses_an_increment_below_it_and_writes_nothing(flow: FlowItems) -> None:
    assert conflict_index(flow, Increment("p", "k", {"n": -1}, floors={"n": 0})) == 0
    assert flow.get("p", "k") is None
    flow.transact([Increment("p", "k", {"n": 1}, floors={"n": 0})])
    assert conflict_index(flow, Increment("p", "k", {"n": -2}, floors={"n": 0})) == 0
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 1}, 1)
    flow.transact([Increment("p", "k", {"n": -1}, floors={"n": 0})])  # exactly the floor
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 0}, 2)
    flow.transact([Increment("p", "k", {"m": 2}, floors={"m": 1})])  # absent: 0 + 2 >= 1
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 0, "m": 2}, 3)


def test_an_increment_at_an_expected_version(flow: FlowItems) -> None:
    assert conflict_index(flow, Increment("p", "k", {"n": 1}, expected_version=1)) == 0
    assert flow.get("p", "k") is None
    flow.transact([Increment("p", "k", {"n": 1})])
    flow.transact([Increment("p", "k", {"n": 1})])
    assert conflict_index(flow, Increment("p", "k", {"n": 1}, expected_version=1)) == 0
    flow.transact([Increment("p", "k", {"n": 1}, expected_version=2)])
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 3}, 3)


def test_an_increment_sets_an_expiry_or_keeps_the_one_there_is(flow: FlowItems) -> None:
    flow.transact([Increment("p", "k", {"n": 1}, expires_at_s=START_S + 60)])
    flow.transact([Increment("p", "k", {"n": 1})])
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 2}, 2, START_S + 60)
    flow.transact([Increment("p", "k", {"n": 1}, expires_at_s=START_S + 120)])
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 3}, 3, START_S + 120)


# -- query ----------------------------------------------------------------------------------


@pytest.fixture
def filled(flow: FlowItems) -> FlowItems:
    for key in ["b1", "a2", "c", "a1", "b2", "a3", "b"]:
        flow.transact([Put("p", key, {"key": key})])
    flow.transact([Put("elsewhere", "a0", {})])
    return flow


def test_a_query_returns_the_partitions_items_in_key_order(filled: FlowItems) -> None:
    assert keys(filled.query("p")) == ["a1", "a2", "a3", "b", "b1", "b2", "c"]
    assert keys(filled.query("p", descending=True)) == ["c", "b2", "b1", "b", "a3", "a2", "a1"]
    assert filled.query("p")[0] == FlowItem("p", "a1", {"key": "a1"}, {}, 1)
    assert filled.query("nothing") == []


def test_a_query_by_prefix(filled: FlowItems) -> None:
    assert keys(filled.query("p", prefix="a")) == ["a1", "a2", "a3"]
    assert keys(filled.query("p", prefix="b", descending=True)) == ["b2", "b1", "b"]
    assert keys(filled.query("p", prefix="b1")) == ["b1"]
    assert keys(filled.query("p", prefix="d")) == []
    assert keys(filled.query("p", prefix="a", descending=True, limit=2)) == ["a3", "a2"]


def test_a_query_after_a_key_in_both_directions(filled: FlowItems) -> None:
    assert keys(filled.query("p", after="b")) == ["b1", "b2", "c"]
    assert keys(filled.query("p", after="a", descending=False)) == [
        "a1",
        "a2",
        "a3",
        "b",
        "b1",
        "b2",
        "c",
    ]
    assert keys(filled.query("p", after="b", descending=True)) == ["a3", "a2", "a1"]
    assert keys(filled.query("p", after="c")) == []
    assert keys(filled.query("p", after="a1", descending=True)) == []


def test_a_query_after_a_key_within_a_prefix(filled: FlowItems) -> None:
    assert keys(filled.query("p", prefix="a", after="a1")) == ["a2", "a3"]
    assert keys(filled.query("p", prefix="b", after="a9")) == ["b", "b1", "b2"]
    assert keys(filled.query("p", prefix="a", after="a3")) == []
    assert keys(filled.query("p", prefix="a", after="a2", descending=True)) == ["a1"]
    assert keys(filled.query("p", prefix="a", after="z", descending=True)) == ["a3", "a2", "a1"]
    assert keys(filled.query("p", prefix="b", after="b", descending=True)) == []
    assert keys(filled.query("p", prefix="b", after="a", descending=True)) == []


def test_a_query_pages_by_limit(filled: FlowItems) -> None:
    first = filled.query("p", limit=3)
    assert keys(first) == ["a1", "a2", "a3"]
    second = filled.query("p", limit=3, after=first[-1].key)
    assert keys(second) == ["b", "b1", "b2"]
    assert keys(filled.query("p", limit=3, after=second[-1].key)) == ["c"]
    assert keys(filled.query("p", limit=2, descending=True, after="b1")) == ["b", "a3"]
    assert filled.query("p", limit=0) == []


def test_a_query_reads_on_over_many_store_pages(flow: FlowItems) -> None:
    for i in range(9):
        flow.transact([Put("p", f"k{i}", {})])
    assert keys(flow.query("p", limit=7)) == [f"k{i}" for i in range(7)]
    assert keys(flow.query("p", limit=50, prefix="k", descending=True)) == [
        f"k{i}" for i in reversed(range(9))
    ]


# -- transactions ---------------------------------------------------------------------------


def test_a_transaction_writes_all_or_nothing(flow: FlowItems) -> None:
    flow.transact([Put("p", "taken", {"v": 1}), Increment("p", "n", {"n": 5})])
    index = conflict_index(
        flow,
        Put("p", "new", {}),
        Increment("p", "n", {"n": 1}),
        Delete("p", "taken"),
        Put("p", "other", {"v": 2}, expected_version=7),
    )
    assert index == 3
    assert flow.get("p", "new") is None
    assert flow.get("p", "n") == FlowItem("p", "n", {}, {"n": 5}, 1)
    assert flow.get("p", "taken") == FlowItem("p", "taken", {"v": 1}, {}, 1)
    flow.transact(
        [
            Put("p", "new", {}),
            Increment("p", "n", {"n": 1}, ceilings={"n": 6}),
            Delete("p", "taken", expected_version=1),
            Check("q", "x", None),
        ]
    )
    assert keys(flow.query("p")) == ["n", "new"]
    assert flow.get("p", "n") == FlowItem("p", "n", {}, {"n": 6}, 2)


def test_a_refused_transaction_names_its_first_failing_write(flow: FlowItems) -> None:
    flow.transact([Put("p", "a", {}), Put("p", "b", {})])
    writes = (
        Put("p", "c", {}),
        Put("p", "a", {}),  # exists
        Increment("p", "d", {"n": 1}),
        Delete("p", "b", expected_version=9),
    )
    assert conflict_index(flow, *writes) == 1
    assert conflict_index(flow, *writes[2:]) == 1
    assert conflict_index(flow, Check("p", "z", 1), *writes) == 0
    assert flow.get("p", "c") is None
    assert flow.get("p", "d") is None


def test_the_writes_a_transaction_refuses_to_try(flow: FlowItems) -> None:
    with pytest.raises(ValueError, match="at least one"):
        flow.transact([])
    too_many = [Put("p", f"k{i}", {}) for i in range(MAX_WRITES + 1)]
    with pytest.raises(ValueError, match="at most"):
        flow.transact(too_many)
    with pytest.raises(ValueError, match="twice"):
        flow.transact([Put("p", "k", {}), Increment("p", "k", {"n": 1})])
    for bad in (
        Increment("p", "k", {"N": 1}),
        Increment("p", "k", {"n": 1}, ceilings={"1n": 3}),
        Increment("p", "k", {"n": 1}, floors={"n-x": 0}),
        Put("p", "k", {}, counters={"": 1}),
        Put("p", "k", {}, counters={"n" * 33: 1}),
    ):
        with pytest.raises(ValueError, match="counter name"):
            flow.transact([bad])
    assert flow.query("p") == []
    flow.transact([Put("p", f"k{i}", {}) for i in range(MAX_WRITES)])  # the most there may be
    assert len(flow.query("p")) == MAX_WRITES


# -- expiry ---------------------------------------------------------------------------------


def test_an_expired_item_is_absent_to_reads(flow: FlowItems, now: Now) -> None:
    flow.transact([Put("p", "a", {}, expires_at_s=START_S + 10)])
    flow.transact([Put("p", "b", {}, expires_at_s=START_S + 20)])
    flow.transact([Put("p", "c", {})])
    now.s = START_S + 9.5
    assert flow.get("p", "a") == FlowItem("p", "a", {}, {}, 1, START_S + 10)
    assert keys(flow.query("p")) == ["a", "b", "c"]
    now.s = START_S + 10
    assert flow.get("p", "a") is None
    assert keys(flow.query("p")) == ["b", "c"]
    assert keys(flow.query("p", limit=1)) == ["b"]
    assert keys(flow.query("p", descending=True)) == ["c", "b"]
    now.s = START_S + 20
    assert keys(flow.query("p", limit=1)) == ["c"]


def test_an_expired_item_is_absent_to_conditions(flow: FlowItems, now: Now) -> None:
    flow.transact([Put("p", "k", {"old": True}, counters={"n": 1}, expires_at_s=START_S + 10)])
    now.s = START_S + 10
    assert conflict_index(flow, Put("p", "k", {}, expected_version=1)) == 0
    assert conflict_index(flow, Delete("p", "k")) == 0
    assert conflict_index(flow, Delete("p", "k", expected_version=1)) == 0
    assert conflict_index(flow, Check("p", "k", 1)) == 0
    flow.transact([Check("p", "k", None)])
    flow.transact([Put("p", "k", {"new": True})])
    assert flow.get("p", "k") == FlowItem("p", "k", {"new": True}, {}, 1, None)


def test_an_increment_over_an_expired_item_starts_a_fresh_one(flow: FlowItems, now: Now) -> None:
    flow.transact([Put("p", "k", {"old": True}, counters={"n": 3, "m": 1}, expires_at_s=START_S)])
    flow.transact([Increment("p", "w", {"n": 3}, expires_at_s=START_S + 5)])
    now.s = START_S + 5
    # Over the expired item, the stale count would be past the ceiling; a fresh one is not.
    flow.transact([Increment("p", "k", {"n": 2}, ceilings={"n": 3})])
    assert flow.get("p", "k") == FlowItem("p", "k", {}, {"n": 2}, 1, None)
    assert conflict_index(flow, Increment("p", "w", {"n": 1}, expected_version=1)) == 0
    assert conflict_index(flow, Increment("p", "w", {"n": 4}, ceilings={"n": 3})) == 0
    assert flow.get("p", "w") is None
    # In a transaction too, and a later write's refusal still writes nothing.
    flow.transact([Put("p", "x", {}), Increment("p", "w", {"n": 1}, expires_at_s=START_S + 9)])
    assert flow.get("p", "w") == FlowItem("p", "w", {}, {"n": 1}, 1, START_S + 9)
    now.s = START_S + 9
    index = conflict_index(
        flow, Increment("p", "w", {"n": 1}), Put("p", "x", {}, expected_version=5)
    )
    assert index == 1
    assert flow.get("p", "w") is None


# -- the journals' flow items ---------------------------------------------------------------


def test_every_journal_keeps_one_flow_items(journal: JournalStore) -> None:
    flow = journal.flow_items()
    assert isinstance(flow, FlowItems)
    assert journal.flow_items() is flow
    flow.transact([Increment("runs", "slots", {"used": 1}, ceilings={"used": 1})])
    assert journal.flow_items().get("runs", "slots") == FlowItem(
        "runs", "slots", {}, {"used": 1}, 1
    )
    assert conflict_index(flow, Increment("runs", "slots", {"used": 1}, ceilings={"used": 1})) == 0


def test_a_parked_runs_store_passes_the_flow_items_on(journal: JournalStore) -> None:
    header = RunHeader(
        run_id="r-1",
        agent="a",
        versions={},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=0,
        updated_at_ms=0,
        input_hash="",
    )
    assert WriteTally(journal, RunSnapshot(header, [], [])).flow_items() is journal.flow_items()
    with pytest.raises(ParkedRunAbandonedError, match="flow_items"):
        REFUSING_STORE.flow_items()


def test_sqlite_flow_items_live_in_the_journals_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with SqliteJournal(path) as journal:
        journal.flow_items().transact([Put("p", "k", {"x": 1}, counters={"n": 2})])
    with SqliteJournal(path) as reopened:
        assert reopened.flow_items().get("p", "k") == FlowItem("p", "k", {"x": 1}, {"n": 2}, 1)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_sqlite_writers_racing_for_slots_get_only_as_many_as_there_are(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with SqliteJournal(path) as first, SqliteJournal(path) as second:
        won: list[int] = []
        lost: list[int] = []

        def take(journal: SqliteJournal, who: int) -> None:
            slot = Increment("p", "slots", {"used": 1}, ceilings={"used": 5})
            for _ in range(4):
                try:
                    journal.flow_items().transact([slot])
                except FlowConflictError:
                    lost.append(who)
                else:
                    won.append(who)

        threads = [
            threading.Thread(target=take, args=(journal, i))
            for i, journal in enumerate([first, second, first, second])
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert (len(won), len(lost)) == (5, 11)
        assert second.flow_items().get("p", "slots") == FlowItem("p", "slots", {}, {"used": 5}, 5)


def test_dynamodb_flow_items_layout(dynamodb_journal: DynamoDBJournal, now: Now) -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    flow = DynamoDBFlowItems(client, "journal", now_s=now)
    flow.transact([Put("p", "k", {"b": 1, "a": 2}, counters={"n": 2}, expires_at_s=FAR)])
    flow.transact([Increment("p", "k", {"n": 1, "m": 4})])
    key = {"pk": {"S": "FLOW#p"}, "sk": {"S": "k"}}
    item = client.get_item(TableName="journal", Key=key, ConsistentRead=True)["Item"]
    assert item == {
        **key,
        "v": {"N": "2"},
        "d": {"S": '{"a": 2, "b": 1}'},
        "c_n": {"N": "3"},
        "c_m": {"N": "4"},
        "ttl": {"N": str(FAR)},
    }
    # The journal's own flow items use the same table.
    assert dynamodb_journal.flow_items().get("p", "k") is not None
