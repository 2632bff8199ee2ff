"""Loads hand out the entries they decoded before, so replay folds only what is new.

A journal entry is written once and never changed: each backend returns, for an entry it
already handed out, that very object (``durable_agents.engine.replay_index.WarmRecords`` relies on
it
to fold only new entries). What must never happen is an entry of another run coming back.
"""

from __future__ import annotations

import boto3
import pytest

from durable_agents import RunNotFoundError
from durable_agents.core.models import EntryType
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import JournalStore
from tests.contract.test_journal_contract import entry, header


def test_a_second_load_returns_the_same_entry_objects(journal: JournalStore) -> None:
    journal.create_run(header())
    journal.commit("run-1", [entry("00000001", EntryType.STARTED, attempt=1)])
    first = journal.load("run-1").entries
    journal.commit("run-1", [entry("00000001", EntryType.SUCCEEDED)])
    second = journal.load("run-1").entries
    assert len(second) == 2
    assert second[0] is first[0]  # decoded once
    assert second[1].type is EntryType.SUCCEEDED


def test_a_run_id_used_again_after_its_run_expired_is_a_new_journal(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    journal = dynamodb_journal
    journal.create_run(header(at=1_000))
    journal.commit("run-1", [entry("00000001", value='"old"')])
    assert journal.load("run-1").entries[0].value == '"old"'
    # Retention expired every item of the run (DynamoDB TTL deletes them one by one).
    client = boto3.client("dynamodb", region_name="us-east-1")
    items = client.query(
        TableName="journal",
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "RUN#run-1"}},
    )["Items"]
    for item in items:
        client.delete_item(TableName="journal", Key={"pk": item["pk"], "sk": item["sk"]})
    with pytest.raises(RunNotFoundError):
        journal.load("run-1")
    journal.create_run(header(at=9_000))
    journal.commit("run-1", [entry("00000001", value='"new"')])
    assert journal.load("run-1").entries[0].value == '"new"'
