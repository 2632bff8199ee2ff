"""Late decisions on a finished run expire with it (issue 29 defect 3, ADR 0012), both journals.

A finished run can leave a wait or a call in review open: a quorum batch
(``CompletionPolicy(min_successful=1)``) leaves the approvals and callbacks it no longer needs
PENDING, and a terminated run leaves a tool call in review (ADR 0011). Whatever is written for
such a run after its items were stamped must carry its expiry, whoever writes it and whenever:

* a person's approval decision, an external system's callback completion or heartbeat is
  refused (``WaitGoneError``, 410 at the Api) and the leftover is closed, written with the
  run's expiry;
* the reconciler expiring a leftover whose deadline passed writes with the run's expiry;
* a review decision on a terminated run is recorded, with the run's expiry (a person must still
  be able to say what became of the call), and a value it spills to S3 gets its retention tag;
* on DynamoDB, the store itself carries the expiry: a record rewritten whole keeps ``ttl``, an
  entry written for a finished run gets it, and a record of a run whose header already expired
  is never rewritten.

The deciders use a store of their own (``other_process``), as the Api and the reconciler do:
on DynamoDB it has never read the run.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, CompletionPolicy, DurableContext, SkipClock, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.admin.review import Decision, ReviewRequest, resolve
from durable_agents.core.models import (
    EffectStatus,
    RunStatus,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.engine.operations.approval import expire_approval, record_decision
from durable_agents.engine.operations.callback import complete_callback, heartbeat
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.wait_records import (
    RUN_FINISHED,
    WaitGoneError,
    closed_for_finished_run,
)
from durable_agents.errors import (
    EffectNotFoundError,
    RunNotFoundError,
    WaitNotFoundError,
)
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.dynamodb_late_writes import RunExpiries
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents.journal.retention import (
    LATE_WRITE_GRACE_MS,
    RETENTION_TAG,
    UNFINISHED_TRUSTED_S,
)
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolCall, default_tools, tool
from durable_agents_local.testing import AgentTestRunner, Crash
from tests.contract.test_retention_contract import (
    FINISH,
    _items,
    a_run_with_everything,
    approval,
    expire,
    finish,
    header,
    stamp_all,
)

WEEK_S = 7 * 86_400
# Later than any due time here. (Not 10**13 - 1: a listing's bound is that + 1, and 14 digits
# sort before every 13-digit key, so such a listing is always empty on DynamoDB.)
ANY_TIME_MS = 9_000_000_000_000
HANDED: dict[str, str] = {}


def other_process(journal: JournalStore) -> JournalStore:
    """The same journal as another process sees it (a fresh store on DynamoDB)."""
    if isinstance(journal, InMemoryJournal):
        return journal
    if isinstance(journal, SqliteJournal):
        return SqliteJournal(journal.path)
    s3 = boto3.client("s3", region_name="us-east-1")
    return DynamoDBJournal(
        boto3.client("dynamodb", region_name="us-east-1"),
        "journal",
        payloads=S3PayloadStore(s3, "payloads"),
    )


def unstamped(run_id: str) -> list[str]:
    """The DynamoDB items naming the run that have no ``ttl`` (what would be kept forever)."""
    return [
        f"{i['pk']['S']} {i['sk']['S']}"
        for i in _items(boto3.client("dynamodb", region_name="us-east-1"))
        if run_id in str(i) and "ttl" not in i
    ]


def leftovers_of(journal: JournalStore, run_id: str) -> list[str]:
    """Every item of the run still kept (on DynamoDB: every item that names it)."""
    if isinstance(journal, DynamoDBJournal):
        return [
            f"{i['pk']['S']} {i['sk']['S']}"
            for i in _items(boto3.client("dynamodb", region_name="us-east-1"))
            if run_id in str(i)
        ]
    kept = []
    try:
        journal.load(run_id)
        kept.append("header")
    except RunNotFoundError:
        pass
    for kind in ("approval", "callback"):
        for status in WaitStatus:
            kept += [w.wait_id for w in journal.list_waits(kind, status) if w.run_id == run_id]
    return kept


def stamped_and_expired(journal: JournalStore, runner: AgentTestRunner, run_id: str) -> None:
    """Both stamping passes are done: the run left the listing (the late writes come next)."""
    now = runner.clock.now_ms()
    stamp_all(journal, now)
    runner.clock.advance(LATE_WRITE_GRACE_MS)
    stamp_all(journal, runner.clock.now_ms())
    assert journal.expiring_runs_page(ANY_TIME_MS).items == []
    if isinstance(journal, DynamoDBJournal):
        assert unstamped(run_id) == []


def all_gone(journal: JournalStore, runner: AgentTestRunner, run_id: str) -> None:
    """After any pass the late writes asked for, everything of the run expires with it."""
    runner.clock.advance(LATE_WRITE_GRACE_MS)
    stamp_all(journal, runner.clock.now_ms())
    if isinstance(journal, DynamoDBJournal):
        assert unstamped(run_id) == []  # nothing is kept for ever
    expires = journal.get_run(run_id).expires_at_ms
    assert expires is not None
    expire(journal, expires)
    assert leftovers_of(journal, run_id) == []


# ------------------------------------------------------------------------------ the agents
@agent(name="quorum-approvals", version="1", registry=AgentRegistry())
def quorum_approvals(ctx: DurableContext, amount: int) -> str:
    def ask(who: str) -> Any:
        return lambda c: (
            c.wait_for_approval(
                f"ask-{who}", request={"amount": amount}, approvers=["user:*"], timeout=WEEK_S
            ).decided_by
        )

    batch = ctx.parallel([ask("a"), ask("b")], completion=CompletionPolicy(min_successful=1))
    return str(next(r for r in batch.results() if r is not None))


@agent(name="quorum-callbacks", version="1", registry=AgentRegistry())
def quorum_callbacks(ctx: DurableContext, job: str) -> Any:
    def render(where: str) -> Any:
        def branch(c: DurableContext) -> Any:
            callback = c.create_callback(
                f"render-{where}", timeout=WEEK_S, heartbeat_timeout=86_400
            )
            HANDED[where] = callback.callback_id
            return callback.result()

        return branch

    batch = ctx.parallel([render("a"), render("b")], completion=CompletionPolicy(min_successful=1))
    return next(r for r in batch.results() if r is not None)


def finished_with_a_leftover(
    journal: JournalStore, kind: str
) -> tuple[AgentTestRunner, str, WaitRecord]:
    """A quorum run that succeeded on one wait and left the other PENDING, then stamped."""
    definition = quorum_approvals if kind == "approval" else quorum_callbacks
    runner = AgentTestRunner(definition, journal=journal, mode="faithful")
    HANDED.clear()
    started = runner.run(42 if kind == "approval" else "doc")
    assert started.status == "SUSPENDED"
    run_id = started.run_id
    first, second = sorted(runner.pending_waits(run_id, kind), key=lambda w: w.name)
    if kind == "approval":
        record_decision(
            journal, runner.clock, first, approved=True, decided_by="user:ada", comment="", via="t"
        )
    else:
        complete_callback(journal, runner.clock, first, result={"pages": 3})
    done = runner.resume(run_id)
    assert done.status == "SUCCEEDED", done.error
    assert journal.get_wait(second.wait_id).status is WaitStatus.PENDING  # the leftover
    stamped_and_expired(journal, runner, run_id)
    return runner, run_id, journal.get_wait(second.wait_id)


def assert_closed(record: WaitRecord) -> None:
    assert record.status is WaitStatus.EXPIRED
    assert record.outcome == {"closed": RUN_FINISHED, "run_status": "SUCCEEDED"}
    assert closed_for_finished_run(record)


# ------------------------------------------------------------------------- refused, closed
def test_an_approval_decided_after_its_run_finished_is_refused_and_expires_with_the_run(
    journal: JournalStore,
) -> None:
    runner, run_id, leftover = finished_with_a_leftover(journal, "approval")
    decider = other_process(journal)
    with pytest.raises(WaitGoneError) as refused:
        record_decision(
            decider,
            runner.clock,
            leftover,
            approved=True,
            decided_by="user:bob",
            comment="my card number is in here",
            via="iam",
        )
    assert_closed(refused.value.record)
    assert_closed(decider.get_wait(leftover.wait_id))
    assert "bob" not in json.dumps(decider.get_wait(leftover.wait_id).outcome)  # not recorded
    # A second try finds it closed, and writes nothing more.
    with pytest.raises(WaitGoneError):
        record_decision(
            decider,
            runner.clock,
            leftover,
            approved=False,
            decided_by="user:c",
            comment="",
            via="t",
        )
    all_gone(journal, runner, run_id)


@pytest.mark.parametrize("how", ["success", "failure", "heartbeat"])
def test_a_callback_completed_or_heartbeaten_after_its_run_finished_is_refused(
    journal: JournalStore, how: str
) -> None:
    runner, run_id, leftover = finished_with_a_leftover(journal, "callback")
    decider = other_process(journal)
    with pytest.raises(WaitGoneError) as refused:
        if how == "heartbeat":
            heartbeat(decider, runner.clock, leftover)
        else:
            complete_callback(
                decider,
                runner.clock,
                leftover,
                **({"result": {"pages": 9}} if how == "success" else {"error_type": "Boom"}),
            )
    assert_closed(refused.value.record)
    assert_closed(decider.get_wait(leftover.wait_id))
    all_gone(journal, runner, run_id)


def test_the_reconciler_expiring_a_leftover_after_the_finish_writes_with_the_expiry(
    journal: JournalStore,
) -> None:
    runner, run_id, leftover = finished_with_a_leftover(journal, "approval")
    runner.clock.advance(WEEK_S * 1000)  # its deadline passes: the reconciler expires it
    expired = expire_approval(other_process(journal), runner.clock, leftover)
    assert expired.status is WaitStatus.EXPIRED
    all_gone(journal, runner, run_id)


# ------------------------------------------------------------------ recorded, with the expiry
class Notice(BaseModel):
    to: str


@tool(name="late-notify", reviewers=["user:*"], registry=default_tools)  # not idempotent
def late_notify(request: Notice, call_: ToolCall) -> str:
    return f"sent to {request.to}"


@agent(name="late-notifier", version="1", registry=AgentRegistry())
def late_notifier(ctx: DurableContext, to: str) -> str:
    return str(ctx.tool(late_notify, Notice(to=to)))


def test_a_review_decided_after_its_run_was_terminated_is_recorded_with_its_expiry(
    journal: JournalStore,
) -> None:
    runner = AgentTestRunner(late_notifier, journal=journal, mode="faithful")
    paused = runner.run("ada@example.com", crash=Crash("late-notify", "after_execute"))
    assert paused.status == "PAUSED"
    run_id = paused.run_id
    terminated = runner.cancel(run_id, terminate=True)
    assert terminated.status == "TERMINATED"
    op_id = f"{run_id}:late-notify:1"
    in_review = journal.get_effect(run_id, "00000001")
    assert in_review.status is EffectStatus.NEEDS_REVIEW
    stamped_and_expired(journal, runner, run_id)

    decider = other_process(journal)
    big = "x" * 360_000  # the confirmed result is spilled to S3 on DynamoDB
    decided = resolve(
        decider,
        default_tools,
        runner.clock,
        op_id,
        ReviewRequest(Decision.COMMITTED, "user:bob", "it went out", result=big),
    )
    assert decided.status is EffectStatus.COMMITTED
    assert decider.get_effect(run_id, "00000001").note["decided_by"] == "user:bob"  # type: ignore[index]
    # Recorded after the stamping: the run is listed for one more pass (its spilled payloads).
    listed = journal.expiring_runs_page(ANY_TIME_MS).items
    assert [h.run_id for h in listed] == [run_id]
    assert listed[0].stamp_due_at_ms == runner.clock.now_ms() + LATE_WRITE_GRACE_MS
    if isinstance(journal, DynamoDBJournal):
        assert unstamped(run_id) == []  # written with the expiry, before any pass
    all_gone(journal, runner, run_id)
    with pytest.raises(EffectNotFoundError):
        journal.get_effect(run_id, "00000001")
    if isinstance(journal, DynamoDBJournal):
        s3 = boto3.client("s3", region_name="us-east-1")
        for obj in s3.list_objects_v2(Bucket="payloads", Prefix=f"runs/{run_id}/")["Contents"]:
            tags = s3.get_object_tagging(Bucket="payloads", Key=obj["Key"])["TagSet"]
            assert [t["Key"] for t in tags] == [RETENTION_TAG], obj["Key"]


# ------------------------------------------------------------------------- the store's rule
def test_a_record_rewritten_for_a_stamped_run_keeps_its_expiry_whoever_writes_it(
    journal: JournalStore,
) -> None:
    a_run_with_everything(journal, "run-1")
    finish(journal, "run-1")
    stamp_all(journal, FINISH)
    stamp_all(journal, FINISH + LATE_WRITE_GRACE_MS)
    late = FINISH + LATE_WRITE_GRACE_MS + 5
    record = approval("run-1")
    beat = record.replace(updated_at_ms=late, heartbeat_deadline_ms=late + 60_000)
    # A writer that never read the run, rewriting the record whole (a heartbeat's write).
    other_process(journal).commit(
        "run-1", [], None, wait=WaitChange(beat, frozenset({WaitStatus.PENDING}))
    )
    assert journal.get_wait(record.wait_id).heartbeat_deadline_ms == late + 60_000
    if isinstance(journal, DynamoDBJournal):
        assert unstamped("run-1") == []
    expires = journal.get_run("run-1").expires_at_ms
    assert expires is not None
    expire(journal, expires)
    with pytest.raises(WaitNotFoundError):
        journal.get_wait(record.wait_id)
    with pytest.raises(RunNotFoundError):
        journal.load("run-1")


def test_on_dynamodb_a_record_of_a_run_whose_header_expired_is_not_rewritten(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    journal = dynamodb_journal
    a_run_with_everything(journal, "run-1")
    finish(journal, "run-1")
    stamp_all(journal, FINISH)
    client = boto3.client("dynamodb", region_name="us-east-1")
    # DynamoDB TTL deletes a run's items in no particular order: the header went first.
    client.delete_item(TableName="journal", Key={"pk": {"S": "RUN#run-1"}, "sk": {"S": "#RUN"}})
    record = approval("run-1")
    beat = record.replace(updated_at_ms=FINISH + 5)
    with pytest.raises(RunNotFoundError):
        other_process(journal).commit(
            "run-1", [], None, wait=WaitChange(beat, frozenset({WaitStatus.PENDING}))
        )
    wait_item = client.get_item(
        TableName="journal", Key={"pk": {"S": f"WAIT#{record.wait_id}"}, "sk": {"S": "#WAIT"}}
    )["Item"]
    assert "ttl" in wait_item and wait_item["updated_at_ms"]["N"] == str(record.updated_at_ms)


def test_a_late_write_needs_no_header_read_when_the_store_knows_the_run_finished(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    """A store that read the run finished writes its expiry without reading the header again."""
    journal = dynamodb_journal
    a_run_with_everything(journal, "run-1")
    finish(journal, "run-1")
    stamp_all(journal, FINISH)
    raw = boto3.client("dynamodb", region_name="us-east-1")
    reader = DynamoDBJournal(raw, "journal")
    assert reader.get_run("run-1").status is RunStatus.SUCCEEDED
    calls: list[str] = []
    raw.meta.events.register("before-call", lambda model, **_: calls.append(model.name))
    record = approval("run-1").replace(updated_at_ms=FINISH + 5)
    reader.commit("run-1", [], None, wait=WaitChange(record, frozenset({WaitStatus.PENDING})))
    assert "GetItem" not in calls
    assert unstamped("run-1") == []


def test_on_dynamodb_the_reconciler_leaves_a_call_of_an_expired_run_to_its_expiry(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    journal = dynamodb_journal
    a_run_with_everything(journal, "run-1")  # with a PREPARED call, stale since START + 10
    finish(journal, "run-1", RunStatus.TERMINATED)
    stamp_all(journal, FINISH)
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.delete_item(TableName="journal", Key={"pk": {"S": "RUN#run-1"}, "sk": {"S": "#RUN"}})
    runtime = Runtime(other_process(journal), registry=AgentRegistry(), clock=SkipClock())
    report = sweep(runtime, stall_after_ms=10**12)
    # Not parked in review: that whole-item write would drop its ttl and keep it for ever.
    assert report.effects_skipped == 1 and report.unit_errors == 0
    assert report.effects_finished_run == 0
    effect = journal.get_effect("run-1", "00000003")
    assert effect.status is EffectStatus.PREPARED
    assert unstamped("run-1") == []


def test_a_store_trusts_reading_a_run_unfinished_for_half_the_grace_only() -> None:
    now = [100.0]
    known = RunExpiries(monotonic=lambda: now[0])
    open_run = header("run-1")
    known.seen(open_run)
    assert known.recently_unfinished("run-1") and known.expiry_s("run-1", None) is None
    now[0] += UNFINISHED_TRUSTED_S - 1
    assert known.recently_unfinished("run-1")
    now[0] += 1  # the run may have finished and been stamped twice since: read it again
    assert not known.recently_unfinished("run-1")
    known.unfinished("run-1")
    known.forget("run-1")  # this store finished it: nothing known until it is read
    assert not known.recently_unfinished("run-1") and known.expiry_s("run-1", None) is None
    known.seen(open_run.replace(status=RunStatus.SUCCEEDED, expires_at_ms=7_000_000))
    now[0] += 10**9  # a finished run's expiry never changes: kept however long
    assert known.expiry_s("run-1", None) == 7_000 and not known.recently_unfinished("run-1")


def test_a_kept_expiry_is_not_a_new_runs_with_the_same_id() -> None:
    """Found by the differential property: a new run with a finished run's id (after that run
    expired) got the old run's ``ttl`` on every item a warm store wrote for it."""
    known = RunExpiries(monotonic=lambda: 0.0)
    known.finished("run-1", 7_000)
    assert known.expiry_s("run-1", 6_999_999) == 7_000
    # Past its expiry the kept one is the old run's: not trusted for a write made then.
    assert known.expiry_s("run-1", 7_000_000) is None
    # A read that shows the run unfinished is a new run with that id: the old expiry goes.
    known.unfinished("run-1")
    assert known.expiry_s("run-1", 1) is None
