"""Warm loads read the header and the journal's tail only, and equal a whole read (ADR 0015).

Everything runs on moto behind real boto3 clients. "Another container" is a second
``DynamoDBJournal`` on the same table (its own caches); a fresh instance that has never seen
the run reads it whole, which is what every warm load is compared with.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    EntryType,
    OpKind,
    RunChange,
    RunStatus,
)
from durable_agents.errors import EntryConflictError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.tail_cache import TailBounds, tail_bounds

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from bench_billing import Ledger, peek_client

from tests.unit.tail_journal import (
    RUN,
    RUNNING_ONLY,
    client,
    cold,
    effect,
    entry,
    journal,
    pos,
    same,
    start,
    steps,
)

__all__ = ["client"]  # the moto table fixture


# -- bounds --------------------------------------------------------------------------------


def test_bounds_start_at_the_first_top_level_position_without_a_result() -> None:
    entries = [
        entry(pos(1), EntryType.SUCCEEDED),
        entry(pos(2, 1), EntryType.SUCCEEDED),  # a branch of an open batch at 2
        entry(pos(3), EntryType.SUCCEEDED),
    ]
    # Inside it, past branch 1 (finished): branch 2 may still get entries.
    assert tail_bounds(entries) == TailBounds(f"J#{pos(2, 2)}", f"S#{pos(2, 2)}")


def test_bounds_after_the_last_result_when_every_position_has_one() -> None:
    entries = [
        entry(pos(1), EntryType.STARTED),
        entry(pos(1), EntryType.SUCCEEDED),
        entry(pos(2, 1), EntryType.SUCCEEDED),
        entry(pos(2), EntryType.SUCCEEDED),
        entry("~m00000001", EntryType.SUCCEEDED, kind=OpKind.MIGRATION),
    ]
    # Migrations sort after every operation: they never make the tail start after one.
    assert tail_bounds(entries) == TailBounds(f"J#{pos(2)}|~~", f"S#{pos(2)}|")
    assert f"J#{pos(2)}|~" < f"J#{pos(2)}|~~" < f"J#{pos(3)}|0001.0" < "J#~m00000002|~"
    assert f"S#{pos(2)}/00000001" < f"S#{pos(2)}|" < f"S#{pos(3)}"


def test_bounds_skip_the_finished_children_of_an_open_scope() -> None:
    entries = [
        entry(pos(1), EntryType.SUCCEEDED),
        entry(pos(2, 1, 1), EntryType.SUCCEEDED),
        entry(pos(2, 1), EntryType.SUCCEEDED),  # branch 1 of the batch at 2: finished
        entry(pos(2, 2, 1), EntryType.SUCCEEDED),  # branch 2: its first step done, ...
        entry(pos(2, 2, 2), EntryType.STARTED),  # ... its second running
        entry(pos(2, 4, 1), EntryType.SUCCEEDED),
        entry(pos(2, 4), EntryType.SUCCEEDED),  # branch 4 finished, branch 3 not begun
    ]
    first = tail_bounds(entries)
    assert first == TailBounds(f"J#{pos(2, 2, 2)}", f"S#{pos(2, 2, 2)}")

    # Next time: branch 2 finished; branch 3 has no entry yet and may get one any time.
    tail = [
        entry(pos(2, 2, 2), EntryType.SUCCEEDED),
        entry(pos(2, 2), EntryType.SUCCEEDED),
        entry(pos(2, 4, 1), EntryType.SUCCEEDED),
        entry(pos(2, 4), EntryType.SUCCEEDED),
    ]
    assert tail_bounds(tail, (), first) == TailBounds(f"J#{pos(2, 3)}", f"S#{pos(2, 3)}")
    # Branch 3 done too: the tail begins at branch 5 (which may not exist: the batch's own
    # result comes after its branches, so it is read too).
    later = [entry(pos(2, 3), EntryType.SUCCEEDED), *tail[2:]]
    assert tail_bounds(later, (), TailBounds(f"J#{pos(2, 3)}", "")) == TailBounds(
        f"J#{pos(2, 5)}", f"S#{pos(2, 5)}"
    )
    assert f"J#{pos(2, 5)}" < f"J#{pos(2)}|~"


def test_bounds_stay_inside_an_open_scope_the_tail_read_nothing_of() -> None:
    # The tail began at branch 3 of the batch at 1 (branches 1 and 2 finished, below it) and
    # read only later operations: the batch is still open (found by seed 124 of the fuzz).
    previous = TailBounds(f"J#{pos(1, 3)}", f"S#{pos(1, 3)}")
    tail = [entry(pos(2), EntryType.SUCCEEDED), entry(pos(3), EntryType.STARTED)]
    assert tail_bounds(tail, (), previous) == previous
    assert tail_bounds([], (), previous) == previous


def test_bounds_of_a_run_without_entries_read_everything() -> None:
    assert tail_bounds([]) == TailBounds("J#", "S#")


# -- reads per warm load -------------------------------------------------------------------


def warm_reads(client: Any, recorded: int) -> tuple[dict[str, int], float, int]:
    """Requests, read units and bytes of one warm load after ``recorded`` steps and a new one."""
    ledger = Ledger(peek_client())
    store = DynamoDBJournal(client, "journal")  # the default: tail reads when they pay
    ledger.attach(client)
    start(store)
    steps(store, 1, recorded, value='"' + "x" * 4000 + '"')
    store.load(RUN)  # the first load in this process: the whole partition
    steps(store, recorded + 1, 1)  # this invocation's step
    before = ledger.take()
    snapshot = store.load(RUN)
    after = ledger.take()
    assert snapshot.read is not None and snapshot.read.warm
    assert len(snapshot.entries) == 2 * (recorded + 1)
    requests = {op: n - before.requests[op] for op, n in after.requests.items()}
    return (
        {op: n for op, n in requests.items() if n},
        after.rru - before.rru,
        after.bytes_in - before.bytes_in,
    )


@pytest.mark.parametrize("recorded", [10, 100])
def test_a_warm_load_reads_the_same_whatever_the_journal_length(client: Any, recorded: int) -> None:
    requests, rru, bytes_in = warm_reads(client, recorded)

    # One Query of the tail, whose header echo says the header is unchanged (ADR 0019): 1 read
    # unit, a few hundred bytes, at 10 steps (~40 KB of journal) as at 100 (~400 KB; a whole
    # read: about 100 read units).
    assert requests == {"Query": 1}
    assert rru == 1
    assert bytes_in < 2_000


def test_read_tells_whether_the_journal_is_what_this_process_saw_or_wrote(client: Any) -> None:
    a, b = journal(client), journal(client)
    start(a)
    steps(a, 1, 2)
    first = a.load(RUN)
    assert first.read is not None and not first.read.warm and first.read.unseen == 4

    steps(a, 3, 1)  # written here: seen
    own = a.load(RUN)
    assert own.read is not None and own.read.warm and own.read.unseen == 0
    assert own.read.revision == own.header.revision

    steps(b, 4, 1)  # another container's step
    other = a.load(RUN)
    assert other.read is not None and other.read.warm and other.read.unseen == 2


# -- another writer: the warm load equals a whole read -------------------------------------


def test_another_container_appends_entries(client: Any) -> None:
    a, b = journal(client), journal(client)
    start(a)
    steps(a, 1, 3)
    a.load(RUN)

    steps(b, 4, 5)

    same(a.load(RUN), cold(client))


def test_a_parallel_branch_writes_below_the_last_entry_this_process_knows(client: Any) -> None:
    a, b = journal(client), journal(client)
    start(a)
    steps(a, 1, 1)
    # A batch at 2: this container claimed and finished branch 2, branch 1 is another's.
    a.commit(RUN, [entry(pos(2, 1, 1), EntryType.STARTED)])
    a.commit(RUN, [entry(pos(2, 2, 1), EntryType.STARTED)])
    a.commit(RUN, [entry(pos(2, 2, 1), EntryType.SUCCEEDED)])
    a.commit(RUN, [entry(pos(2, 2), EntryType.SUCCEEDED, kind=OpKind.CHILD)])
    a.load(RUN)

    b.commit(RUN, [entry(pos(2, 1, 1), EntryType.SUCCEEDED)])  # below J#…2/00000002…
    b.commit(RUN, [entry(pos(2, 1), EntryType.SUCCEEDED, kind=OpKind.CHILD)])

    warm = a.load(RUN)
    assert warm.read is not None and warm.read.warm
    same(warm, cold(client))


def test_a_callback_handle_finished_below_later_steps(client: Any) -> None:
    a, b = journal(client), journal(client)
    start(a)
    a.commit(RUN, [entry(pos(1), EntryType.SCHEDULED, kind=OpKind.CALLBACK)])
    steps(a, 2, 4)  # the agent goes on while the callback is open
    a.load(RUN)

    b.commit(RUN, [entry(pos(1), EntryType.SUCCEEDED, kind=OpKind.CALLBACK)])  # the Api

    same(a.load(RUN), cold(client))


@pytest.mark.parametrize(
    "change",
    [
        RunChange(RUNNING_ONLY, RunStatus.RUNNING, 9, cancel_requested={"by": "op"}),
        RunChange(RUNNING_ONLY, RunStatus.RUNNING, 9, add_event_name="go"),
        RunChange(
            RUNNING_ONLY, RunStatus.SUSPENDED, 9, wake_at_ms=None, waiting_on={"approval": "x"}
        ),
        RunChange(RUNNING_ONLY, RunStatus.RUNNING, 9, versions={"agent": "2"}),
    ],
    ids=["cancel request", "event", "suspend", "re-pin"],
)
def test_another_writer_changes_the_header(client: Any, change: RunChange) -> None:
    a, b = journal(client), journal(client)
    start(a)
    steps(a, 1, 2)
    a.load(RUN)

    b.commit(RUN, [], change)

    warm = a.load(RUN)
    assert warm.read is not None and warm.read.warm
    assert warm.header.revision == 1
    same(warm, cold(client))


def test_an_approval_resumes_the_run_with_its_result(client: Any) -> None:
    a, b = journal(client), journal(client)
    start(a)
    a.commit(
        RUN,
        [entry(pos(1), EntryType.SCHEDULED, kind=OpKind.APPROVAL)],
        RunChange(
            RUNNING_ONLY, RunStatus.SUSPENDED, 3, wake_at_ms=None, waiting_on={"approval": "x"}
        ),
    )
    a.load(RUN)

    b.commit(
        RUN,
        [entry(pos(1), EntryType.SUCCEEDED, kind=OpKind.APPROVAL)],
        RunChange(frozenset({RunStatus.SUSPENDED}), RunStatus.RUNNING, 4, waiting_on=None),
    )

    same(a.load(RUN), cold(client))


def test_the_reconciler_overwrites_a_side_effect_record(client: Any) -> None:
    a, b = journal(client), journal(client)
    start(a)
    steps(a, 1, 2)
    a.commit(RUN, [], None, EffectChange(effect(pos(3), EffectStatus.PREPARED)))
    a.load(RUN)

    # Recovered elsewhere: committed with its result entry, and the record moved on.
    committed = effect(pos(3), EffectStatus.COMMITTED, result='"r"')
    b.commit(
        RUN,
        [entry(pos(3), EntryType.SUCCEEDED, kind=OpKind.TOOL)],
        None,
        EffectChange(committed, frozenset({EffectStatus.PREPARED}), 1),
    )

    warm = a.load(RUN)
    assert warm.effects == [committed]
    same(warm, cold(client))


def test_side_effect_records_below_the_tail_are_not_read_again(client: Any) -> None:
    a = journal(client)
    start(a)
    a.commit(RUN, [], None, EffectChange(effect(pos(1), EffectStatus.PREPARED)))
    done = effect(pos(1), EffectStatus.COMMITTED, result='"r"')
    prepared = EffectChange(done, frozenset({EffectStatus.PREPARED}), 1)
    a.commit(RUN, [entry(pos(1), EntryType.SUCCEEDED, kind=OpKind.TOOL)], None, prepared)
    steps(a, 2, 2)
    a.load(RUN)
    steps(a, 4, 1)

    warm = a.load(RUN)

    # Two ranges (entries and the header echo from the tail, records from the tail): the
    # settled record is not read again.
    assert warm.read is not None and warm.read.warm and warm.read.requests == 2
    same(warm, cold(client))


def test_a_migration_is_read_with_the_tail(client: Any) -> None:
    a, b = journal(client), journal(client)
    start(a)
    steps(a, 1, 3)
    a.load(RUN)

    migrated = entry("~m00000001", EntryType.SUCCEEDED, kind=OpKind.MIGRATION, value="{}")
    b.commit(
        RUN,
        [migrated],
        RunChange(RUNNING_ONLY, RunStatus.RUNNING, 9, versions={"agent": "2"}),
    )
    steps(b, 4, 1)  # the migrated code goes on, below the migration entry's key

    warm = a.load(RUN)
    assert migrated in warm.entries
    same(warm, cold(client))


def test_a_run_id_used_again_is_read_whole(client: Any) -> None:
    a, b = journal(client), journal(client)
    start(a)
    steps(a, 1, 3)
    a.load(RUN)
    # The run expired and a new one took its id (retention): gone, then started anew.
    raw = b._client.raw
    for item in raw.query(
        TableName="journal",
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"RUN#{RUN}"}},
    )["Items"]:
        raw.delete_item(TableName="journal", Key={"pk": item["pk"], "sk": item["sk"]})
    start(b, created_at_ms=7)
    steps(b, 1, 1)

    warm = a.load(RUN)

    assert warm.read is not None and not warm.read.warm
    same(warm, cold(client))


def test_a_conflict_makes_the_next_load_read_the_whole_partition(client: Any) -> None:
    a, b = journal(client), journal(client)
    start(a)
    steps(a, 1, 2)
    a.load(RUN)
    b.commit(RUN, [entry(pos(3), EntryType.STARTED)])

    with pytest.raises(EntryConflictError):
        a.commit(RUN, [entry(pos(3), EntryType.STARTED)])

    after = a.load(RUN)
    assert after.read is not None and not after.read.warm
    same(after, cold(client))


def test_a_warm_load_inside_a_long_batch_skips_its_finished_branches(client: Any) -> None:
    ledger = Ledger(peek_client())
    a, b = journal(client, tail_reads=None), journal(client)
    ledger.attach(client)
    start(a)
    big = '"' + "x" * 4000 + '"'
    for i in range(1, 41):  # a map at 1: 40 branches finished, 4 KB each (~170 KB)
        a.commit(RUN, [entry(pos(1, i, 1), EntryType.SUCCEEDED, value=big)])
        a.commit(RUN, [entry(pos(1, i), EntryType.SUCCEEDED, kind=OpKind.CHILD, value=big)])
    a.commit(RUN, [entry(pos(1, 41, 1), EntryType.STARTED)])
    a.load(RUN)
    a.load(RUN)  # the tail now begins at branch 41
    b.commit(RUN, [entry(pos(1, 41, 1), EntryType.SUCCEEDED)])  # another container's branch

    before = ledger.take()
    warm = a.load(RUN)
    after = ledger.take()

    assert warm.read is not None and warm.read.warm
    assert after.rru - before.rru == 1  # the tail and the echo, not the batch's 40 branches
    same(warm, cold(client))
