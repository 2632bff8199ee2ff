"""Retention (issue 13 item 6, ADR 0012): a finished run and all it wrote expire (both journals).

On DynamoDB, expiry is DynamoDB TTL, which moto does not run: ``expire`` here deletes what TTL
would (every item whose ``ttl`` has passed), so an item left without one is still there after
and the test sees it. The in-memory journal's ``expire`` is its own.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from durable_agents.core.ids import wait_id
from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    Entry,
    EntryType,
    OpKind,
    RunChange,
    RunHeader,
    RunStatus,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.errors import RunNotFoundError, WaitNotFoundError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.retention import DAY_S, DEFAULT_RETENTION_S, LATE_WRITE_GRACE_MS
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents.journal.store import JournalStore, input_hash

START, FINISH = 1_000_000, 2_000_500
ACTIVE = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED})


def header(run_id: str, *, retention_s: int | None = 7 * DAY_S, key: str | None = "k") -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent="flow",
        versions={"workflow_version": "1"},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=START,
        updated_at_ms=START,
        idempotency_key=key,
        input_hash=input_hash("flow", "null"),
        retention_s=retention_s,
    )


def entry(run_id: str, n: int, kind: OpKind = OpKind.STEP, value: str = '"ok"') -> Entry:
    op_id = f"{run_id}:s:{n}"
    return Entry(
        run_id=run_id,
        position=f"{n:08d}",
        op_id=op_id,
        kind=kind,
        name="s",
        type=EntryType.SUCCEEDED,
        attempt=0,
        value=value,
        recorded_at_ms=START + n,
    )


def approval(run_id: str) -> WaitRecord:
    op_id = f"{run_id}:s:2"  # the approval entry's op id: its public id derives from it
    return WaitRecord(
        wait_id=wait_id("apr", op_id),
        kind="approval",
        run_id=run_id,
        position="00000002",
        operation_id=op_id,
        name="s",
        status=WaitStatus.PENDING,
        created_at_ms=START,
        updated_at_ms=START,
    )


def effect(run_id: str) -> SideEffectRecord:
    op_id = f"{run_id}:s:3"
    return SideEffectRecord(
        run_id=run_id,
        position="00000003",
        operation_id=op_id,
        tool="ping",
        tool_schema_version="1",
        canonical_request="{}",
        idempotency_key=op_id,
        status=EffectStatus.PREPARED,
        attempt=1,
        prepared_at_ms=START,
        updated_at_ms=START,
        lease_expires_at_ms=START,
        stale_at_ms=START + 10,
    )


def a_run_with_everything(journal: JournalStore, run_id: str, **extra: Any) -> None:
    journal.create_run(header(run_id, **extra))
    journal.commit(run_id, [entry(run_id, 1)])
    journal.commit(run_id, [entry(run_id, 2, OpKind.APPROVAL)], wait=WaitChange(approval(run_id)))
    journal.commit(run_id, [], effect=EffectChange(effect(run_id)))
    # A value too large to stay inline: spilled to S3 on DynamoDB.
    journal.commit(run_id, [entry(run_id, 4, value='"' + "x" * 360_000 + '"')])


def finish(journal: JournalStore, run_id: str, status: RunStatus = RunStatus.SUCCEEDED) -> None:
    journal.commit(
        run_id, [], RunChange(expected=ACTIVE, status=status, updated_at_ms=FINISH, result="1")
    )


def expire(journal: JournalStore, now_ms: int) -> None:
    if isinstance(journal, (InMemoryJournal, SqliteJournal)):
        journal.expire(now_ms)
        return
    client = boto3.client("dynamodb", region_name="us-east-1")
    for item in _items(client):
        if "ttl" in item and int(item["ttl"]["N"]) * 1000 <= now_ms:
            client.delete_item(TableName="journal", Key={"pk": item["pk"], "sk": item["sk"]})


def _items(client: Any) -> list[dict[str, Any]]:
    return list(client.scan(TableName="journal", ConsistentRead=True).get("Items", []))


def stamp_all(journal: JournalStore, now_ms: int) -> int:
    stamped = 0
    for listed in journal.expiring_runs_page(now_ms).items:
        stamped += journal.stamp_expiry(listed.run_id, now_ms)
    return stamped


@pytest.mark.parametrize("status", [s for s in RunStatus if s.terminal])
def test_the_finishing_write_sets_the_expiry(journal: JournalStore, status: RunStatus) -> None:
    journal.create_run(header("run-1"))
    journal.create_run(header("run-2", retention_s=None, key=None))  # from before retention
    finish(journal, "run-1", status)
    finish(journal, "run-2", status)
    assert journal.get_run("run-1").expires_at_ms == (FINISH // 1000 + 7 * DAY_S) * 1000
    assert journal.get_run("run-2").expires_at_ms == (FINISH // 1000 + DEFAULT_RETENTION_S) * 1000


def test_every_item_of_a_finished_run_expires_with_it(journal: JournalStore) -> None:
    a_run_with_everything(journal, "run-1")
    finish(journal, "run-1")
    expires = journal.get_run("run-1").expires_at_ms
    assert expires is not None
    assert [h.run_id for h in journal.expiring_runs_page(FINISH - 1).items] == []
    assert [h.run_id for h in journal.expiring_runs_page(FINISH).items] == ["run-1"]
    stamp_all(journal, FINISH)
    # A second pass, later, for writes that land late; then the run leaves the listing.
    assert journal.expiring_runs_page(FINISH + LATE_WRITE_GRACE_MS - 1).items == []
    stamp_all(journal, FINISH + LATE_WRITE_GRACE_MS)
    assert journal.expiring_runs_page(expires * 2).items == []
    expire(journal, expires - 1)
    assert journal.load("run-1").header.status is RunStatus.SUCCEEDED
    expire(journal, expires)
    with pytest.raises(RunNotFoundError):
        journal.load("run-1")
    with pytest.raises(WaitNotFoundError):
        journal.get_wait(approval("run-1").wait_id)
    # The idempotency key is free again: a new run, not the expired one.
    again, created = journal.create_run(header("run-again"))
    assert created and again.run_id == "run-again"
    if isinstance(journal, DynamoDBJournal):
        client = boto3.client("dynamodb", region_name="us-east-1")
        assert [i for i in _items(client) if "run-1" in str(i)] == []


def test_a_run_that_has_not_finished_never_expires(journal: JournalStore) -> None:
    a_run_with_everything(journal, "run-1")
    journal.commit(
        "run-1",
        [],
        RunChange(
            expected=ACTIVE, status=RunStatus.SUSPENDED, updated_at_ms=FINISH, wake_at_ms=None
        ),
    )
    assert journal.get_run("run-1").expires_at_ms is None
    assert journal.expiring_runs_page(10**13 - 1).items == []
    assert journal.stamp_expiry("run-1", 10**13 - 1) == 0
    expire(journal, 10**13 - 1)
    assert len(journal.load("run-1").entries) == 3


def test_a_write_landing_after_the_finish_expires_too(journal: JournalStore) -> None:
    a_run_with_everything(journal, "run-1")
    finish(journal, "run-1")
    stamp_all(journal, FINISH)
    journal.commit("run-1", [entry("run-1", 9)])  # a zombie invocation's late entry
    stamp_all(journal, FINISH + LATE_WRITE_GRACE_MS)
    expires = journal.get_run("run-1").expires_at_ms
    assert expires is not None
    expire(journal, expires)
    with pytest.raises(RunNotFoundError):
        journal.load("run-1")
    if isinstance(journal, DynamoDBJournal):
        client = boto3.client("dynamodb", region_name="us-east-1")
        assert [i["sk"]["S"] for i in _items(client) if "run-1" in str(i)] == []


def test_stamping_twice_or_early_is_harmless(journal: JournalStore) -> None:
    a_run_with_everything(journal, "run-1")
    assert journal.stamp_expiry("run-1", FINISH) == 0  # not finished: nothing
    finish(journal, "run-1")
    assert journal.stamp_expiry("run-1", FINISH - 1) == 0  # not due yet
    journal.stamp_expiry("run-1", FINISH)
    assert journal.stamp_expiry("run-1", FINISH) == 0  # the first pass is done
    assert journal.stamp_expiry("run-1", FINISH + LATE_WRITE_GRACE_MS) == 0  # nothing new
    assert journal.stamp_expiry("run-1", FINISH + LATE_WRITE_GRACE_MS) == 0
    assert journal.expiring_runs_page(10**13 - 1).items == []
    assert journal.stamp_expiry("run-missing", FINISH) == 0


def test_on_dynamodb_every_item_and_payload_carries_the_ttl(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    journal = dynamodb_journal
    a_run_with_everything(journal, "run-1")
    finish(journal, "run-1")
    client = boto3.client("dynamodb", region_name="us-east-1")
    owned = [i for i in _items(client) if "run-1" in str(i)]
    # Header, its listing item and echo, 3 entries, a side effect, the wait record, the
    # idempotency key.
    assert len(owned) == 9
    # The finishing write's; the header echo's own (it outlives its last write by 30 days).
    assert [i["sk"]["S"] for i in owned if "ttl" in i] == ["#RUN", "J$RUN"]
    stamped = journal.stamp_expiry("run-1", FINISH)
    ttl = str(FINISH // 1000 + 7 * DAY_S)
    assert {i["sk"]["S"]: i.get("ttl", {}).get("N") for i in _items(client)} == {
        "#RUN": ttl,
        "#LIST": ttl,
        "J#00000001|~": ttl,
        "J#00000002|~": ttl,
        "J#00000004|~": ttl,
        "S#00000003": ttl,
        "#WAIT": ttl,
        "#IDEM": ttl,
        "J$RUN": ttl,
    }
    s3 = boto3.client("s3", region_name="us-east-1")
    objects = s3.list_objects_v2(Bucket="payloads", Prefix="runs/run-1/")["Contents"]
    assert len(objects) == 1
    tags = s3.get_object_tagging(Bucket="payloads", Key=objects[0]["Key"])["TagSet"]
    assert tags == [{"Key": "retention-days", "Value": "14"}]  # 7 days kept + its life
    assert stamped == 9  # 8 items (the echo and listing item included) and 1 spilled payload
