"""One agent per operation kind, driven on DynamoDB + EventBridge + Scheduler + S3 (moto) the way
the deployed functions drive it, every request billed (``bench_billing.Ledger``).

The platform is played faithfully and only with the runtime's own code paths:

* StepRunner: one ``Runtime.execute(run_id, budget=1, target=...)`` per ``Step Ready`` event
  published on the (moto) bus, parallel branches and child runs included;
* Reconciler: when a run suspends on a timer, the skip-clock jumps to it and the Reconciler's
  ``wake_run`` runs as the one-time schedule would invoke it;
* Api: an approval is decided, a callback completed, as the routes do (``get_wait``, then
  ``record_decision`` / ``complete_callback``, then one ``Step Ready``).

Each counts one Lambda invocation. The relay (DynamoDB stream -> Relay -> PutEvents) that
publishes an ``emit``'s outbox record is not run; its one PutEvents per emitted event is
added to the emit row (``RELAY_EVENTS``).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import boto3
from bench_billing import Bill, Ledger, peek_client
from bench_common import BUS, REMAINING_MS, TABLE, TEMPLATE
from moto import mock_aws
from pydantic import BaseModel

from durable_agents import AgentRegistry, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.reconciler import wake_run
from durable_agents.agent import AgentDefinition
from durable_agents.aws.eventbridge import EventBridgePublisher
from durable_agents.aws.scheduler import EventBridgeWaitScheduler
from durable_agents.core.models import RunChange, RunHeader, RunStatus, WaitStatus
from durable_agents.engine.events import STEP_READY, OutgoingEvent, step_ready
from durable_agents.engine.operations.approval import record_decision
from durable_agents.engine.operations.callback import complete_callback
from durable_agents.engine.outcomes import OutcomeKind
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents.journal.store import input_hash
from durable_agents.llm import LlmRequest, Message, ModelConfig
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.tools import ToolCall, ToolRegistry, ToolResult, tool
from durable_agents_local.template import create_journal_table

BUCKET = "payloads"
GROUP = "durable-agents"
MODEL = ModelConfig(name="bench-model", version="1", provider="scripted", model_id="scripted")
RELAY_EVENTS = {"emit": 1}
RERUN_REUSE = "tool reused (rerun)"
"""A tool call of a rerun that the original already made: its result comes from the ledger."""
SETTLED = {OutcomeKind.SUCCEEDED, OutcomeKind.FAILED}


class Order(BaseModel):
    """A tool's request."""

    n: int


class Receipt(BaseModel):
    """A tool's result."""

    id: str


@tool(name="ship", registry=ToolRegistry(), idempotent=True)
def ship(request: Order, call: ToolCall) -> ToolResult[Receipt]:
    """A tool that acts at once (the provider dedupes on the idempotency key)."""
    return ToolResult(Receipt(id=f"r-{request.n}"), external_id=f"r-{request.n}")


def kind_operation(kind: str, ctx: Any, i: int, child: AgentDefinition[Any, Any] | None) -> None:
    """Operation ``i`` of ``kind`` (every body trivial: the bench measures the runtime).

    ``child`` is the sub-agent an ``invoke`` runs (no other kind uses it).
    """
    if kind == "step":
        ctx.step(lambda: i, name=f"s{i}")
    elif kind == "step 400 KB":  # over the inline limit: the value goes to S3
        ctx.step(lambda: "x" * 400_000, name=f"s{i}")
    elif kind == "llm":
        ctx.llm(f"turn-{i}", LlmRequest(messages=[Message.user(f"q{i}")]), config=MODEL)
    elif kind == "tool":
        ctx.tool(ship, Order(n=i), name=f"ship{i}")
    elif kind == "wait":
        ctx.wait(60, name=f"w{i}")
    elif kind == "approval":
        ctx.wait_for_approval(f"a{i}", request={"n": i}, approvers=["user:bench"])
    elif kind == "callback":
        ctx.wait_for_callback(lambda _cid: None, name=f"cb{i}")
    elif kind == "invoke":
        ctx.invoke(child, i, name=f"child{i}")
    elif kind == "emit":
        ctx.emit("bench.event", {"n": i}, name=f"e{i}")
    else:
        raise ValueError(kind)


