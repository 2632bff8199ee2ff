"""The header echo (ADR 0019) on moto: a warm load reads the tail alone while the header it
keeps is current, and reads the header whenever anything else changed it.

Every case compares the warm load with a whole read of the partition (``cold``): a trusted
echo must never show a header older than the table's.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from durable_agents.aws.settings import Settings
from durable_agents.core.models import RunChange, RunSnapshot, RunStatus
from durable_agents.errors import ConfigurationError, RunRevisionConflictError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.dynamodb_items import HEADER_SK
from durable_agents.journal.header_echo import HEADER_ECHO_SK, echo_put, new_token
from tests.unit.tail_journal import RUN, RUNNING_ONLY, client, cold, same, start, steps

__all__ = ["client"]  # the moto table fixture


def warm(client: Any, **options: Any) -> DynamoDBJournal:
    """A container that read the run once (a whole read), as a StepRunner's next invocation."""
    store = DynamoDBJournal(client, "journal", tail_reads=True, **options)
    store.load(RUN)
    return store


def requests(snapshot: RunSnapshot) -> int:
    assert snapshot.read is not None and snapshot.read.warm
    return snapshot.read.requests


def item_key(sk: str) -> dict[str, Any]:
    return {"pk": {"S": f"RUN#{RUN}"}, "sk": {"S": sk}}


def echo_item(client: Any) -> dict[str, Any]:
    return dict(client.get_item(TableName="journal", Key=item_key(HEADER_ECHO_SK))["Item"])


def edit_header(client: Any, expression: str, **values: Any) -> None:
    """Changes the header as a writer from before echoes would (the echo untouched)."""
    args: dict[str, Any] = {"ExpressionAttributeValues": values} if values else {}
    client.update_item(
        TableName="journal", Key=item_key(HEADER_SK), UpdateExpression=expression, **args
    )


def cancel_request(at_ms: int) -> RunChange:
    return RunChange(RUNNING_ONLY, RunStatus.RUNNING, at_ms, cancel_requested={"reason": "stop"})


def test_an_unchanged_header_costs_no_read_of_its_own(client: Any) -> None:
    start(DynamoDBJournal(client, "journal"))
    steps(DynamoDBJournal(client, "journal"), 1, 2)
    store = warm(client)
    steps(store, 3, 1)

    snapshot = store.load(RUN)

    assert requests(snapshot) == 1  # the tail's Query, the echo in it
    same(snapshot, cold(client))


def test_a_header_another_writer_changed_is_read_again(client: Any) -> None:
    start(DynamoDBJournal(client, "journal"))
    store = warm(client)
    other = DynamoDBJournal(client, "journal")
    other.commit(RUN, [], cancel_request(7))  # a stop request through the Api

    snapshot = store.load(RUN)

    # The echo holds another token: the tail read is dropped, the header read, the tail again.
    assert requests(snapshot) == 3
    assert snapshot.header.cancel_requested == {"reason": "stop"}
    same(snapshot, cold(client))
    # And trusted again from there on.
    steps(other, 1, 1)
    again = store.load(RUN)
    assert requests(again) == 1
    same(again, cold(client))


def test_after_its_own_header_change_a_process_reads_the_header_first(client: Any) -> None:
    start(DynamoDBJournal(client, "journal"))
    store = warm(client)
    store.commit(RUN, [], cancel_request(7))

    snapshot = store.load(RUN)

    assert requests(snapshot) == 2  # the header's GetItem, the tail's Query: nothing wasted
    same(snapshot, cold(client))


def test_an_echo_whose_header_change_failed_is_never_trusted(client: Any) -> None:
    start(DynamoDBJournal(client, "journal"))
    store = warm(client)
    stale = RunChange(RUNNING_ONLY, RunStatus.RUNNING, 7, expected_revision=5, waiting_on={"x": 1})
    with pytest.raises(RunRevisionConflictError):
        DynamoDBJournal(client, "journal").commit(RUN, [], stale)  # its echo landed first

    snapshot = store.load(RUN)

    assert requests(snapshot) == 3
    same(snapshot, cold(client))
    # The echo still holds no header's token: the header is read first from now on (as
    # before echoes), until a header change writes a matching one.
    assert requests(store.load(RUN)) == 2
    store.commit(RUN, [], cancel_request(8))
    store.load(RUN)
    assert requests(store.load(RUN)) == 1
    same(store.load(RUN), cold(client))


def test_a_run_from_before_echoes_is_read_header_first(client: Any) -> None:
    start(DynamoDBJournal(client, "journal"))
    client.delete_item(TableName="journal", Key=item_key(HEADER_ECHO_SK))
    edit_header(client, "REMOVE echo")
    store = warm(client)
    steps(store, 1, 1)

    snapshot = store.load(RUN)

    assert requests(snapshot) == 2
    same(snapshot, cold(client))


def test_a_late_start_echo_never_overwrites_a_later_one(client: Any) -> None:
    start(DynamoDBJournal(client, "journal"))
    DynamoDBJournal(client, "journal").commit(RUN, [], cancel_request(7))
    current = echo_item(client)
    with pytest.raises(ClientError):  # what a delayed start's echo Put meets
        client.put_item(**echo_put("journal", RUN, new_token(), 1, only_if_absent=True))
    assert echo_item(client) == current


def test_with_echo_reads_off_every_warm_load_reads_the_header(client: Any) -> None:
    start(DynamoDBJournal(client, "journal"))
    store = warm(client, header_echo_reads=False)
    # A writer from before echoes: changes the header, not the echo.
    edit_header(
        client,
        "SET cancel_requested = :c, revision = revision + :one",
        **{":c": {"S": '{"reason": "old"}'}, ":one": {"N": "1"}},
    )

    snapshot = store.load(RUN)

    assert requests(snapshot) == 2
    assert snapshot.header.cancel_requested == {"reason": "old"}
    same(snapshot, cold(client))


def test_a_small_journal_is_read_whole_unless_the_header_echo_is_trusted(client: Any) -> None:
    store = DynamoDBJournal(client, "journal", header_echo_reads=False)
    start(store)
    steps(store, 1, 3)
    store.load(RUN)
    steps(store, 4, 1)

    snapshot = store.load(RUN)

    # Under ~8 KB a whole read is one request and at most as many read units as the header's
    # GetItem and the tail's Query.
    assert snapshot.read is not None and not snapshot.read.warm
    assert snapshot.read.requests == 1

    trusting = DynamoDBJournal(client, "journal")
    trusting.load(RUN)
    steps(store, 5, 1)
    # With the echo, the tail alone: one request either way, and only the tail to decode.
    snapshot = trusting.load(RUN)
    assert snapshot.read is not None and snapshot.read.warm
    assert snapshot.read.requests == 1
    same(snapshot, cold(client))


@pytest.mark.parametrize(("value", "expected"), [(None, True), ("on", True), ("OFF", False)])
def test_header_echo_reads_setting(value: str | None, expected: bool) -> None:
    env = {"JOURNAL_TABLE": "j", "EVENT_BUS_NAME": "b"}
    if value is not None:
        env["HEADER_ECHO_READS"] = value
    assert Settings.from_env(env).header_echo_reads is expected


def test_header_echo_reads_setting_rejects_other_values() -> None:
    with pytest.raises(ConfigurationError, match="HEADER_ECHO_READS"):
        Settings.from_env({"JOURNAL_TABLE": "j", "EVENT_BUS_NAME": "b", "HEADER_ECHO_READS": "1"})
