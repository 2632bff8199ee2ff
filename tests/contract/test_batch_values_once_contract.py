"""A batch's branch values are serialized once and stored once (issue 29, defect 6).

Each branch of ``ctx.parallel`` / ``ctx.map`` records its own result; the batch record says which
branches succeeded or failed, not what they returned, so a serializer that offloads or encrypts
runs once per value, and a large map does not store its results twice. What a replay returns is
rebuilt from the branch records: the same values, types and errors as the first execution.
Both journals (in memory, and DynamoDB on moto).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

from durable_agents import NO_RETRY, AgentRegistry, DurableContext, agent
from durable_agents.core.models import EntryType
from durable_agents.engine.operations.parallel import BatchResult, CompletionPolicy
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, TestResult
from tests.contract.test_item_size import assert_every_item_fits

MARK = "counted:"
KB = 1000


class CountingSerdes:
    """A serializer that counts its calls per value and marks the text it writes."""

    def __init__(self) -> None:
        self.serialized: Counter[str] = Counter()
        self.deserialized: Counter[str] = Counter()
        self._lock = threading.Lock()

    def serialize(self, value: Any) -> str:
        with self._lock:
            self.serialized[json.dumps(value)] += 1
        return MARK + json.dumps(value)

    def deserialize(self, text: str) -> Any:
        value = json.loads(text.removeprefix(MARK))
        with self._lock:
            self.deserialized[json.dumps(value)] += 1
        return value


def texts(value: Any) -> list[str]:
    """The serialized texts of the branch values ``value`` (every one a branch returned)."""
    return [MARK + json.dumps(v) for v in value]


def recorded_values(journal: JournalStore, result: TestResult) -> list[tuple[str, str]]:
    """(kind, value) of every result entry the run recorded."""
    return [
        (str(e.kind), e.value or "")
        for e in journal.load(result.run_id).entries
        if e.type.is_result
    ]


def batch_record(result: TestResult, name: str) -> str:
    (entry,) = [e for e in result.operation(name).entries if e.type is EntryType.SUCCEEDED]
    return entry.value or ""


ITEMS = ["tea", "jam", "bread"]
VALUES = [{"item": item, "index": index} for index, item in enumerate(ITEMS)]


def mapper(serdes: CountingSerdes, nesting: str = "nested") -> Any:
    @agent(name="mapper", version="1", registry=AgentRegistry())
    def run(ctx: DurableContext, items: list[str]) -> list[Any]:
        def line(child: DurableContext, item: str, index: int) -> dict[str, Any]:
            stamp = child.step(lambda: index, name="stamp")
            return {"item": item, "index": stamp}

        batch = ctx.map(items, line, name="lines", item_serdes=serdes, nesting=nesting)  # type: ignore[arg-type]
        return batch.results()

    return run


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_a_map_serializes_each_branch_value_once_and_stores_it_once(
    journal: JournalStore, mode: str
) -> None:
    serdes = CountingSerdes()
    result = AgentTestRunner(mapper(serdes), journal=journal, mode=mode).run(ITEMS)  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED", result.error
    assert result.output == VALUES
    assert serdes.serialized == {json.dumps(v): 1 for v in VALUES}
    assert MARK not in batch_record(result, "lines")
    stored = [value for _, value in recorded_values(journal, result)]
    for text in texts(VALUES):
        assert stored.count(text) == 1, (text, stored)


def test_a_first_execution_deserializes_each_branch_value_once(journal: JournalStore) -> None:
    serdes = CountingSerdes()
    result = AgentTestRunner(mapper(serdes), journal=journal).run(ITEMS)
    assert result.status == "SUCCEEDED", result.error
    assert len(result.outcomes) == 1  # one invocation: everything ran for the first time
    assert serdes.deserialized == {json.dumps(v): 1 for v in VALUES}


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_a_parallel_serializes_each_branch_value_once_and_stores_it_once(
    journal: JournalStore, mode: str
) -> None:
    serdes = CountingSerdes()

    def branch(index: int) -> Any:
        return lambda child: {"branch": child.step(lambda: index, name="work")}

    @agent(name="fan", version="1", registry=AgentRegistry())
    def fan(ctx: DurableContext, _: Any) -> list[Any]:
        batch = ctx.parallel([branch(i) for i in range(3)], name="fan-out", item_serdes=serdes)
        return batch.results()

    result = AgentTestRunner(fan, journal=journal, mode=mode).run(None)  # type: ignore[arg-type]
    values = [{"branch": i} for i in range(3)]
    assert result.status == "SUCCEEDED", result.error
    assert result.output == values
    assert serdes.serialized == {json.dumps(v): 1 for v in values}
    assert MARK not in batch_record(result, "fan-out")
    stored = [value for _, value in recorded_values(journal, result)]
    assert all(stored.count(text) == 1 for text in texts(values)), stored


def test_a_flat_map_serializes_each_value_once_and_stores_it_in_the_batch_record_only(
    journal: JournalStore,
) -> None:
    """Flat branches have no record of their own: their values are stored in the batch's."""
    serdes = CountingSerdes()
    result = AgentTestRunner(mapper(serdes, "flat"), journal=journal).run(ITEMS)
    assert result.status == "SUCCEEDED", result.error
    assert result.output == VALUES
    assert serdes.serialized == {json.dumps(v): 1 for v in VALUES}
    record = batch_record(result, "lines")
    stored = [value for _, value in recorded_values(journal, result)]
    for text in texts(VALUES):
        assert record.count(json.dumps(text)) == 1, record  # a string inside the record
        assert sum(value.count(json.dumps(text)) for value in stored) == 1


