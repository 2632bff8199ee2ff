"""The journal's per-item spilling rules, on the store API (both backends where they apply)."""

from __future__ import annotations

import json
from typing import Any

from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    EntryType,
    ErrorInfo,
    RunChange,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.item_size import TRANSACTION_LIMIT_BYTES, item_size
from durable_agents.journal.store import JournalStore
from tests.contract.test_item_size import assert_every_item_fits, stored_items, text
from tests.contract.test_journal_contract import ACTIVE, entry, header

KB = 1000


def test_every_mix_of_large_header_values_fits(journal: JournalStore) -> None:
    # The header is updated without being read: input, error and result of 140 KB each must
    # never add up in one item (3 x 140 KB is over DynamoDB's 400 KB).
    input_json = json.dumps(text(140 * KB, "i"))
    journal.create_run(header(input_json=input_json))
    error = ErrorInfo(type="Boom", message=text(140 * KB, "e"))
    journal.commit(
        "run-1",
        [],
        RunChange(expected=ACTIVE, status=RunStatus.PAUSED, updated_at_ms=2, error=error),
    )
    running = frozenset({RunStatus.PAUSED})
    journal.commit(
        "run-1", [], RunChange(expected=running, status=RunStatus.RUNNING, updated_at_ms=3)
    )
    result = json.dumps(text(140 * KB, "r"))
    journal.commit(
        "run-1",
        [],
        RunChange(expected=ACTIVE, status=RunStatus.SUCCEEDED, updated_at_ms=4, result=result),
    )
    stored = journal.get_run("run-1")
    assert (stored.input, stored.error, stored.result) == (input_json, error, result)
    assert_every_item_fits(journal)


def test_a_transaction_of_many_large_items_stays_under_4_mb(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    journal = dynamodb_journal
    sent: list[list[dict[str, Any]]] = []
    client = journal._client.raw  # the boto3 client behind the infrastructure guard
    original = client.transact_write_items

    def recording(**kwargs: Any) -> Any:
        sent.append(kwargs["TransactItems"])
        return original(**kwargs)

    journal.create_run(header())
    client.transact_write_items = recording
    entries = [
        entry(f"{i:08d}", value=json.dumps(text(300 * KB, str(i % 10))), name=f"e{i}")
        for i in range(1, 16)
    ]
    done = RunChange(expected=ACTIVE, status=RunStatus.SUCCEEDED, updated_at_ms=3, result='"ok"')
    journal.commit("run-1", entries, done)
    (transaction,) = sent
    header_item = next(i for i in stored_items(journal) if i["sk"]["S"] == "#RUN")
    puts = sum(item_size(t["Put"]["Item"]) for t in transaction if "Put" in t)
    assert puts + item_size(header_item) < TRANSACTION_LIMIT_BYTES
    assert journal.load("run-1").entries == entries
    assert_every_item_fits(journal)


def _effect(request: str, result: str | None) -> SideEffectRecord:
    return SideEffectRecord(
        run_id="run-1",
        position="00000001",
        operation_id="run-1:pay:1",
        tool="pay",
        tool_schema_version="1",
        canonical_request=request,
        idempotency_key="run-1:pay:1",
        status=EffectStatus.PREPARED if result is None else EffectStatus.COMMITTED,
        attempt=1,
        prepared_at_ms=1,
        updated_at_ms=1,
        lease_expires_at_ms=2,
        stale_at_ms=2,
        result=result,
    )


def test_only_the_largest_values_are_spilled(dynamodb_journal: DynamoDBJournal) -> None:
    journal = dynamodb_journal
    journal.create_run(header())
    request, result = json.dumps(text(190 * KB, "q")), json.dumps(text(210 * KB, "r"))
    prepared = _effect(request, None)
    journal.commit("run-1", [], None, EffectChange(prepared))
    committed = _effect(request, result)
    journal.commit(
        "run-1", [], None, EffectChange(committed, frozenset({EffectStatus.PREPARED}), 1)
    )
    (item,) = [i for i in stored_items(journal) if i["sk"]["S"].startswith("S#")]
    assert "result_ref" in item and "result" not in item  # one S3 object is enough
    assert item["canonical_request"]["S"] == request
    assert journal.get_effect("run-1", "00000001") == committed
    assert_every_item_fits(journal)


def test_items_written_under_the_per_value_rule_read_back(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    # Before items were measured whole, values up to 350 KB were inline and errors never spilled.
    journal = dynamodb_journal
    client = journal._client
    old_input = json.dumps(text(300 * KB, "i"))
    item = journal._items.header_item(header())
    item["input"] = {"S": old_input}
    item["error"] = {"S": json.dumps({"type": "Boom", "message": "m", "module": ""})}
    client.put_item(TableName="journal", Item=item)
    old_entry = entry(type_=EntryType.FAILED, value=json.dumps(text(340 * KB, "v")))
    raw = journal._items.entry_item(entry(type_=EntryType.FAILED, value=None))
    raw["value"] = {"S": old_entry.value}
    raw["error"] = {"S": json.dumps({"type": "Boom", "message": "m", "module": ""})}
    client.put_item(TableName="journal", Item=raw)
    snapshot = journal.load("run-1")
    assert snapshot.header.input == old_input
    assert snapshot.header.error == ErrorInfo(type="Boom", message="m")
    assert snapshot.entries[0].value == old_entry.value
    assert snapshot.entries[0].error == ErrorInfo(type="Boom", message="m")
