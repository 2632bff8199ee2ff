"""Retention under faults (ADR 0012): the reconciler's stamping of a finished run's items.

* The run finished, and the stamping pass died midway (a storage failure after some items):
  the run stays listed and the next sweep finishes the job; every item ends with the ``ttl``.
* Stamping twice (two sweeps, or a sweep repeated after a lost answer) writes nothing new.
* A write landing after the finish (a zombie invocation's entry) gets the ``ttl`` from the
  second pass.
* A run waiting for a person never expires, however long it waits.
* Late decisions (issue 29 defect 3): after a finished run's both passes, a person decides a
  leftover approval, an external system heartbeats a leftover callback, a reviewer decides a
  terminated run's call, each from another process whose first write fails on storage, and the
  reconciler expires a leftover a week later. Invariant, checked after each: no item of a
  finished, stamped run lacks the ``ttl``; and in the end nothing of the runs is left.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, CompletionPolicy, DurableContext, SkipClock, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.admin.review import Decision, ReviewRequest, resolve
from durable_agents.core.models import EffectStatus, Entry, EntryType, OpKind, RunStatus, WaitStatus
from durable_agents.engine.operations.approval import record_decision
from durable_agents.engine.operations.callback import complete_callback, heartbeat
from durable_agents.engine.wait_records import WaitGoneError
from durable_agents.errors import InfrastructureError, WaitNotFoundError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.retention import DAY_S, LATE_WRITE_GRACE_MS
from durable_agents.journal.store import JournalStore
from durable_agents.tools import default_tools
from durable_agents_local.testing import AgentTestRunner, Crash
from tests.contract.test_cancel_contract import approval_agent
from tests.contract.test_late_decisions_contract import (
    ANY_TIME_MS,
    HANDED,
    late_notifier,
    other_process,
    quorum_callbacks,
)
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
    # A zombie invocation (another process: it never read the run finished) lands late.
    other_process(journal).commit(run_id, [late])
    runner.clock.advance(LATE_WRITE_GRACE_MS)
    report = sweep(runner.runtime, stall_after_ms=STALL)
    assert report.items_stamped == (1 if isinstance(journal, DynamoDBJournal) else 0)
    if isinstance(journal, DynamoDBJournal):
        assert _unstamped(run_id) == []
    assert journal.expiring_runs_page(ANY_TIME_MS).items == []  # done: out of the listing
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


# ------------------------------------------------------------ late decisions (issue 29 #3)
@agent(name="trio", version="1", registry=AgentRegistry())
def trio(ctx: DurableContext, amount: int) -> str:
    """Asks three people and goes on with the first yes: two approvals are left PENDING."""

    def ask(who: str) -> Any:
        return lambda c: (
            c.wait_for_approval(
                f"ask-{who}", request={"amount": amount}, approvers=["user:*"], timeout=7 * DAY_S
            ).decided_by
        )

    asks = [ask(who) for who in "abc"]
    batch = ctx.parallel(asks, completion=CompletionPolicy(min_successful=1))
    return str(batch.results()[0])


class _FailingFirstWrite:
    """Wraps a client: its first write request (of any kind) fails on storage, once."""

    WRITES = ("put_item", "update_item", "transact_write_items")

    def __init__(self, inner: Any):
        self._inner, self.failed = inner, False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.WRITES or self.failed:
            return attr

        def failing(**kwargs: Any) -> Any:
            self.failed = True
            raise InfrastructureError(name, "ProvisionedThroughputExceededException")

        return failing


def _late_decider(journal: JournalStore) -> JournalStore:
    """Another process's store; on DynamoDB its first write fails on storage."""
    decider = other_process(journal)
    if isinstance(decider, DynamoDBJournal):
        decider._client = _FailingFirstWrite(decider._client)  # type: ignore[assignment]
    return decider


def _retried(call: Callable[[], Any]) -> Any:
    """``call``, once more after a storage failure (what a client or the platform does)."""
    try:
        return call()
    except InfrastructureError:
        return call()


