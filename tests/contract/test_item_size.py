"""DynamoDB's 400 KB limit is per item: runs with large values must still finish.

Each scenario runs on both backends (the in-memory journal has no limit, so there it shows the
behaviour is the same); on moto every item the scenario left in the table is measured with the
rules DynamoDB bills by — moto does not enforce the limit on every path (and applies a refused
UpdateItem partially), so the rule is asserted here instead of relying on moto raising.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.models import EffectStatus, OpKind, RunStatus, WaitStatus
from durable_agents.engine.operations.approval import ApprovedRequestMismatchError, record_decision
from durable_agents.engine.wait_records import settle
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.item_size import ITEM_LIMIT_BYTES, item_size
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolCall, ToolRegistry, tool
from durable_agents_local.template import create_journal_table
from durable_agents_local.testing import AgentTestRunner
from tests.conftest import TEMPLATE

KB = 1000


def text(size: int, fill: str = "x") -> str:
    return fill * size


def _value_size(value: dict[str, Any]) -> int:
    """DynamoDB's size of one attribute value (written independently of the library)."""
    (kind, inner), *_ = value.items()
    if kind in ("S", "B"):
        return len(inner.encode()) if isinstance(inner, str) else len(inner)
    if kind == "N":
        digits = format(abs(Decimal(inner)).normalize(), "f").replace(".", "").strip("0")
        return (len(digits) + 1) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + _value_size(v) for k, v in inner.items())
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in inner)
    raise AssertionError(f"unexpected attribute type {kind}")


def stored_items(journal: JournalStore) -> list[dict[str, Any]]:
    """Every item in the moto table (empty for the in-memory journal)."""
    if not isinstance(journal, DynamoDBJournal):
        return []
    client = journal._client  # the test's own moto client
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": "journal"}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def assert_every_item_fits(journal: JournalStore) -> None:
    for item in stored_items(journal):
        size = sum(len(name.encode()) + _value_size(v) for name, v in item.items())
        assert size < ITEM_LIMIT_BYTES, f"{item['pk']['S']} {item['sk']['S']}: {size} bytes"


def test_the_item_size_is_measured_the_way_dynamodb_bills_it() -> None:
    # Names count as much as values; numbers take a byte per two significant digits plus one;
    # maps take 3 bytes plus a byte per element.
    assert item_size({"ab": {"S": "héllo"}}) == 2 + 6
    assert item_size({"n": {"N": "1000"}}) == 1 + 2
    assert item_size({"n": {"N": "12345"}}) == 1 + 4
    assert item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + 1 + 1 + 1
    assert item_size({"l": {"L": [{"BOOL": True}, {"NULL": True}]}}) == 1 + 3 + 2 + 2
    sample = {"pk": {"S": "RUN#r"}, "v": {"M": {"a": {"N": "-0.5"}, "b": {"S": "x" * 10}}}}
    assert item_size(sample) == sum(len(k) + _value_size(v) for k, v in sample.items())


def test_large_input_and_large_result_finish(journal: JournalStore) -> None:
    @agent(name="echo", version="1", registry=AgentRegistry())
    def echo(ctx: DurableContext, data: str) -> str:
        return ctx.step(lambda: text(150 * KB, "r"), name="make") + data[:1]

    runner = AgentTestRunner(echo, journal=journal)
    result = runner.run(text(300 * KB, "i"))
    assert result.status == "SUCCEEDED", result.header.error
    assert result.output == text(150 * KB, "r") + "i"
    header = journal.get_run(result.run_id)
    assert header.input == json.dumps(text(300 * KB, "i"))
    assert_every_item_fits(journal)


class Payment(BaseModel):
    order_id: str
    memo: str


def test_approval_of_a_large_request_is_decided_and_executes_exactly_it(
    journal: JournalStore,
) -> None:
    executed: list[Payment] = []

    @tool(name="pay", registry=ToolRegistry(), requires_approval=True, approvers=["group:f"])
    def pay(request: Payment, call: ToolCall) -> str:
        executed.append(request)
        return "paid"

    @agent(name="payer", version="1", registry=AgentRegistry())
    def payer(ctx: DurableContext, memo: str) -> str:
        return ctx.tool(pay, Payment(order_id="o-1", memo=memo))

    runner = AgentTestRunner(payer, journal=journal, mode="faithful")
    memo = text(210 * KB, "m")
    result = runner.run(memo)
    assert result.status == "SUSPENDED"
    (pending,) = journal.list_waits("approval", WaitStatus.PENDING)
    decided = record_decision(
        journal, runner.clock, pending, approved=True, decided_by="user:a", comment="", via="jwt"
    )
    assert "request" not in (decided.outcome or {})  # the outcome never repeats the request
    assert_every_item_fits(journal)
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED", final.header.error
    assert executed == [Payment(order_id="o-1", memo=memo)]
    assert journal.get_wait(pending.wait_id).status is WaitStatus.COMPLETED
    assert_every_item_fits(journal)


