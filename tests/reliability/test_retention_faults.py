"""Retention under faults (ADR 0012): the reconciler's stamping of a finished run's items.

* The run finished, and the stamping pass died midway (a storage failure after some items):
  the run stays listed and the next sweep finishes the job; every item ends with the ``ttl``.
* Stamping twice (two sweeps, or a sweep repeated after a lost answer) writes nothing new.
* A write landing after the finish (a zombie invocation's entry) gets the ``ttl`` from the
  second pass.
* A run waiting for a person never expires, however long it waits.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.errors import InfrastructureError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import JournalStore
from durable_agents.models import Entry, EntryType, OpKind, RunStatus
from durable_agents.reconciler import sweep
from durable_agents.retention import DAY_S, LATE_WRITE_GRACE_MS
from durable_agents.testing import AgentTestRunner
from tests.contract.test_cancel_contract import approval_agent
from tests.contract.test_retention_contract import expire

pytestmark = pytest.mark.reliability
STALL = 10**12  # the run sweeps find nothing stalled: only the stamping step acts


def _finished(journal: JournalStore) -> tuple[AgentTestRunner, str]:
    @agent(name="keeper", version="1", registry=AgentRegistry(), retention=timedelta(days=3))
    def keeper(ctx: DurableContext, n: int) -> int:
        return sum(ctx.step(lambda i=i: i * n, name=f"s{i}") for i in range(5))

    runner = AgentTestRunner(keeper, journal=journal)
    run_id = runner.run(2).run_id
    header = journal.get_run(run_id)
    assert header.status is RunStatus.SUCCEEDED
    assert header.expires_at_ms == (header.updated_at_ms // 1000 + 3 * DAY_S) * 1000
    return runner, run_id


def _unstamped(run_id: str) -> list[str]:
    client = boto3.client("dynamodb", region_name="us-east-1")
    items = client.scan(TableName="journal", ConsistentRead=True)["Items"]
    return [i["sk"]["S"] for i in items if run_id in str(i) and "ttl" not in i]


class _FailingUpdates:
    """Wraps the journal's client: ``update_item`` fails after ``after`` calls, ``times``."""

    def __init__(self, inner: Any, after: int, times: int = 1):
        self._inner, self.after, self.times = inner, after, times

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def update_item(self, **kwargs: Any) -> Any:
        if self.after == 0 and self.times:
            self.times -= 1
            raise InfrastructureError("UpdateItem", "ProvisionedThroughputExceededException")
        self.after -= 1
        return self._inner.update_item(**kwargs)


def test_a_stamping_pass_that_dies_midway_is_finished_by_the_next_sweep(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    runner, run_id = _finished(dynamodb_journal)
    assert _unstamped(run_id)  # the finishing write stamps only the header
    guarded = dynamodb_journal._client
    dynamodb_journal._client = _FailingUpdates(guarded, after=2)  # type: ignore[assignment]
    # The only unit failed on storage: the sweep fails (the platform retries it).
    with pytest.raises(InfrastructureError):
        sweep(runner.runtime, stall_after_ms=STALL)
    assert _unstamped(run_id)  # some items stamped, not all
    dynamodb_journal._client = guarded
    second = sweep(runner.runtime, stall_after_ms=STALL)
    assert second.items_stamped > 0 and _unstamped(run_id) == []
    assert sweep(runner.runtime, stall_after_ms=STALL).items_stamped == 0  # harmless again


def test_stamping_twice_is_harmless_and_a_late_write_is_stamped_too(
    journal: JournalStore,
) -> None:
    runner, run_id = _finished(journal)
    sweep(runner.runtime, stall_after_ms=STALL)
    assert sweep(runner.runtime, stall_after_ms=STALL).items_stamped == 0
    late = Entry(
        run_id=run_id,
        position="00000099",
        op_id=f"{run_id}:late:99",
        kind=OpKind.STEP,
        name="late",
        type=EntryType.SUCCEEDED,
        attempt=0,
        value="1",
        recorded_at_ms=runner.clock.now_ms(),
    )
    journal.commit(run_id, [late])  # a zombie invocation lands after the finish
    runner.clock.advance(LATE_WRITE_GRACE_MS)
    report = sweep(runner.runtime, stall_after_ms=STALL)
    assert report.items_stamped == (1 if isinstance(journal, DynamoDBJournal) else 0)
    if isinstance(journal, DynamoDBJournal):
        assert _unstamped(run_id) == []
    assert journal.expiring_runs_page(10**13 - 1).items == []  # done: out of the listing
    expires = journal.get_run(run_id).expires_at_ms
    assert expires is not None
    expire(journal, expires)
    assert journal.list_runs(limit=10).runs == []


def test_a_run_waiting_for_a_person_never_expires(journal: JournalStore) -> None:
    runner = AgentTestRunner(approval_agent(__import__("collections").Counter()), journal=journal)
    run_id = runner.run(500).run_id
    runner.clock.advance(6 * DAY_S * 1000)  # six days into a seven-day approval
    sweep(runner.runtime, stall_after_ms=STALL)
    expire(journal, runner.clock.now_ms() + 400 * DAY_S * 1000)
    header = journal.get_run(run_id)
    assert header.status is RunStatus.SUSPENDED and header.expires_at_ms is None
