"""Retention of a run's event inbox under faults (ADR 0012, ADR 0014).

* The stamping pass dies midway through the inbox records — between an event's key record and
  its slot — and the next sweep finishes: every slot and key ends with the ``ttl``, and a
  sweep after that writes nothing.
* An event whose sender read the run as running, but that lands after the run finished, is
  refused in its transaction: no slot, no key, no new name on the header, nothing left
  behind without the ``ttl``.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from durable_agents import SkipClock
from durable_agents.admin.reconciler import sweep
from durable_agents.core.ids import key_id, slot_id
from durable_agents.core.models import RunHeader
from durable_agents.engine.inbox import RunNotAcceptingEventsError, send_event
from durable_agents.errors import InfrastructureError, WaitNotFoundError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import JournalStore
from tests.contract.test_inbox_retention_contract import a_finished_run_with_events
from tests.contract.test_retention_contract import FINISH, expire, finish, header, stamp_all

pytestmark = pytest.mark.reliability
STALL = 10**12  # the run sweeps find nothing stalled: only the stamping step acts


def _unstamped(run_id: str) -> list[str]:
    client = boto3.client("dynamodb", region_name="us-east-1")
    items = client.scan(TableName="journal", ConsistentRead=True)["Items"]
    return [i["pk"]["S"] for i in items if run_id in str(i) and "ttl" not in i]


class _FailingInboxUpdates:
    """Wraps the journal's client: the update of the ``after``-th inbox record fails once."""

    def __init__(self, inner: Any, after: int):
        self._inner, self.after, self.failed = inner, after, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def update_item(self, **kwargs: Any) -> Any:
        if kwargs["Key"]["pk"]["S"].startswith("WAIT#ev") and not self.failed:
            if self.after == 0:
                self.failed = True
                raise InfrastructureError("UpdateItem", "ProvisionedThroughputExceededException")
            self.after -= 1
        return self._inner.update_item(**kwargs)


def test_a_pass_that_dies_among_the_inbox_records_is_finished_by_the_next_sweep(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    runner, run_id, waits = a_finished_run_with_events(dynamodb_journal)
    guarded = dynamodb_journal._client
    # Key 1, slot 1, key 2 stamped; the pass dies on slot 2 (its key has the ttl already).
    failing = _FailingInboxUpdates(guarded, after=3)
    dynamodb_journal._client = failing  # type: ignore[assignment]
    with pytest.raises(InfrastructureError):
        sweep(runner.runtime, stall_after_ms=STALL)
    assert failing.failed
    # Names are walked sorted ("aside" first): its second slot and all of "message" are left.
    message = [slot_id(run_id, "message", n) for n in (1, 2, 3)]
    message += [key_id(run_id, "message", f"m-{n}") for n in (1, 2, 3)]
    left = sorted(f"WAIT#{each}" for each in [slot_id(run_id, "aside", 2), *message])
    assert sorted(_unstamped(run_id)) == left
    dynamodb_journal._client = guarded
    assert sweep(runner.runtime, stall_after_ms=STALL).items_stamped > 0
    assert _unstamped(run_id) == []
    assert sweep(runner.runtime, stall_after_ms=STALL).items_stamped == 0  # harmless again
    expires = dynamodb_journal.get_run(run_id).expires_at_ms
    assert expires is not None
    expire(dynamodb_journal, expires)
    for each in waits:
        with pytest.raises(WaitNotFoundError):
            dynamodb_journal.get_wait(each)


class _FinishesAfterTheRead:
    """A journal whose run finishes right after a sender read its header (still running)."""

    def __init__(self, inner: JournalStore):
        self._inner, self.reads = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def get_run(self, run_id: str) -> RunHeader:
        read = self._inner.get_run(run_id)
        self.reads += 1
        if self.reads == 1:
            finish(self._inner, run_id)  # lands between the sender's read and its write
        return read


def test_an_event_landing_after_the_finish_is_refused_and_leaves_nothing(
    journal: JournalStore,
) -> None:
    journal.create_run(header("run-1", key=None))
    clock = SkipClock()
    send_event(journal, clock, "run-1", "message", "early", "e-1")
    racing = _FinishesAfterTheRead(journal)
    with pytest.raises(RunNotAcceptingEventsError):
        send_event(racing, clock, "run-1", "late", "too late", "e-2")  # type: ignore[arg-type]
    assert racing.reads == 2  # the write was refused; the second read saw the run finished
    for each in (slot_id("run-1", "late", 1), key_id("run-1", "late", "e-2")):
        with pytest.raises(WaitNotFoundError):
            journal.get_wait(each)
    assert journal.get_run("run-1").event_names == frozenset({"message"})
    stamp_all(journal, FINISH)
    if isinstance(journal, DynamoDBJournal):
        assert _unstamped("run-1") == []
    expires = journal.get_run("run-1").expires_at_ms
    assert expires is not None
    expire(journal, expires)
    with pytest.raises(WaitNotFoundError):
        journal.get_wait(slot_id("run-1", "message", 1))
