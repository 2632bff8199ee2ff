"""``POST /runs/{run_id}/migrate`` under faults: the run is untouched or migrated exactly once.

A v1 run of ``flow`` waits VERSION_UNAVAILABLE under a deployment that carries only v2 and the
migration 1→2. The Api (the real handler) is asked to move it while the migration's one write
fails before it lands, lands but the caller sees a failure, lands twice, lands late, or the
process dies just before or after it, or the ``Step Ready`` after it is lost. Whatever happens:

* the journal holds either no ``run_migrated`` entry and the run as it was, or exactly one and
  the run re-pinned to v2 — never half of it (an entry without the re-pin, or the reverse);
* an answer is 200, 409 or 503 (never a 5xx the Api does not document);
* a run migrated but never told (the ``Step Ready`` lost with the process or the bus) is
  re-driven by the reconciler, and finishes on v2.

The in-memory ``FaultyJournal`` plays DynamoDB's write outcomes at the exact boundary; the boto3
fault injector plays them on the real client against moto; the duplicated and the late write
run on both journals.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import boto3
import pytest
from botocore.config import Config
from moto import mock_aws

from durable_agents import AgentRegistry, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.reconciler import sweep
from durable_agents.core.models import OpKind, RunChange, RunHeader, RunStatus
from durable_agents.engine.events import (
    STEP_READY,
    CollectingPublisher,
    EventPublishError,
    OutgoingEvent,
)
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import (
    EntryConflictError,
    RunRevisionConflictError,
    RunStateConflictError,
)
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore
from durable_agents.migrations import MigrationPlan, RecordedRun, migration
from durable_agents_local.template import create_journal_table
from durable_agents_local.testing import SimulatedCrash
from tests.conftest import TEMPLATE
from tests.contract.test_versions_contract import approve, drive, v1, v2
from tests.reliability.boto_faults import Injector as BotoInjector
from tests.reliability.faults import (
    WRITE_MODES,
    FaultPlan,
    FaultyJournal,
    Injector,
    LambdaTimeoutError,
    Mode,
    Target,
)
from tests.unit.test_api_approvals import OPERATOR, request

pytestmark = pytest.mark.reliability

MIGRATED = "run_migrated"
STALL_MS = 60_000
FENCED = (RunRevisionConflictError, RunStateConflictError, EntryConflictError)


def only_v2() -> AgentRegistry:
    """The deployment after v1 was removed: v2's code and the migration from v1."""
    registry = AgentRegistry()
    agent_decorator(name="flow", version="2", registry=registry)(v2)

    @migration("flow", from_version="1", to_version="2", registry=registry)
    def one_to_two(run: RecordedRun) -> MigrationPlan:
        ticket = run.result("create-ticket")
        return MigrationPlan(
            replays=run.names(), results={"create-ticket": {**ticket, "priority": "normal"}}
        )

    return registry


class LossyPublisher(CollectingPublisher):
    """Collects events; refuses the first ``fail`` publishes as EventBridge can."""

    def __init__(self, fail: int = 0):
        super().__init__()
        self.fail = fail

    def publish(self, events: Sequence[OutgoingEvent]) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise EventPublishError("EventBridge rejected 1 event(s): InternalFailure")
        super().publish(events)


def unavailable_run(store: JournalStore, clock: SkipClock) -> tuple[Runtime, str]:
    """A v1 run, approved, VERSION_UNAVAILABLE under the v2-only deployment (returned)."""
    old = Runtime(store, registry=AgentRegistry(), clock=clock, publisher=CollectingPublisher())
    agent_decorator(name="flow", version="1", registry=old.registry)(v1)
    run, _ = old.start_run("flow", None)
    assert drive(old, run.run_id) is RunStatus.SUSPENDED, store.get_run(run.run_id).error
    approve(old, run.run_id)
    new = Runtime(store, registry=only_v2(), clock=clock, publisher=LossyPublisher())
    assert new.execute(run.run_id).kind.value == "version_unavailable"
    assert store.get_run(run.run_id).status is RunStatus.VERSION_UNAVAILABLE
    return new, run.run_id


def migrations(store: JournalStore, run_id: str) -> int:
    return sum(e.kind is OpKind.MIGRATION for e in store.load(run_id).entries)


def step_readies(rt: Runtime, run_id: str) -> int:
    events = rt.publisher.events  # type: ignore[attr-defined]
    return sum(e.detail_type == STEP_READY and e.detail["run_id"] == run_id for e in events)


