"""``ctx.continue_as_new`` on both journal backends (ADR 0016).

A run that continues as new keeps its run id, starts a fresh journal (``load`` reads only the
current generation), keeps earlier generations as history, carries unconsumed events over,
and refuses the call where a generation cannot end.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from durable_agents import (
    AgentRegistry,
    ContinueAsNewNotAllowedError,
    DurableContext,
    Secret,
    agent,
)
from durable_agents.core.models import EntryType, OpKind, RunStatus
from durable_agents.engine.inbox import send_event
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner
from tests.contract.looping_agent import Counter, looping_agent


def test_a_looping_run_keeps_its_id_and_replays_only_its_current_generation(
    journal: JournalStore,
) -> None:
    runner = AgentTestRunner(looping_agent(), journal=journal, mode="faithful")
    done = runner.run({"n": 0})
    assert done.status == "SUCCEEDED", done.error
    assert done.output == 12  # 4 generations of 3 increments, each started by the last
    header = journal.get_run(done.run_id)
    assert header.generation == 3
    assert header.input == '{"n":9}'  # the current generation's input
    current = journal.load(done.run_id)
    assert current.header.generation == 3
    # Only the current generation: its opening record and its three steps.
    assert {e.position.split(":")[0] for e in current.entries} == {"G000003"}
    assert [e.kind for e in current.entries if e.type is EntryType.SUCCEEDED] == [
        OpKind.GENERATION,
        OpKind.STEP,
        OpKind.STEP,
        OpKind.STEP,
    ]
    assert all(e.op_id.startswith(f"{done.run_id}:g3/") for e in current.entries)


def test_earlier_generations_stay_readable_and_linked(journal: JournalStore) -> None:
    runner = AgentTestRunner(looping_agent(), journal=journal, mode="faithful")
    done = runner.run({"n": 0})
    inputs: list[str | None] = []
    for generation in range(4):
        snapshot = journal.load_generation(done.run_id, generation)
        results = [e for e in snapshot.entries if e.type is EntryType.SUCCEEDED]
        steps = [e.value for e in results if e.kind is OpKind.STEP]
        assert steps == [str(3 * generation + i) for i in (1, 2, 3)]
        if generation:
            opening = results[0]
            assert opening.kind is OpKind.GENERATION
            assert opening.meta["generation"] == generation
            assert opening.meta["continued_from"] == f"{done.run_id}:" + (
                "continue_as_new:4" if generation == 1 else f"g{generation - 1}/continue_as_new:4"
            )
            inputs.append(opening.value)
        closing = [e for e in results if e.kind is OpKind.CONTINUE]
        if generation < 3:
            assert len(closing) == 1
            assert closing[0].meta == {"next_generation": generation + 1}
        else:
            assert closing == []
    assert inputs == ['{"n":3}', '{"n":6}', '{"n":9}']  # each recorded once
    assert journal.load_generation(done.run_id, 7).entries == []  # never had it


def test_the_input_is_validated_and_a_secret_refused(journal: JournalStore) -> None:
    registry = AgentRegistry()

    @agent(name="bad-input", version="1", registry=registry)
    def bad_input(ctx: DurableContext, state: Counter) -> str:
        ctx.step(lambda: 1, name="one")
        ctx.continue_as_new({"n": "not a number"})

    @agent(name="secret-input", version="1", registry=registry)
    def secret_input(ctx: DurableContext, state: Any) -> str:
        ctx.continue_as_new({"token": Secret("s3cr3t")})

    failed = AgentTestRunner(bad_input, journal=journal).run({"n": 0})
    assert failed.status == "FAILED"
    assert failed.error is not None and failed.error.type == "InputValidationError"
    assert journal.get_run(failed.run_id).generation == 0
    refused = AgentTestRunner(secret_input, journal=journal).run({"n": 0})
    assert refused.status == "FAILED"
    assert refused.error is not None and "s3cr3t" not in str(refused.error)
    assert refused.error.type == "SecretSerializationError"
    assert journal.get_run(refused.run_id).generation == 0


@pytest.mark.parametrize("where", ["child", "branch", "step"])
def test_only_the_top_level_context_may_continue_as_new(journal: JournalStore, where: str) -> None:
    @agent(name=f"nested-{where}", version="1", registry=AgentRegistry())
    def nested(ctx: DurableContext, state: Any) -> str:
        def body(c: DurableContext) -> None:
            c.continue_as_new({"again": True})

        try:
            if where == "child":
                ctx.run_in_child_context(body, name="inner")
            elif where == "branch":
                return str(ctx.parallel([body], name="fan").failures[0].error)
            else:
                ctx.step(lambda: ctx.continue_as_new({}), name="leaf")
        except ContinueAsNewNotAllowedError as exc:
            return exc.where
        except Exception as exc:  # a step's error, rebuilt
            return type(exc).__name__ + ": " + str(exc)
        return "returned"

    done = AgentTestRunner(nested, journal=journal).run({})
    assert done.status == "SUCCEEDED", done.error
    expected = {"child": "a child context", "branch": "a parallel branch", "step": "a step"}
    assert expected[where] in str(done.output)
    assert journal.get_run(done.run_id).generation == 0


def chat_agent() -> Any:
    @agent(name="chat-gen", version="1", registry=AgentRegistry())
    def chat(ctx: DurableContext, state: dict[str, Any]) -> dict[str, Any]:
        heard = list(state["heard"])
        for _ in range(2):
            message = ctx.wait_for_event("message", timeout=3600)
            heard.append([message.seq, message.payload])
            if message.payload == "bye":
                return {"heard": heard}
        ctx.continue_as_new({"heard": heard})

    return chat


def test_events_not_taken_yet_stay_for_the_next_generation_in_order(
    journal: JournalStore,
) -> None:
    runner = AgentTestRunner(chat_agent(), journal=journal, mode="faithful")
    header, _ = runner.runtime.start_run("chat-gen", {"heard": []})
    for text in ("a", "b", "c", "d", "e"):  # all before the run starts: two generations' worth
        send_event(journal, runner.clock, header.run_id, "message", text)
    waiting = runner.resume(header.run_id)
    assert waiting.status == "SUSPENDED"
    assert journal.get_run(header.run_id).generation == 2  # took a, b; c, d; then e
    done = runner.send_event(header.run_id, "message", "bye")
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {
        "heard": [[1, "a"], [2, "b"], [3, "c"], [4, "d"], [5, "e"], [6, "bye"]],
    }
    assert done.run_id == header.run_id


def test_approvals_and_cancel_address_the_current_generation(journal: JournalStore) -> None:
    @agent(name="approver-gen", version="1", registry=AgentRegistry())
    def approver(ctx: DurableContext, state: dict[str, int]) -> str:
        decision = ctx.wait_for_approval(
            "refund", request={"amount": state["round"]}, approvers=["user:test"]
        )
        if state["round"] < 2 and decision.approved:
            ctx.continue_as_new({"round": state["round"] + 1})
        return f"round {state['round']}: {decision.approved}"

    runner = AgentTestRunner(approver, journal=journal)
    waiting = runner.run({"round": 0})
    waiting = runner.decide(waiting.run_id, approved=True)
    assert waiting.status == "SUSPENDED"
    pending = runner.pending_waits(waiting.run_id, "approval")
    assert len(pending) == 1 and pending[0].operation_id.startswith(f"{waiting.run_id}:g1/")
    assert runner.journal.get_run(waiting.run_id).generation == 1
    cancelled = runner.cancel(waiting.run_id)
    assert cancelled.status == RunStatus.CANCELLED.value
    assert journal.get_run(waiting.run_id).generation == 1


def test_a_delivery_after_the_switch_forks_nothing(journal: JournalStore) -> None:
    runner = AgentTestRunner(looping_agent(per_generation=1, until=3), journal=journal)
    header, _ = runner.runtime.start_run("looper", {"n": 0})
    # The step spends the budget; the switch ends the invocation and needs none.
    switched = runner.runtime.execute(header.run_id, budget=1)
    assert switched.kind.value == "continue"
    assert switched.detail == "continued as new: generation 1"
    assert switched.executed == [f"{header.run_id}:inc:1", f"{header.run_id}:continue_as_new:2"]
    # The Step Ready that followed, and a duplicate of it: one goes on, the other replays.
    first = runner.runtime.execute(header.run_id, budget=0)
    assert first.executed == []
    again = runner.runtime.execute(header.run_id, budget=1)
    assert again.executed[0] == f"{header.run_id}:g1/inc:1"
    openings = [
        e for e in journal.load_generation(header.run_id, 1).entries if e.kind is OpKind.GENERATION
    ]
    assert len(openings) == 1
    done = runner.resume(header.run_id)
    assert done.output == 3
    assert journal.get_run(header.run_id).generation == 2


def test_a_switch_decided_on_a_stale_read_is_refused(journal: JournalStore) -> None:
    """Two invocations reach ``continue_as_new`` on the same read: exactly one switches."""
    from durable_agents.engine.generations import ContinueAsNew, switch_generation
    from durable_agents.engine.invocation import Invocation

    runner = AgentTestRunner(looping_agent(per_generation=1, until=3), journal=journal)
    header, _ = runner.runtime.start_run("looper", {"n": 0})
    runner.runtime.execute(header.run_id, budget=0)  # nothing yet: budget spent at once
    stale = journal.load(header.run_id)
    outcomes = []
    for _ in range(2):
        inv = Invocation(journal, stale, clock=runner.clock, budget=None, lease_ms=60_000)
        signal = ContinueAsNew("00000001", f"{header.run_id}:continue_as_new:1", '{"n":5}')
        outcomes.append(switch_generation(journal, runner.clock, inv, signal))
    assert outcomes[0].detail == "continued as new: generation 1"
    assert outcomes[1].kind.value == "continue" and outcomes[1].detail.startswith("reload")
    after = journal.get_run(header.run_id)
    assert (after.generation, after.input) == (1, '{"n":5}')
    generation_one = journal.load(header.run_id).entries
    assert [e.kind for e in generation_one] == [OpKind.GENERATION]


def test_on_dynamodb_retention_stamps_every_generation(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    journal = dynamodb_journal
    runner = AgentTestRunner(looping_agent(), journal=journal, mode="faithful")
    done = runner.run({"n": 0})
    client = boto3.client("dynamodb", region_name="us-east-1")
    owned = [i for i in _items(client) if i["pk"]["S"] == f"RUN#{done.run_id}"]
    generations = {i["sk"]["S"][:10] for i in owned if i["sk"]["S"].startswith("J#G")}
    assert generations == {"J#G000001:", "J#G000002:", "J#G000003:"}
    header = journal.get_run(done.run_id)
    assert header.stamp_due_at_ms is not None
    journal.stamp_expiry(done.run_id, header.stamp_due_at_ms)
    owned = [i for i in _items(client) if i["pk"]["S"] == f"RUN#{done.run_id}"]
    # The header, its listing item and its echo; 3 steps x 2 entries in each of 4
    # generations; 3 switches x 2.
    assert len(owned) == 3 + 4 * 6 + 3 * 2
    assert all("ttl" in i for i in owned), [i["sk"]["S"] for i in owned if "ttl" not in i]


def test_on_dynamodb_a_load_reads_only_the_current_generation(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    journal = dynamodb_journal
    runner = AgentTestRunner(looping_agent(until=30), journal=journal, mode="faithful")
    done = runner.run({"n": 0})
    assert journal.get_run(done.run_id).generation == 9
    calls: list[dict[str, Any]] = []
    client = boto3.client("dynamodb", region_name="us-east-1")

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

        def query(self, **kwargs: Any) -> Any:
            page = client.query(**kwargs)
            calls.append({"kwargs": kwargs, "count": page["Count"]})
            return page

    cold = DynamoDBJournal(Counting(), "journal")  # a new process: nothing known yet
    snapshot = cold.load(done.run_id)
    assert len(snapshot.entries) == 7
    # Cold: the one page of the whole partition that found the header (never a second:
    # the header sorts first), then the generation's ranges.
    whole = [c for c in calls if "BETWEEN" not in c["kwargs"]["KeyConditionExpression"]]
    assert len(whole) == 1 and "ExclusiveStartKey" not in whole[0]["kwargs"]
    assert [c["count"] for c in calls[1:]] == [7, 0]
    calls.clear()
    cold.load(done.run_id)  # warm: the generation is known, no whole-partition Query
    read_warm = sum(c["count"] for c in calls)
    assert read_warm == 7  # the generation's entries, and no effect record
    assert all("BETWEEN" in c["kwargs"]["KeyConditionExpression"] for c in calls)


def _items(client: Any) -> list[dict[str, Any]]:
    return list(client.scan(TableName="journal", ConsistentRead=True).get("Items", []))