@dataclass(frozen=True)
class Line:
    item: str
    price: Decimal
    due: date
    tags: frozenset[str]


class OutOfStockError(Exception):
    """A branch failure the batch tolerates."""

    def __init__(self, item: str, left: int):
        super().__init__(f"{item}: {left} left")
        self.item = item
        self.left = left


def snapshot(batch: BatchResult[Any]) -> Any:
    """Everything a batch result says, with the types of its values."""
    return (
        batch.completion_reason,
        [(i.index, i.status, i.result, type(i.result), i.error) for i in batch.items],
    )


@pytest.mark.parametrize("with_serdes", [False, True])
def test_replays_rebuild_the_same_values_types_and_errors_as_the_first_execution(
    journal: JournalStore, with_serdes: bool
) -> None:
    seen: list[Any] = []
    serdes = CountingSerdes() if with_serdes else None

    @agent(name="stock", version="1", registry=AgentRegistry())
    def stock(ctx: DurableContext, items: list[str]) -> int:
        def line(child: DurableContext, item: str, index: int) -> Any:
            def count() -> int:
                if item == "jam":
                    raise OutOfStockError(item, 0)
                return index + 1

            left = child.step(count, name="count", retry=NO_RETRY)
            if serdes is not None:
                return {"item": item, "left": left}
            return Line(item, Decimal(left) / 4, date(2026, 1, left), frozenset({item}))

        batch = ctx.map(
            items,
            line,
            name="lines",
            item_serdes=serdes,
            completion=CompletionPolicy(tolerated_failure_count=1),
        )
        seen.append(snapshot(batch))
        ctx.step(lambda: None, name="after")  # one more invocation replays the batch
        return batch.failure_count

    result = AgentTestRunner(stock, journal=journal, mode="faithful").run(ITEMS)
    assert result.status == "SUCCEEDED", result.error
    assert result.output == 1
    assert len(seen) >= 2
    assert all(s == seen[0] for s in seen), seen
    reason, items = seen[0]
    assert reason == "all_completed"
    assert [status for _, status, *_ in items] == ["succeeded", "failed", "succeeded"]
    error = items[1][4]
    assert error["type"] == "OutOfStockError" and error["message"] == "jam: 0 left"
    if serdes is None:
        assert items[0][2] == Line("tea", Decimal("0.25"), date(2026, 1, 1), frozenset({"tea"}))
    else:
        assert serdes.serialized == {json.dumps(items[0][2]): 1, json.dumps(items[2][2]): 1}


class Quote(BaseModel):
    sku: str
    cents: int


def quote_tea(child: DurableContext) -> Quote:
    return Quote(sku="tea", cents=child.step(lambda: 250, name="price"))


def quote_jam(child: DurableContext) -> Quote:
    return Quote(sku="jam", cents=child.step(lambda: 400, name="price"))


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_annotated_branches_give_their_type_whichever_invocation_completes_the_batch(
    journal: JournalStore, mode: str
) -> None:
    """A branch is replayed as its child scope is (by its return annotation), so the batch
    gives the same types whether its branches finished in the invocation that records it or
    in earlier ones (before, the latter gave plain dicts)."""
    seen: list[Any] = []

    @agent(name="quotes", version="1", registry=AgentRegistry())
    def quotes(ctx: DurableContext, _: Any) -> list[str]:
        batch = ctx.parallel([quote_tea, quote_jam], name="quotes")
        seen.append(batch.results())
        ctx.step(lambda: None, name="after")
        return [type(r).__name__ for r in batch.results()]

    result = AgentTestRunner(quotes, journal=journal, mode=mode).run(None)  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED", result.error
    assert result.output == ["Quote", "Quote"]
    assert all(s == [Quote(sku="tea", cents=250), Quote(sku="jam", cents=400)] for s in seen)


def test_a_map_of_large_values_stores_them_inline_once_and_spills_nothing(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    """Three 150 KB values fit in their branch records (DynamoDB's 400 KB per item); a batch
    record that copied them (450 KB) had to spill to S3. Now nothing spills."""

    @agent(name="big-map", version="1", registry=AgentRegistry())
    def big_map(ctx: DurableContext, items: list[str]) -> list[int]:
        batch = ctx.map(items, lambda c, item, index: item * 150 * KB, name="big")
        return [len(value) for value in batch.results()]

    result = AgentTestRunner(big_map, journal=dynamodb_journal, mode="faithful").run(
        ["a", "b", "c"]
    )
    assert result.status == "SUCCEEDED", result.error
    assert result.output == [150 * KB] * 3
    assert len(batch_record(result, "big")) < 100
    s3 = boto3.client("s3", region_name="us-east-1")
    assert s3.list_objects_v2(Bucket="payloads").get("KeyCount", 0) == 0
    assert_every_item_fits(dynamodb_journal)