def kind_agents(kind: str, count: int) -> list[AgentDefinition[Any, Any]]:
    """The agent doing ``count`` operations of ``kind`` (and the child agent ``invoke`` runs).

    ``parallel branch``: one ``ctx.parallel`` of ``count`` trivial branches.
    """
    registry = AgentRegistry()

    @agent_decorator(name="child", version="1", registry=registry)
    def child(ctx: Any, n: int) -> int:
        return n

    @agent_decorator(name="bench", version="1", registry=registry)
    def bench(ctx: Any, _: int) -> int:
        if kind == "parallel branch":
            branches = [lambda c, i=i: c.step(lambda: i, name="s") for i in range(count)]
            ctx.parallel(branches, name="p").throw_if_error()
        else:
            for i in range(count):
                kind_operation(kind, ctx, i, child)
        return count

    return [bench, child]


class BusPublisher(EventBridgePublisher):
    """Publishes on the (moto) bus and keeps the events, as the bus's rules would route them."""

    def __init__(self, client: Any, bus_name: str) -> None:
        super().__init__(client, bus_name)
        self.sent: list[OutgoingEvent] = []

    def publish(self, events: Any) -> None:
        """Publishes, then remembers, ``events``."""
        super().publish(events)
        self.sent.extend(events)


@dataclass
class Platform:
    """The runtime on moto with every client billed, and what plays the deployed functions."""

    runtime: Runtime
    ledger: Ledger
    publisher: BusPublisher
    clock: SkipClock
    peek: DynamoDBJournal  # unbilled: the driver's own look at the journal
    unbilled_scheduler: Any  # unbilled: plays Scheduler deleting a schedule that fired
    last_run_id: str = ""  # the run ``run`` drove last (what ``rerun`` re-runs)

    def run(self, kind: str, count: int, *, budget: int | None = 1) -> Bill:
        """Starts and drives one run of ``count`` operations of ``kind``; returns its bill."""
        agents = kind_agents(kind, count)
        for definition in agents:
            self.runtime.registry.add(definition)
        if kind == "llm":
            self.runtime.providers["scripted"] = ScriptedProvider.from_turns(
                [{"text": "ok"}] * count
            )
        began = self.ledger.take()
        self.ledger.lambda_invoked()  # the Api's POST /runs
        header, _ = self.runtime.start_run("bench", 0)
        self._drive(header.run_id, budget)
        self.last_run_id = header.run_id
        bill = self.ledger.take() - began
        bill.requests["PutEvents (relay)"] += RELAY_EVENTS.get(kind, 0) * count
        bill.event_chunks += RELAY_EVENTS.get(kind, 0) * count
        return bill

    def rerun(self, count: int) -> Bill:
        """A run of ``count`` tool calls, then its rerun from the start; the rerun's bill.

        Every call of the rerun is reused from the original's ledger (ADR 0027): the row
        ``tool reused (rerun)`` is what one more such call costs.
        """
        self.run("tool", count)  # the original: its own bill is not this row's
        began = self.ledger.take()
        self.ledger.lambda_invoked()  # the Api's POST /runs/{id}/rerun
        _, header, _ = self.runtime.rerun(self.last_run_id, "start")
        assert header is not None
        self._drive(header.run_id, 1)
        return self.ledger.take() - began

    def _drive(self, run_id: str, budget: int | None) -> None:
        queue: deque[tuple[str, str | None]] = deque([(run_id, None)])
        seen = len(self.publisher.sent)
        timers: dict[str, int] = {}
        for _ in range(10_000):
            if not queue:
                if self.peek.get_run(run_id).status.value == "SUCCEEDED":
                    return
                if not self._act_externally(run_id, queue, timers):
                    raise RuntimeError(f"run {run_id} is stuck")
            else:
                current, target = queue.popleft()
                self.ledger.lambda_invoked()
                outcome = self.runtime.execute(
                    current, budget=budget, remaining_ms=REMAINING_MS, target=target
                )
                if outcome.kind is OutcomeKind.FAILED:
                    raise RuntimeError(f"run {current} failed: {outcome.detail}")
                if outcome.kind is OutcomeKind.SUSPENDED and outcome.wake_at_ms is not None:
                    timers[current] = outcome.wake_at_ms
            for event in self.publisher.sent[seen:]:
                if event.detail_type == STEP_READY:
                    queue.append((event.detail["run_id"], event.detail.get("target")))
            seen = len(self.publisher.sent)
        raise RuntimeError(f"run {run_id} did not finish")

    def _act_externally(
        self, run_id: str, queue: deque[tuple[str, str | None]], timers: dict[str, int]
    ) -> bool:
        """What a person, an external system or a schedule does next; False if nothing."""
        for kind in ("approval", "callback"):
            pending = [w for w in self.peek.list_waits(kind, WaitStatus.PENDING)]
            for listed in pending:
                self.ledger.lambda_invoked()  # the Api's POST
                record = self.runtime.store.get_wait(listed.wait_id)
                if kind == "approval":
                    settled = record_decision(
                        self.runtime.store,
                        self.clock,
                        record,
                        approved=True,
                        decided_by="user:bench",
                        comment="",
                        via="bench",
                    )
                else:
                    settled = complete_callback(self.runtime.store, self.clock, record, result=1)
                self.runtime.publisher.publish([step_ready(settled.run_id, f"{kind}-settled")])
                return True
        if timers:
            rid, due = min(timers.items(), key=lambda t: t[1])
            del timers[rid]
            self.clock.advance_to(due)
            self.ledger.lambda_invoked()  # the Reconciler, invoked by the one-time schedule
            wake_run(self.runtime, rid)
            # ActionAfterCompletion=DELETE: on AWS the fired schedule is gone (moto keeps it).
            name = "wake-" + hashlib.sha256(rid.encode()).hexdigest()[:32]
            self.unbilled_scheduler.delete_schedule(Name=name, GroupName=GROUP)
            return True
        return False


