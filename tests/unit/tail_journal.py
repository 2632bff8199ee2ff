"""The journal, entries and side-effect records the tail-read tests write (ADR 0015).

Shared by ``test_tail_reads`` and ``test_tail_reads_interleavings``: one run, ``RUN``, on the
table ``template.yaml`` declares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from durable_agents.core.models import (
    EffectStatus,
    Entry,
    EntryType,
    OpKind,
    RunHeader,
    RunSnapshot,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.template import create_journal_table

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
RUN = "r1"
RUNNING_ONLY = frozenset({RunStatus.RUNNING})


@pytest.fixture
def client(aws: None) -> Any:
    """A DynamoDB client on moto with the journal table created (import it as a fixture)."""
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    create_journal_table(dynamodb, "journal", TEMPLATE)
    return dynamodb


def journal(client: Any, tail_reads: bool | None = True) -> DynamoDBJournal:
    return DynamoDBJournal(client, "journal", tail_reads=tail_reads)


def start(store: DynamoDBJournal, created_at_ms: int = 1) -> None:
    header = RunHeader(
        run_id=RUN,
        agent="a",
        versions={"agent": "1"},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=created_at_ms,
        updated_at_ms=created_at_ms,
    )
    store.create_run(header)


def pos(*parts: int) -> str:
    return "/".join(f"{p:08d}" for p in parts)


def entry(position: str, type_: EntryType, attempt: int = 0, **fields: Any) -> Entry:
    if type_ in (EntryType.STARTED, EntryType.ATTEMPT_FAILED) and attempt == 0:
        attempt = 1
    return Entry(
        run_id=RUN,
        position=position,
        op_id=f"{RUN}:op:{position}",
        kind=fields.pop("kind", OpKind.STEP),
        name="op",
        type=type_,
        attempt=attempt,
        value=fields.pop("value", '"v"' if type_ is EntryType.SUCCEEDED else None),
        recorded_at_ms=5,
        **fields,
    )


def effect(
    position: str, status: EffectStatus, result: str | None = None, run_id: str = RUN
) -> SideEffectRecord:
    return SideEffectRecord(
        run_id=run_id,
        position=position,
        operation_id=f"{run_id}:ship:{position}",
        tool="ship",
        tool_schema_version="1",
        canonical_request='{"n":1}',
        idempotency_key=f"k-{position}",
        status=status,
        attempt=1,
        prepared_at_ms=1,
        updated_at_ms=2 if result else 1,
        lease_expires_at_ms=10,
        stale_at_ms=20,
        result=result,
    )


def steps(store: DynamoDBJournal, first: int, count: int, value: str = '"v"') -> None:
    """Plain steps ``first``…: a claim, then the result (two writes each, as the runtime)."""
    for p in range(first, first + count):
        store.commit(RUN, [entry(pos(p), EntryType.STARTED)])
        store.commit(RUN, [entry(pos(p), EntryType.SUCCEEDED, value=value)])


def cold(client: Any) -> RunSnapshot:
    """The run as a container that never saw it reads it: the whole partition."""
    return journal(client, tail_reads=False).load(RUN)


def same(warm: RunSnapshot, whole: RunSnapshot) -> None:
    assert warm.header == whole.header
    assert warm.entries == whole.entries
    assert warm.effects == whole.effects
