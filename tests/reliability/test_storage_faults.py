"""Storage and bus faults on the real boto3 clients, against in-process moto.

The DynamoDB journal (table from template.yaml, S3 spill), the S3 payload store and the
EventBridge publisher run on boto3 clients whose requests ``boto_faults.Injector`` fails:
throttling after the SDK's retries (the clients allow one attempt), a 500, a read timeout, a
``TransactionCanceledException`` whose reasons are ``TransactionConflict``, an S3 500, a
PutEvents 500 or a response with ``FailedEntryCount > 0``, and a lagging GSI.

What must hold: an infrastructure failure aborts the invocation as ``InfrastructureError``
(never an ``Exception`` agent code can catch and record as its own outcome); nothing wrong is
recorded; once the fault clears, the same run finishes with the fault-free result.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws

from durable_agents import NO_RETRY, AgentRegistry, DurableContext, SkipClock, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.aws.eventbridge import EventBridgePublisher
from durable_agents.core.models import RunStatus
from durable_agents.engine.events import EventPublishError, step_ready
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import InfrastructureError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents_local.template import create_journal_table
from tests.conftest import TEMPLATE
from tests.reliability.boto_faults import Injector

pytestmark = pytest.mark.reliability

ONE_TRY = Config(retries={"total_max_attempts": 1, "mode": "standard"})
D2 = "defect 2: storage/bus errors reach agent code as ClientError, not InfrastructureError"

registry = AgentRegistry()


@agent(name="catcher", version="1", registry=registry)
def catcher(ctx: DurableContext, _: Any) -> str:
    """An agent that catches everything: a storage error it could catch would become its result."""
    try:
        first = ctx.step(lambda: "one", name="first")
        ctx.wait(1, name="nap")  # suspending and resuming write in transactions
        big = ctx.step(lambda: "x" * 500_000, name="big")  # spilled to S3
        return f"{first}-{len(big)}"
    except Exception as exc:  # the point of the test: agent code that swallows errors
        return f"caught {type(exc).__name__}"


def _reserve() -> None:
    raise ClientError({"Error": {"Code": "ConditionalCheckFailedException"}}, "PutItem")


@agent(name="valuer", version="1", registry=registry)
def valuer(ctx: DurableContext, _: Any) -> str:
    """Tagged values (one spilled to S3) and a step's own ClientError, caught by its code: a
    storage ClientError must neither be mistaken for it nor change what the agent sees."""
    try:
        when = ctx.step(lambda: datetime(2026, 1, 1, tzinfo=UTC), name="when")
        ctx.wait(1, name="nap")
        big = ctx.step(lambda: {Decimal(i) / 4 for i in range(12_000)}, name="big")  # > 400 KB
        try:
            ctx.step(_reserve, name="reserve", retry=NO_RETRY)
            code = "reserved"
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
        return f"{when.isoformat()} {len(big)} {sum(big)} {code}"
    except Exception as exc:  # a storage error it could catch would become its result
        return f"caught {type(exc).__name__}"


@pytest.fixture
def world() -> Iterator[dict[str, Any]]:
    with mock_aws():
        injector = Injector()
        ddb = injector.attach(boto3.client("dynamodb", region_name="us-east-1", config=ONE_TRY))
        s3 = injector.attach(boto3.client("s3", region_name="us-east-1", config=ONE_TRY))
        events = injector.attach(boto3.client("events", region_name="us-east-1", config=ONE_TRY))
        create_journal_table(ddb, "journal", TEMPLATE)
        s3.create_bucket(Bucket="payloads")
        journal = DynamoDBJournal(ddb, "journal", payloads=S3PayloadStore(s3, "payloads"))
        clock = SkipClock()
        runtime = Runtime(journal, registry=registry, clock=clock)
        yield {"injector": injector, "journal": journal, "runtime": runtime, "clock": clock,
               "events": events}  # fmt: skip


def _finish(runtime: Runtime, run_id: str) -> Any:
    for _ in range(20):
        runtime.clock.advance(2_000)  # type: ignore[attr-defined]
        outcome = runtime.execute(run_id, budget=None)
        if outcome.kind.value in ("succeeded", "failed"):
            break
        if outcome.wake_at_ms is not None:  # an aborted invocation's claim: wait for its lease
            runtime.clock.advance_to(outcome.wake_at_ms)  # type: ignore[attr-defined]
    return runtime.store.get_run(run_id)


FAULTS = [
    ("write", "throttling"),
    ("write", "internal"),
    ("write", "timeout"),
    ("TransactWriteItems", "transaction-conflict"),
    ("Query", "throttling"),
    ("Query", "internal"),
    ("Query", "timeout"),
    ("PutObject", "s3-internal"),
    ("PutObject", "timeout"),
]


@pytest.mark.parametrize(("operation", "kind"), FAULTS, ids=[f"{o}-{k}" for o, k in FAULTS])
def test_storage_fault_aborts_the_invocation(
    world: dict[str, Any], operation: str, kind: str
) -> None:
    runtime: Runtime = world["runtime"]
    header, _ = runtime.start_run("catcher", None, run_id="run-00000000000000b1")
    world["injector"].fail(operation, kind)
    seen: BaseException | None = None
    try:
        _finish(runtime, header.run_id)
    except BaseException as exc:
        seen = exc
    assert world["injector"].fired[kind] == 1, "the fault never fired: the case tests nothing"
    final = _finish(runtime, header.run_id)  # the platform delivers the event again
    # The agent's result must be the fault-free one, never "caught ClientError".
    assert final.status is RunStatus.SUCCEEDED, final
    assert final.result == '"one-500000"', f"agent code saw the storage error: {final.result}"
    assert isinstance(seen, InfrastructureError), f"surfaced as {type(seen).__name__}: {seen}"


@pytest.mark.parametrize(("operation", "kind"), FAULTS, ids=[f"{o}-{k}" for o, k in FAULTS])
def test_storage_fault_keeps_tagged_values_and_step_errors(
    world: dict[str, Any], operation: str, kind: str
) -> None:
    runtime: Runtime = world["runtime"]
    header, _ = runtime.start_run("valuer", None, run_id="run-00000000000000c1")
    world["injector"].fail(operation, kind)
    seen: BaseException | None = None
    try:
        _finish(runtime, header.run_id)
    except BaseException as exc:
        seen = exc
    assert world["injector"].fired[kind] == 1, "the fault never fired: the case tests nothing"
    final = _finish(runtime, header.run_id)
    assert final.status is RunStatus.SUCCEEDED, final
    expected = '"2026-01-01T00:00:00+00:00 12000 17998500.00 ConditionalCheckFailedException"'
    assert final.result == expected, f"the agent saw something else: {final.result}"
    assert isinstance(seen, InfrastructureError), f"surfaced as {type(seen).__name__}: {seen}"


def test_put_events_500_is_an_infrastructure_error(world: dict[str, Any]) -> None:
    world["injector"].fail("PutEvents", "events-internal")
    publisher = EventBridgePublisher(world["events"], "default")
    with pytest.raises(InfrastructureError):
        publisher.publish([step_ready("run-00000000000000b2")])


def test_put_events_partial_failure_is_reported(world: dict[str, Any]) -> None:
    world["injector"].fail("PutEvents", "partial")
    publisher = EventBridgePublisher(world["events"], "default")
    with pytest.raises((EventPublishError, InfrastructureError)):
        publisher.publish([step_ready("run-00000000000000b3"), step_ready("run-00000000000000b4")])
    assert world["injector"].fired["partial"] == 1


def test_lagging_gsi_never_fires_a_timer_twice_or_early(world: dict[str, Any]) -> None:
    """``due_runs`` keeps answering with a run it listed before (a lagging index): the sweep
    nudges it, and the run's own consistent read decides — nothing runs twice."""
    reg = AgentRegistry()
    calls: list[int] = []

    @agent(name="sleeper", version="1", registry=reg)
    def sleeper(ctx: DurableContext, _: Any) -> int:
        ctx.step(lambda: calls.append(1), name="before")
        ctx.wait(60, name="nap")
        ctx.step(lambda: calls.append(2), name="after")
        return len(calls)

    runtime = Runtime(world["journal"], registry=reg, clock=world["clock"])
    header, _ = runtime.start_run("sleeper", None, run_id="run-00000000000000b5")
    assert runtime.execute(header.run_id, budget=None).kind.value == "suspended"
    world["injector"].stale.add("Query")
    world["clock"].advance(61_000)
    for _ in range(3):  # the stale index lists the run every time
        sweep(runtime, stall_after_ms=300_000)
        runtime.execute(header.run_id, budget=None)
    assert world["injector"].fired["stale-index"] >= 1
    final = runtime.store.get_run(header.run_id)
    assert final.status is RunStatus.SUCCEEDED and calls == [1, 2], (final, calls)
