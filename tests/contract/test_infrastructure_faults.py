"""Defect 2: a store error that is not the protocol's own condition failure never reaches agents.

Faults are injected on the real boto3 client (botocore event hooks) in front of moto: throttling
after the SDK's retries, a transaction cancelled for ``TransactionConflict``, a 500, a read
timeout. Each must abort the invocation with ``InfrastructureError`` (agent code cannot catch
it), record nothing as the run's outcome, and the run must finish correctly once the platform
delivers the event again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from durable_agents import AgentRegistry, DurableContext, RunStatus, SkipClock, agent
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import InfrastructureError
from durable_agents.journal.dynamodb import DynamoDBJournal


def throttled(operation: str) -> Exception:
    return ClientError(
        {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}},
        operation,
    )


def server_error(operation: str) -> Exception:
    return ClientError({"Error": {"Code": "InternalServerError", "Message": "oops"}}, operation)


def transaction_conflict(operation: str) -> Exception:
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "conflict"},
            "CancellationReasons": [{"Code": "TransactionConflict"}, {"Code": "None"}],
        },
        operation,
    )


def read_timeout(operation: str) -> Exception:
    return ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")


FAULTS: dict[str, Callable[[str], Exception]] = {
    "throttling": throttled,
    "server-error": server_error,
    "transaction-conflict": transaction_conflict,
    "read-timeout": read_timeout,
}


class Injector:
    """Raises a fault on the n-th call of chosen DynamoDB operations (botocore hook)."""

    def __init__(self, client: Any):
        self.client = client
        self.plan: dict[str, list[int]] = {}
        self.calls: dict[str, int] = {}
        self.fault: Callable[[str], Exception] = throttled
        self.fired = 0
        client.meta.events.register("before-call.dynamodb.*", self._before_call)

    def fail(self, operation: str, *, nth: int, fault: Callable[[str], Exception]) -> None:
        # Counted from now on: the n-th call of ``operation`` after this one fails.
        self.plan.setdefault(operation, []).append(nth + self.calls.get(operation, 0))
        self.fault = fault

    def _before_call(self, model: Any, **_: Any) -> None:
        name = model.name
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.calls[name] in self.plan.get(name, []):
            self.fired += 1
            raise self.fault(name)


@pytest.fixture
def injector(dynamodb_journal: DynamoDBJournal) -> Iterator[Injector]:
    client = dynamodb_journal._client
    yield Injector(getattr(client, "raw", client))


def fallback_agent(registry: AgentRegistry) -> Any:
    @agent(name="fallback", version="1", registry=registry)
    def fallback(ctx: DurableContext, _: Any) -> str:
        # An agent that handles its own errors: an infrastructure failure must not land here.
        try:
            return str(ctx.step(lambda: "primary", name="primary"))
        except Exception:
            return str(ctx.step(lambda: "fallback", name="fallback"))

    return fallback


def drive(runtime: Runtime, run_id: str) -> list[str]:
    """Delivers Step Ready until the run settles; infrastructure aborts are retried."""
    aborted: list[str] = []
    for _ in range(50):
        header = runtime.store.get_run(run_id)
        if header.status.terminal:
            break
        try:
            runtime.execute(run_id, budget=1)
        except InfrastructureError as exc:
            aborted.append(exc.code)
            runtime.clock.advance(16 * 60 * 1000)  # type: ignore[attr-defined]  # the lease ends
    return aborted


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize(
    ("operation", "nth"),
    [
        ("PutItem", 1),  # the step's claim
        ("PutItem", 2),  # the step's result
        ("UpdateItem", 1),  # the run's final status
        ("Query", 1),  # loading the journal
    ],
)
def test_store_faults_abort_the_invocation_and_never_reach_agent_code(
    dynamodb_journal: DynamoDBJournal, injector: Injector, fault: str, operation: str, nth: int
) -> None:
    registry = AgentRegistry()
    fallback_agent(registry)
    clock = SkipClock()
    runtime = Runtime(dynamodb_journal, registry=registry, clock=clock)
    header, _ = runtime.start_run("fallback", None)
    injector.fail(operation, nth=nth, fault=FAULTS[fault])

    aborted = drive(runtime, header.run_id)

    final = dynamodb_journal.get_run(header.run_id)
    assert injector.fired == 1
    assert aborted, "the fault must abort an invocation"
    assert final.status is RunStatus.SUCCEEDED, final.error
    assert final.result == '"primary"'  # the agent's own error branch never ran
    names = {e.name for e in dynamodb_journal.load(header.run_id).entries}
    assert "fallback" not in names


def test_transaction_fault_on_a_suspending_write_is_retried(
    dynamodb_journal: DynamoDBJournal, injector: Injector
) -> None:
    registry = AgentRegistry()

    @agent(name="sleeper", version="1", registry=registry)
    def sleeper(ctx: DurableContext, _: Any) -> str:
        try:
            ctx.wait(30, name="nap")
        except Exception:
            return "woke up wrong"
        return "rested"

    clock = SkipClock()
    runtime = Runtime(dynamodb_journal, registry=registry, clock=clock)
    header, _ = runtime.start_run("sleeper", None)
    injector.fail("TransactWriteItems", nth=1, fault=transaction_conflict)
    with pytest.raises(InfrastructureError) as raised:
        runtime.execute(header.run_id, budget=1)
    assert raised.value.code == "TransactionCanceledException"
    assert dynamodb_journal.get_run(header.run_id).status is RunStatus.RUNNING

    for _ in range(10):
        outcome = runtime.execute(header.run_id, budget=1)
        if outcome.wake_at_ms:
            clock.advance_to(outcome.wake_at_ms)
        if dynamodb_journal.get_run(header.run_id).status.terminal:
            break
    final = dynamodb_journal.get_run(header.run_id)
    assert final.status is RunStatus.SUCCEEDED
    assert final.result == '"rested"'


def test_a_lost_condition_is_still_a_protocol_conflict(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    """The guard must not turn the protocol's own answers into infrastructure failures."""
    registry = AgentRegistry()
    fallback_agent(registry)
    runtime = Runtime(dynamodb_journal, registry=registry, clock=SkipClock())
    header, _ = runtime.start_run("fallback", None, idempotency_key="k1")
    again, created = runtime.start_run("fallback", None, idempotency_key="k1")
    assert (again.run_id, created) == (header.run_id, False)
