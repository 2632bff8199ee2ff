"""``serdes=`` and the default serializer across operations: polling state, batches, callbacks
and sub-agents see the same values on the first run and on every replay (both journals)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.models import WaitStatus
from durable_agents.core.serde_values import TAG
from durable_agents.engine.operations.callback import complete_callback
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner

HOUR = 3600
ISO_DATE = (lambda d: f'"{d.isoformat()}"', lambda t: date.fromisoformat(t.strip('"')))


@dataclass(frozen=True)
class Progress:
    done: int
    since: datetime


def test_polling_state_keeps_its_types_through_suspensions(journal: JournalStore) -> None:
    seen: list[Progress] = []

    @agent(name="poller", version="1", registry=AgentRegistry())
    def poller(ctx: DurableContext, _: None) -> int:
        def check(state: Progress) -> Progress:
            seen.append(state)
            return Progress(state.done + 1, state.since)

        final = ctx.wait_for_condition(
            check,
            initial_state=Progress(0, datetime(2026, 1, 1, tzinfo=UTC)),
            until=lambda s: s.done >= 3,
            delay_seconds=1,
        )
        seen.append(final)
        return final.done

    result = AgentTestRunner(poller, journal=journal, mode="faithful").run(None)
    assert result.status == "SUCCEEDED", result.error
    assert result.output == 3
    assert all(type(s) is Progress and s.since.tzinfo is not None for s in seen)
    assert {s.done for s in seen} == {0, 1, 2, 3}


def test_polling_state_with_a_serdes(journal: JournalStore) -> None:
    seen: list[Any] = []
    serdes = (lambda n: f"n={n}", lambda t: int(t.removeprefix("n=")))

    @agent(name="counter", version="1", registry=AgentRegistry())
    def counter(ctx: DurableContext, _: None) -> int:
        final = ctx.wait_for_condition(
            lambda n: n + 1, initial_state=0, until=lambda n: n >= 2, serdes=serdes
        )
        seen.append(final)
        ctx.step(lambda: None, name="after")
        return int(final)

    result = AgentTestRunner(counter, journal=journal, mode="faithful").run(None)
    assert result.output == 2
    assert seen == [2, 2]  # first run and the replay after the scope was recorded
    assert result.operation("condition").entries[-1].value == "n=2"


def test_map_item_results_round_trip_on_every_replay(journal: JournalStore) -> None:
    seen: list[list[Any]] = []

    @agent(name="mapper", version="1", registry=AgentRegistry())
    def mapper(ctx: DurableContext, items: list[str]) -> int:
        def price(child: DurableContext, item: str, index: int) -> Any:
            cents = child.step(lambda: Decimal(len(item)) / 4, name="price")
            return {"item": item, "price": cents, "tags": {item, "x"}, "on": date(2026, 1, 1)}

        batch = ctx.map(items, price)
        seen.append(batch.results())
        ctx.step(lambda: None, name="after")
        return len(batch.results())

    result = AgentTestRunner(mapper, journal=journal, mode="faithful").run(["tea", "jam!"])
    assert result.output == 2
    expected = [
        {"item": "tea", "price": Decimal("0.75"), "tags": {"tea", "x"}, "on": date(2026, 1, 1)},
        {"item": "jam!", "price": Decimal(1), "tags": {"jam!", "x"}, "on": date(2026, 1, 1)},
    ]
    assert len(seen) >= 2
    assert all(results == expected for results in seen)


def test_parallel_results_with_a_serdes(journal: JournalStore) -> None:
    seen: list[list[Any]] = []

    @agent(name="fan", version="1", registry=AgentRegistry())
    def fan(ctx: DurableContext, _: None) -> str:
        def branch(days: int) -> Any:
            return lambda child: child.step(lambda: date(2026, 1, 1) + timedelta(days=days))

        batch = ctx.parallel([branch(0), branch(1)], item_serdes=ISO_DATE)
        seen.append(batch.results())
        ctx.step(lambda: None, name="after")
        return "ok"

    result = AgentTestRunner(fan, journal=journal, mode="faithful").run(None)
    assert result.status == "SUCCEEDED", result.error
    assert len(seen) >= 2
    assert all(r == [date(2026, 1, 1), date(2026, 1, 2)] for r in seen)


def test_a_callback_result_through_its_serdes(journal: JournalStore) -> None:
    seen: list[tuple[str, Any]] = []

    @agent(name="waiter", version="1", registry=AgentRegistry())
    def waiter(ctx: DurableContext, _: None) -> str:
        callback = ctx.create_callback("ship", timeout=HOUR, serdes=ISO_DATE)
        seen.append(("ship", callback.result()))
        ctx.step(lambda: None, name="after")
        label = ctx.wait_for_callback("label", lambda cid: None, serdes=ISO_DATE)
        seen.append(("label", label))
        return "ok"

    runner = AgentTestRunner(waiter, journal=journal, mode="faithful")
    run_id = runner.run(None).run_id
    runner.complete_callback(run_id, "ship", result="2026-03-04")
    runner.complete_callback(run_id, "label", result="2026-03-05")
    assert runner.resume(run_id).status == "SUCCEEDED"
    # Seen on the first run after completion and on every replay after it.
    assert [v for k, v in seen if k == "ship"] == [date(2026, 3, 4)] * 3
    assert set(seen) == {("ship", date(2026, 3, 4)), ("label", date(2026, 3, 5))}


def test_a_sent_object_that_looks_like_a_tag_stays_a_dict(journal: JournalStore) -> None:
    got: list[Any] = []

    @agent(name="receiver", version="1", registry=AgentRegistry())
    def receiver(ctx: DurableContext, _: None) -> None:
        got.append(ctx.create_callback("in", timeout=HOUR).result())

    runner = AgentTestRunner(receiver, journal=journal, mode="faithful")
    run_id = runner.run(None).run_id
    (record,) = journal.list_waits("callback", WaitStatus.PENDING)
    forged = {TAG: "dataclass", "class": f"{__name__}:Progress", "fields": {"done": 1}}
    complete_callback(journal, runner.clock, record, result=forged)
    runner.resume(run_id)
    assert got == [forged]


def test_invoke_with_payload_and_result_serdes(journal: JournalStore) -> None:
    registry = AgentRegistry()
    seen: list[Any] = []

    @agent(name="adder", version="1", registry=registry)
    def adder(ctx: DurableContext, numbers: list[str]) -> str:
        return str(sum(Decimal(n) for n in numbers))

    @agent(name="caller", version="1", registry=registry)
    def caller(ctx: DurableContext, _: None) -> str:
        total = ctx.invoke(
            adder,
            (Decimal("1.25"), Decimal("2.5")),
            payload_serdes=(lambda v: json.dumps([str(d) for d in v]), json.loads),
            result_serdes=(str, lambda t: Decimal(t.strip('"'))),
        )
        seen.append(total)
        ctx.step(lambda: None, name="after")
        ctx.step(lambda: None, name="later")  # one more invocation: a replay of the result
        return str(total)

    runner = AgentTestRunner(caller, journal=journal, mode="faithful", agents=[adder])
    result = runner.run(None)
    assert result.status == "SUCCEEDED", result.error
    assert result.output == "3.75"
    assert len(seen) >= 2 and all(s == Decimal("3.75") for s in seen)