def assert_whole(store: JournalStore, run_id: str, before: RunHeader) -> bool:
    """Untouched (False) or migrated exactly once (True); never anything in between."""
    header = store.get_run(run_id)
    count = migrations(store, run_id)
    if count == 0:
        assert header == before, "no run_migrated entry, yet the header changed"
        return False
    assert count == 1, f"{count} run_migrated entries"
    assert header.versions["workflow_version"] == "2", "a run_migrated entry without the re-pin"
    assert header.status is RunStatus.RUNNING and header.error is None
    return True


def finishes_on_v2(rt: Runtime, run_id: str) -> None:
    """The reconciler re-drives the run if it was never told, and it finishes on v2."""
    rt.clock.advance(STALL_MS + 1)  # type: ignore[attr-defined]
    told = step_readies(rt, run_id)
    report = sweep(rt, stall_after_ms=STALL_MS)
    if told == 0:
        assert report.stalled_redriven == 1, "a migrated run nobody told was left waiting"
    assert step_readies(rt, run_id) >= 1
    assert drive(rt, run_id) is RunStatus.SUCCEEDED
    result = json.loads(rt.store.get_run(run_id).result or "{}")
    assert result["version"] == "2" and result["ticket"] == {"id": "T-1", "priority": "normal"}
    assert migrations(rt.store, run_id) == 1


def migrate(run_id: str) -> Any:
    return request("POST", f"/runs/{run_id}/migrate", {"to_version": "2"}, user_arn=OPERATOR)


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Installs a runtime as the Api's."""
    from api import services as api_services

    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    monkeypatch.delenv("TENANT_MAP", raising=False)

    def bind(rt: Runtime) -> None:
        monkeypatch.setattr(api_services, "_runtime", rt)

    return bind


# --------------------------------------------------------- the write, at its exact boundary
@pytest.mark.parametrize("mode", WRITE_MODES)
def test_a_faulty_migration_write_leaves_the_run_whole(serve: Any, mode: Mode) -> None:
    clock = SkipClock()
    injector = Injector(FaultPlan(targets=(Target(MIGRATED, "commit", mode),)), clock.now_ms)
    store = FaultyJournal(InMemoryJournal(), injector, clock)
    rt, run_id = unavailable_run(store, clock)
    serve(rt)
    before = store.get_run(run_id)
    try:
        reply = migrate(run_id)
        assert reply.status == 503, reply.text  # the journal failed: retry the request
    except (SimulatedCrash, LambdaTimeoutError):
        pass  # the process died: no answer at all
    assert sum(injector.counts.values()) == 1, "the fault never fired: the case tests nothing"
    landed = assert_whole(store, run_id, before)
    assert landed == (mode in ("infra_after", "crash_after_write", "timeout_after_write"))
    assert step_readies(rt, run_id) == 0  # nothing after the write ran
    # The caller sends the request again: it moves the run, or — if the first one landed —
    # gets the same answer again (the migration it already made), and nothing is written.
    again = migrate(run_id)
    assert again.status == 200, again.text
    assert (
        again.json["committed"] is True and again.json["migration"]["to"]["workflow_version"] == "2"
    )
    assert assert_whole(store, run_id, before)
    finishes_on_v2(rt, run_id)


def test_a_lost_step_ready_after_the_commit_is_made_good_by_the_reconciler(serve: Any) -> None:
    clock = SkipClock()
    store = InMemoryJournal()
    rt, run_id = unavailable_run(store, clock)
    rt.publisher = LossyPublisher(fail=1)
    serve(rt)
    before = store.get_run(run_id)
    reply = migrate(run_id)
    # The migration is recorded: the answer says so (the run is RUNNING; the reconciler
    # re-drives a RUNNING run nobody advances).
    assert reply.status == 200, reply.text
    assert reply.json["committed"] is True
    assert assert_whole(store, run_id, before)
    assert step_readies(rt, run_id) == 0
    finishes_on_v2(rt, run_id)


# ------------------------------------------------------- the real client, against moto
ONE_TRY = Config(retries={"total_max_attempts": 1, "mode": "standard"})
BOTO_FAULTS = [
    ("TransactWriteItems", "internal"),
    ("TransactWriteItems", "throttling"),
    ("TransactWriteItems", "timeout"),
    ("TransactWriteItems", "transaction-conflict"),
]


