"""A warm load costs work in proportion to what changed, not to the journal's length (ADR 0018).

Work is counted, never timed: Python lines run in the journal's code (``sys.settrace``), and
references taken to the entries (a copy of a journal takes one per entry, ``sys.getrefcount``).
Both must be the same for a short journal and a long one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import boto3
import pytest

from durable_agents.core.models import EffectChange, EffectStatus, EntryType
from durable_agents.engine.replay_index import WarmRecords
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore
from durable_agents_local.template import create_journal_table
from tests.contract.test_journal_contract import entry, header
from tests.contract.test_snapshot_stability_contract import record

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
PACKAGE = str(Path(__file__).resolve().parents[2] / "layers" / "runtime" / "durable_agents")


@pytest.fixture
def client(aws: None) -> Iterator[Any]:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    create_journal_table(dynamodb, "journal", TEMPLATE)
    yield dynamodb


T = TypeVar("T")


def lines_run(call: Callable[[], T]) -> tuple[T, int]:
    """What ``call`` returned, and how many lines of durable_agents it ran."""
    count = 0

    def trace(frame: FrameType, event: str, _: Any) -> Any:
        nonlocal count
        if not frame.f_code.co_filename.startswith(PACKAGE):
            return None
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        result = call()
    finally:
        sys.settrace(None)
    return result, count


def grow(journal: JournalStore, first: int, steps: int, *, effects: bool = False) -> None:
    """Steps ``first``…: a claim then the result; with ``effects``, a settled tool call each."""
    for p in range(first, first + steps):
        position = f"{p:08d}"
        journal.commit("run-1", [entry(position, EntryType.STARTED, attempt=1)])
        if effects:
            journal.commit(
                "run-1", [], effect=EffectChange(record(position, EffectStatus.PREPARED))
            )
            done = record(position, EffectStatus.COMMITTED, result='"ok"')
            prepared = frozenset({EffectStatus.PREPARED})
            journal.commit("run-1", [entry(position)], effect=EffectChange(done, prepared, 1))
        else:
            journal.commit("run-1", [entry(position)])


def warm_load_work(journal: JournalStore, steps: int, *, effects: bool) -> tuple[int, int, int]:
    """(lines run, references taken to the first entry, to the first record) by a warm load.

    The run has ``steps`` steps and was loaded after each of its last two; the load measured
    follows one more step, as an invocation's load follows the last one's step.
    """
    journal.create_run(header())
    grow(journal, 1, steps, effects=effects)
    kept = [journal.load("run-1")]
    grow(journal, steps + 1, 1, effects=effects)
    kept.append(journal.load("run-1"))
    grow(journal, steps + 2, 1, effects=effects)
    first_entry = kept[-1].entries[0]
    # (Not None: its count changes with everything.)
    first_record = kept[-1].effects[0] if effects else object()
    entry_refs, record_refs = sys.getrefcount(first_entry), sys.getrefcount(first_record)
    snapshot, lines = lines_run(lambda: journal.load("run-1"))
    kept.append(snapshot)
    assert len(snapshot.entries) == 2 * (steps + 2)
    assert snapshot.entries[0] is first_entry
    return (
        lines,
        sys.getrefcount(first_entry) - entry_refs,
        sys.getrefcount(first_record) - record_refs,
    )


def memory(_: Any) -> JournalStore:
    return InMemoryJournal()


def dynamodb(client: Any) -> JournalStore:
    return DynamoDBJournal(client, "journal", tail_reads=True)


@pytest.mark.parametrize("effects", [False, True], ids=["steps", "tool-calls"])
@pytest.mark.parametrize("store", [memory, dynamodb], ids=["memory", "dynamodb"])
def test_a_warm_load_does_the_same_work_whatever_the_journal_length(
    request: pytest.FixtureRequest, store: Callable[[Any], JournalStore], effects: bool
) -> None:
    client = request.getfixturevalue("client") if store is dynamodb else None
    # (Smaller on moto, whose writes slow down as its table grows.)
    sizes = (100, 1000) if client is None else (20, 120)
    small = warm_load_work(store(client), sizes[0], effects=effects)
    if client is not None:
        client.delete_table(TableName="journal")
        create_journal_table(client, "journal", TEMPLATE)
    large = warm_load_work(store(client), sizes[1], effects=effects)
    assert large[0] == small[0]  # Python lines: nothing walks the journal
    assert large[1:] == small[1:] == (0, 0)  # nothing copies it either


def test_a_warm_grouping_folds_only_the_entries_a_load_added() -> None:
    journal = InMemoryJournal()
    journal.create_run(header())
    grow(journal, 1, 500)
    warm = WarmRecords()
    warm.records("run-1", journal.load("run-1").entries, [])
    assert warm.folded == 1000
    grow(journal, 501, 1)
    snapshot = journal.load("run-1")
    records, lines = lines_run(lambda: warm.records("run-1", snapshot.entries, []))
    assert warm.folded == 1002
    assert len(records) == 501
    assert lines < 100