@contextmanager
def platform() -> Iterator[Platform]:
    """A fresh moto account: the journal table (template.yaml), bus, schedule group, bucket."""
    with mock_aws():
        region = "us-east-1"
        dynamodb = boto3.client("dynamodb", region_name=region)
        events = boto3.client("events", region_name=region)
        s3 = boto3.client("s3", region_name=region)
        scheduler = boto3.client("scheduler", region_name=region)
        create_journal_table(dynamodb, TABLE, TEMPLATE)
        events.create_event_bus(Name=BUS)
        s3.create_bucket(Bucket=BUCKET)
        scheduler.create_schedule_group(Name=GROUP)
        ledger = Ledger(peek_client())
        for client in (dynamodb, events, s3, scheduler):
            ledger.attach(client)
        clock = SkipClock()
        publisher = BusPublisher(events, BUS)
        runtime = Runtime(
            DynamoDBJournal(dynamodb, TABLE, payloads=S3PayloadStore(s3, BUCKET)),
            registry=AgentRegistry(),
            publisher=publisher,
            clock=clock,
            wait_scheduler=EventBridgeWaitScheduler(
                scheduler,
                group=GROUP,
                target_arn="arn:aws:lambda:us-east-1:123456789012:function:reconciler",
                role_arn="arn:aws:iam::123456789012:role/scheduler",
            ),
        )
        peek = DynamoDBJournal(peek_client(), TABLE, payloads=S3PayloadStore(s3, BUCKET))
        unbilled = boto3.client("scheduler", region_name=region)
        yield Platform(runtime, ledger, publisher, clock, peek, unbilled)


