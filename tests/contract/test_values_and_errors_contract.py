"""Values and errors of operations: the first run sees exactly what a replay sees.

Each case runs a step (or child scope) in one invocation, then replays it in a fresh
``Runtime`` (a fresh deployment, as a later Lambda invocation would be) — on both journals,
so the DynamoDB path (moto, with S3 spill) stores the tagged values too.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from botocore.exceptions import ClientError
from pydantic import BaseModel

from durable_agents import (
    NO_RETRY,
    AgentRegistry,
    DurableContext,
    PayloadError,
    SkipClock,
    StepError,
)
from durable_agents import agent as agent_decorator
from durable_agents.core.models import EntryType, RunStatus
from durable_agents.core.serde import DEFAULT_SERDES
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.store import JournalStore


class Tier(enum.Enum):
    GOLD = "gold"


@dataclass(frozen=True)
class Line:
    sku: str
    price: Decimal


class Receipt(BaseModel):
    number: int
    issued: datetime
    lines: list[str]


class QuotaExceededError(Exception):
    def __init__(self, account: str, used: Decimal):
        super().__init__(f"{account} used {used}")
        self.account = account
        self.used = used


VALUES: list[Any] = [
    datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    date(2026, 2, 28),
    time(9, 15, tzinfo=UTC),
    Decimal("19.99"),
    UUID(int=42),
    {"b", "a"},
    frozenset({1, 2}),
    (1, "two"),
    b"\x00\xff",
    Tier.GOLD,
    Line("tea", Decimal("2.50")),
    Receipt(number=1, issued=datetime(2026, 1, 1, tzinfo=UTC), lines=["tea"]),
    {"when": [datetime(2026, 1, 1, tzinfo=UTC)], "ids": {UUID(int=1)}, "n": 1},
]


def two_invocations(journal: JournalStore, body: Callable[[DurableContext], Any]) -> str:
    """Runs ``body`` up to its first recorded operation, then finishes it in a fresh Runtime."""
    clock = SkipClock()

    def flow(ctx: DurableContext, _: Any) -> None:
        body(ctx)
        ctx.step(lambda: "done", name="after")  # a second operation: a second invocation

    def deploy() -> Runtime:
        registry = AgentRegistry()
        agent_decorator(name="values", version="1", registry=registry)(flow)
        return Runtime(journal, registry=registry, clock=clock)

    run, _ = deploy().start_run("values", None)
    deploy().execute(run.run_id, budget=1)
    outcome = deploy().execute(run.run_id, budget=None)
    assert journal.get_run(run.run_id).status is RunStatus.SUCCEEDED, outcome.detail
    return run.run_id


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_a_step_result_is_the_same_on_first_run_and_replay(
    journal: JournalStore, value: Any
) -> None:
    seen: list[Any] = []
    two_invocations(journal, lambda ctx: seen.append(ctx.step(lambda: value, name="produce")))
    assert len(seen) == 2
    first, replayed = seen
    assert first == replayed == value
    assert type(first) is type(replayed) is type(value)


@pytest.mark.parametrize("value", VALUES[:4], ids=lambda v: type(v).__name__)
def test_a_child_scope_result_is_the_same_on_first_run_and_replay(
    journal: JournalStore, value: Any
) -> None:
    seen: list[Any] = []

    def scope(child: DurableContext) -> Any:
        return {"inner": child.step(lambda: value, name="inner"), "also": value}

    two_invocations(journal, lambda ctx: seen.append(ctx.run_in_child_context(scope, name="c")))
    assert seen[0] == seen[1] == {"inner": value, "also": value}


def test_a_step_with_a_serdes_pair_records_its_text(journal: JournalStore) -> None:
    seen: list[Any] = []
    serdes = (lambda d: d.strftime("%Y%m%d"), lambda t: date.fromisoformat(t))

    def body(ctx: DurableContext) -> None:
        seen.append(ctx.step(lambda: date(2026, 3, 4), name="d", serdes=serdes))

    run_id = two_invocations(journal, body)
    assert seen == [date(2026, 3, 4), date(2026, 3, 4)]
    recorded = [e for e in journal.load(run_id).entries if e.name == "d"]
    assert [e.value for e in recorded if e.type is EntryType.SUCCEEDED] == ["20260304"]


def test_a_child_scope_with_a_serdes_object(journal: JournalStore) -> None:
    seen: list[Any] = []

    def scope(child: DurableContext) -> set[int]:
        return {child.step(lambda: 1, name="one"), 2}

    def body(ctx: DurableContext) -> None:
        seen.append(ctx.run_in_child_context(scope, name="c", serdes=DEFAULT_SERDES))

    two_invocations(journal, body)
    assert seen == [{1, 2}, {1, 2}]


def test_a_client_error_is_caught_with_its_response_on_first_run_and_replay(
    journal: JournalStore,
) -> None:
    codes: list[tuple[str, str, int]] = []

    def put_item() -> None:
        raise ClientError(
            {
                "Error": {"Code": "ConditionalCheckFailedException", "Message": "taken"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            },
            "PutItem",
        )

    def body(ctx: DurableContext) -> None:
        try:
            ctx.step(put_item, retry=NO_RETRY)
        except ClientError as exc:
            status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
            codes.append((exc.response["Error"]["Code"], exc.operation_name, status))

    two_invocations(journal, body)
    assert codes == [("ConditionalCheckFailedException", "PutItem", 400)] * 2


def test_exceptions_keep_type_args_and_attributes_on_first_run_and_replay(
    journal: JournalStore,
) -> None:
    caught: list[tuple[Any, ...]] = []

    def lookup() -> None:
        raise KeyError("sku-1")

    def spend() -> None:
        raise QuotaExceededError("acme", Decimal("9.5"))

    def body(ctx: DurableContext) -> None:
        try:
            ctx.step(lookup, retry=NO_RETRY)
        except KeyError as exc:
            caught.append(("key", exc.args))
        try:
            ctx.step(spend, retry=NO_RETRY)
        except QuotaExceededError as exc:
            caught.append(("quota", exc.account, exc.used, str(exc)))

    two_invocations(journal, body)
    first = [("key", ("sku-1",)), ("quota", "acme", Decimal("9.5"), "acme used 9.5")]
    # The first invocation ran only ``lookup`` (budget 1); the second replayed it, ran the rest.
    assert caught == [first[0], *first]


def test_an_error_whose_class_is_gone_arrives_as_step_error(journal: JournalStore) -> None:
    caught: list[StepError] = []

    class LocalError(Exception):  # not reachable by module and name: cannot be rebuilt
        def __init__(self, code: int):
            super().__init__(f"code {code}")
            self.code = code

    def fail() -> None:
        raise LocalError(7)

    def body(ctx: DurableContext) -> None:
        try:
            ctx.step(fail, retry=NO_RETRY)
        except StepError as exc:
            caught.append(exc)

    two_invocations(journal, body)
    assert len(caught) == 2
    for exc in caught:
        assert (exc.original_type, exc.message, exc.attributes) == (
            "test_an_error_whose_class_is_gone_arrives_as_step_error.<locals>.LocalError",
            "code 7",
            {"code": 7},
        )


def test_a_value_that_cannot_be_recorded_fails_the_step_without_retrying(
    journal: JournalStore,
) -> None:
    caught: list[str] = []

    def body(ctx: DurableContext) -> None:
        try:
            ctx.step(lambda: object(), name="opaque")
        except PayloadError as exc:
            caught.append(str(exc))

    two_invocations(journal, body)
    assert len(caught) == 2 and "object" in caught[0]


def test_a_value_that_cannot_be_read_back_is_not_recorded_as_a_success(
    journal: JournalStore,
) -> None:
    caught: list[str] = []

    @dataclass
    class Unregistered:  # a local class: recordable, but not resolvable when read back
        n: int

    def body(ctx: DurableContext) -> None:
        try:
            ctx.step(lambda: Unregistered(1), name="local")
        except PayloadError as exc:
            caught.append(str(exc))

    run_id = two_invocations(journal, body)
    assert len(caught) == 2 and "register_type" in caught[0] and caught[0] == caught[1]
    local = [e for e in journal.load(run_id).entries if e.name == "local"]
    assert [e.type for e in local] == [EntryType.STARTED, EntryType.FAILED]