def _refund_agent(executed: list[Payment]) -> Any:
    @tool(name="pay", registry=ToolRegistry(), requires_approval=True, approvers=["group:f"])
    def pay(request: Payment, call: ToolCall) -> str:
        executed.append(request)
        return "paid"

    @agent(name="payer", version="1", registry=AgentRegistry())
    def payer(ctx: DurableContext, _: None) -> str:
        # The same request on every replay: a changed one pauses the run (input fingerprints).
        return ctx.tool(pay, Payment(order_id="o-1", memo="approved memo"))

    return payer


def _settle_as(journal: JournalStore, runner: AgentTestRunner, decision: dict[str, Any]) -> None:
    (pending,) = journal.list_waits("approval", WaitStatus.PENDING)
    payload = json.dumps(decision, separators=(",", ":"))
    settle(
        journal,
        runner.clock,
        pending,
        status=WaitStatus.COMPLETED,
        outcome=decision,
        value=payload,
        kind=OpKind.APPROVAL,
    )


def test_decisions_recorded_with_the_request_still_replay(journal: JournalStore) -> None:
    # How decisions were recorded before they named the request by hash.
    executed: list[Payment] = []
    runner = AgentTestRunner(_refund_agent(executed), journal=journal, mode="faithful")
    result = runner.run(None)
    approved = '{"memo":"approved memo","order_id":"o-1"}'
    old = {"approved": True, "decided_by": "user:a", "comment": "", "decided_at": "t", "via": "jwt"}
    _settle_as(journal, runner, {**old, "request": approved})
    assert runner.resume(result.run_id).status == "SUCCEEDED"
    assert executed == [Payment(order_id="o-1", memo="approved memo")]


def test_a_decision_naming_another_request_is_refused(journal: JournalStore) -> None:
    executed: list[Payment] = []
    runner = AgentTestRunner(_refund_agent(executed), journal=journal, mode="faithful")
    result = runner.run(None)
    decision = {"approved": True, "decided_by": "user:a", "decided_at": "t", "via": "jwt"}
    _settle_as(journal, runner, {**decision, "request_sha256": "0" * 64})
    final = runner.resume(result.run_id)
    assert final.status == "FAILED"
    assert final.header.error is not None
    assert final.header.error.type == ApprovedRequestMismatchError.__name__
    assert executed == []


class Lookup(BaseModel):
    query: str


def test_large_tool_result_commits_with_its_effect_record(journal: JournalStore) -> None:
    @tool(name="fetch", registry=ToolRegistry())
    def fetch(request: Lookup, call: ToolCall) -> str:
        return text(300 * KB, "f")

    @agent(name="fetcher", version="1", registry=AgentRegistry())
    def fetcher(ctx: DurableContext, query: str) -> int:
        return len(ctx.tool(fetch, Lookup(query=query)))

    runner = AgentTestRunner(fetcher, journal=journal)
    result = runner.run(text(120 * KB, "q"))  # the request and the result share the record
    assert result.status == "SUCCEEDED", result.header.error
    assert result.output == 300 * KB
    (effect,) = journal.load(result.run_id).effects
    assert effect.status is EffectStatus.COMMITTED
    assert effect.result == json.dumps(text(300 * KB, "f"))
    assert_every_item_fits(journal)


@pytest.fixture
def journal_without_bucket(aws: None) -> DynamoDBJournal:
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_journal_table(client, "journal", TEMPLATE)
    return DynamoDBJournal(client, "journal")


def test_a_result_no_store_can_take_goes_to_review(journal_without_bucket: DynamoDBJournal) -> None:
    calls: list[str] = []

    @tool(name="export", registry=ToolRegistry())
    def export(request: Lookup, call: ToolCall) -> str:
        calls.append(request.query)
        return text(500 * KB, "e")

    @agent(name="exporter", version="1", registry=AgentRegistry())
    def exporter(ctx: DurableContext, query: str) -> int:
        return len(ctx.tool(export, Lookup(query=query)))

    journal = journal_without_bucket
    runner = AgentTestRunner(exporter, journal=journal)
    result = runner.run("all")
    # It happened, but nothing can hold the result: a person decides; it is never left PREPARED.
    assert calls == ["all"]
    assert result.status == "PAUSED"
    (parked,) = journal.effects_in_review()
    assert parked.status is EffectStatus.NEEDS_REVIEW
    assert "cannot be recorded" in str((parked.note or {}).get("reason"))
    assert journal.stale_effects(runner.clock.now_ms() + 10**12) == []
    assert journal.get_run(result.run_id).status is RunStatus.PAUSED
    assert_every_item_fits(journal)