@pytest.fixture
def faulty_dynamodb() -> Iterator[tuple[BotoInjector, DynamoDBJournal]]:
    with mock_aws():
        injector = BotoInjector()
        ddb = injector.attach(boto3.client("dynamodb", region_name="us-east-1", config=ONE_TRY))
        create_journal_table(ddb, "journal", TEMPLATE)
        yield injector, DynamoDBJournal(ddb, "journal")


@pytest.mark.parametrize(("operation", "kind"), BOTO_FAULTS, ids=[k for _, k in BOTO_FAULTS])
def test_a_dynamodb_fault_on_the_migration_commit_leaves_the_run_whole(
    serve: Any,
    faulty_dynamodb: tuple[BotoInjector, DynamoDBJournal],
    operation: str,
    kind: str,
) -> None:
    injector, store = faulty_dynamodb
    rt, run_id = unavailable_run(store, SkipClock())
    serve(rt)
    before = store.get_run(run_id)
    injector.fail(operation, kind)
    reply = migrate(run_id)
    assert injector.fired[kind] == 1, "the fault never fired: the case tests nothing"
    assert reply.status in (200, 503), reply.text
    landed = assert_whole(store, run_id, before)
    assert landed == (reply.status == 200)
    if not landed:
        assert migrate(run_id).status == 200
        assert assert_whole(store, run_id, before)
    finishes_on_v2(rt, run_id)


# ----------------------------------------------- the write delivered twice, or late (both journals)
class Replaying:
    """A journal that keeps the migration's write, to deliver it again later."""

    def __init__(self, inner: JournalStore):
        self.inner = inner
        self.kept: list[tuple[Any, ...]] = []

    def commit(self, run_id: str, entries: Sequence[Any], change: Any = None, **kw: Any) -> None:
        self.inner.commit(run_id, entries, change, **kw)
        if any(e.name == MIGRATED for e in entries):
            self.kept.append((run_id, list(entries), change, kw))

    def again(self) -> BaseException | None:
        """Delivers the kept write once more; returns how the journal refused it."""
        ((run_id, entries, change, kw),) = self.kept
        try:
            self.inner.commit(run_id, entries, change, **kw)
        except FENCED as exc:
            return exc
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("when", ["at-once", "after-the-run-finished"])
def test_a_duplicated_or_late_migration_write_is_refused(
    serve: Any, journal: JournalStore, when: str
) -> None:
    store = Replaying(journal)
    rt, run_id = unavailable_run(store, SkipClock())  # type: ignore[arg-type]
    serve(rt)
    before = journal.get_run(run_id)
    assert migrate(run_id).status == 200
    if when == "after-the-run-finished":
        finishes_on_v2(rt, run_id)
    after = journal.load(run_id)
    refused = store.again()
    assert refused is not None, "the same migration write landed twice"
    assert journal.load(run_id) == after
    if when == "at-once":
        assert assert_whole(journal, run_id, before)
        finishes_on_v2(rt, run_id)
    assert migrations(journal, run_id) == 1


def test_a_migration_that_read_before_a_concurrent_change_reads_again(
    serve: Any, journal: JournalStore
) -> None:
    """Its write lands late, after another writer changed the run: fenced, decided again."""
    store = Replaying(journal)
    rt, run_id = unavailable_run(store, SkipClock())  # type: ignore[arg-type]
    serve(rt)
    original = store.commit
    raced: list[int] = []

    def late_commit(run_id_: str, entries: Sequence[Any], change: Any = None, **kw: Any) -> None:
        if any(e.name == MIGRATED for e in entries) and not raced:
            # Another invocation of the v2-only deployment marks it unavailable again first.
            journal.commit(
                run_id_,
                [],
                RunChange(
                    expected=frozenset({RunStatus.VERSION_UNAVAILABLE}),
                    status=RunStatus.VERSION_UNAVAILABLE,
                    updated_at_ms=rt.clock.now_ms() + 1,
                ),
            )
            raced.append(journal.get_run(run_id_).revision)
        original(run_id_, entries, change, **kw)

    store.commit = late_commit  # type: ignore[method-assign]
    before = journal.get_run(run_id)
    reply = migrate(run_id)
    assert raced, "the concurrent change never happened: the case tests nothing"
    assert reply.status == 200, reply.text
    assert migrations(journal, run_id) == 1
    assert journal.get_run(run_id).revision > raced[0]  # written after the concurrent change
    assert journal.get_run(run_id).versions["workflow_version"] == "2"
    assert before.revision < raced[0]
    finishes_on_v2(rt, run_id)