def test_no_item_of_a_finished_stamped_run_lacks_ttl_after_late_decisions(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    approvals = AgentTestRunner(trio, journal=journal, mode="faithful", clock=clock)
    callbacks = AgentTestRunner(quorum_callbacks, journal=journal, mode="faithful", clock=clock)
    reviews = AgentTestRunner(late_notifier, journal=journal, mode="faithful", clock=clock)
    HANDED.clear()
    # A quorum of approvals and one of callbacks finish with waits left PENDING; a run whose
    # tool call went to review is terminated with the call still in review.
    asked = approvals.run(500).run_id
    first, *_ = sorted(approvals.pending_waits(asked, "approval"), key=lambda w: w.name)
    record_decision(journal, clock, first, approved=True, decided_by="user:a", comment="", via="t")
    assert approvals.resume(asked).status == "SUCCEEDED"
    rendered = callbacks.run("doc").run_id
    one, _ = sorted(callbacks.pending_waits(rendered, "callback"), key=lambda w: w.name)
    complete_callback(journal, clock, one, result={"pages": 1})
    assert callbacks.resume(rendered).status == "SUCCEEDED"
    reviewed = reviews.run("ada", crash=Crash("late-notify", "after_execute")).run_id
    assert reviews.cancel(reviewed, terminate=True).status == "TERMINATED"
    runs = (asked, rendered, reviewed)

    def no_item_lacks_ttl() -> None:
        if isinstance(journal, DynamoDBJournal):
            for run_id in runs:
                assert _unstamped(run_id) == [], run_id

    # The reconciler stamps them: its two passes, an hour apart; then they leave the listing.
    sweep(approvals.runtime, stall_after_ms=STALL)
    clock.advance(LATE_WRITE_GRACE_MS)
    sweep(approvals.runtime, stall_after_ms=STALL)
    assert journal.expiring_runs_page(ANY_TIME_MS).items == []
    no_item_lacks_ttl()

    # Late decisions from other processes, each first hit by a storage failure and retried.
    left, expiring = sorted(approvals.pending_waits(asked, "approval"), key=lambda w: w.name)
    decider = _late_decider(journal)
    with pytest.raises(WaitGoneError):
        _retried(
            lambda: record_decision(
                decider,
                clock,
                left,
                approved=True,
                decided_by="user:z",
                comment="too late",
                via="iam",
            )
        )
    no_item_lacks_ttl()
    (beating,) = callbacks.pending_waits(rendered, "callback")
    decider = _late_decider(journal)
    with pytest.raises(WaitGoneError):
        _retried(lambda: heartbeat(decider, clock, beating))
    no_item_lacks_ttl()
    decider = _late_decider(journal)
    decided = _retried(
        lambda: resolve(
            decider,
            default_tools,
            clock,
            f"{reviewed}:late-notify:1",
            ReviewRequest(Decision.ABANDON, "user:r", "never went out"),
        )
    )
    assert decided.status is EffectStatus.ABANDONED
    no_item_lacks_ttl()
    # The last leftover's deadline passes: the reconciler expires it, a week after the finish.
    clock.advance(7 * DAY_S * 1000)
    assert journal.get_wait(expiring.wait_id).status is WaitStatus.PENDING
    assert sweep(reviews.runtime, stall_after_ms=STALL).waits_expired == 1
    no_item_lacks_ttl()

    # The passes the late writes asked for, then the runs' expiry: nothing of them is left.
    clock.advance(LATE_WRITE_GRACE_MS)
    sweep(reviews.runtime, stall_after_ms=STALL)
    assert journal.expiring_runs_page(ANY_TIME_MS).items == []
    no_item_lacks_ttl()
    expiries = [journal.get_run(run_id).expires_at_ms or 0 for run_id in runs]
    expire(journal, max(expiries))
    assert journal.list_runs(limit=10).runs == []
    for wait in (left, beating, expiring):
        with pytest.raises(WaitNotFoundError):
            journal.get_wait(wait.wait_id)
    if isinstance(journal, DynamoDBJournal):
        client = boto3.client("dynamodb", region_name="us-east-1")
        items = client.scan(TableName="journal", ConsistentRead=True)["Items"]
        assert [i["pk"]["S"] for i in items if any(r in str(i) for r in runs)] == []