def marginal(kind: str, plat: Platform) -> Bill:
    """The bill of one more operation of ``kind``: a run of 2 minus a run of 1 (3 minus 2
    branches for ``parallel branch``), so the run's start and finish cancel out.
    """
    if kind == RERUN_REUSE:
        return plat.rerun(2) - plat.rerun(1)
    low = 2 if kind == "parallel branch" else 1
    small = plat.run(kind, low)
    big = plat.run(kind, low + 1)
    return big - small


STATUS_CHANGES = (
    "start",
    "RUNNING -> SUSPENDED (timer)",
    "SUSPENDED (timer) -> RUNNING",
    "RUNNING -> SUSPENDED (no timer)",
    "SUSPENDED (no timer) -> RUNNING",
    "RUNNING -> PAUSED",
    "PAUSED -> RUNNING",
    "finish (SUCCEEDED)",
    "first stamping pass (EXPIRING, later)",
    "second stamping pass (out of EXPIRING)",
)
"""The run status changes ``status_change_bills`` measures, in the order one run makes them."""


def status_change_bills(plat: Platform, run_id: str = "status-changes") -> dict[str, Bill]:
    """The bill of each of a run's status changes (``STATUS_CHANGES``), written on its own.

    The journal's own writes, as the runtime commits a header change with nothing else: the
    start (one transaction: header, listing item; then the header echo), each later change
    (the echo's PutItem, then the header's UpdateItem), and the stamping pass of the finished
    run: the first pass lists it again for late writes, the second takes it out
    (``journal.retention``). ``Bill.item_wru["header"]`` is the header's share.
    """
    store, now = plat.runtime.store, 1_000_000
    bills: dict[str, Bill] = {}

    def measured(name: str, write: Callable[[], object]) -> None:
        began = plat.ledger.take()
        write()
        bills[name] = plat.ledger.take() - began

    header = RunHeader(
        run_id=run_id,
        agent="bench",
        versions={"workflow_version": "1"},
        status=RunStatus.RUNNING,
        input="0",
        created_at_ms=now,
        updated_at_ms=now,
        input_hash=input_hash("bench", "0"),
    )
    measured("start", lambda: store.create_run(header))
    moves: list[tuple[str, RunStatus, RunStatus, dict[str, Any]]] = [
        (STATUS_CHANGES[1], RunStatus.RUNNING, RunStatus.SUSPENDED, {"wake_at_ms": now + 60_000}),
        (STATUS_CHANGES[2], RunStatus.SUSPENDED, RunStatus.RUNNING, {"wake_at_ms": None}),
        (STATUS_CHANGES[3], RunStatus.RUNNING, RunStatus.SUSPENDED, {"wake_at_ms": None}),
        (STATUS_CHANGES[4], RunStatus.SUSPENDED, RunStatus.RUNNING, {}),
        (STATUS_CHANGES[5], RunStatus.RUNNING, RunStatus.PAUSED, {}),
        (STATUS_CHANGES[6], RunStatus.PAUSED, RunStatus.RUNNING, {}),
        (STATUS_CHANGES[7], RunStatus.RUNNING, RunStatus.SUCCEEDED, {"result": "1"}),
    ]
    for name, was, status, extra in moves:
        now += 1_000
        change = RunChange(expected=frozenset({was}), status=status, updated_at_ms=now, **extra)
        measured(name, partial(store.commit, run_id, [], change))
    for name in STATUS_CHANGES[8:]:
        due = plat.peek.get_run(run_id).stamp_due_at_ms
        assert due is not None, name
        measured(name, partial(store.stamp_expiry, run_id, due))
    assert plat.peek.get_run(run_id).stamp_due_at_ms is None  # out of every listing
    return bills
