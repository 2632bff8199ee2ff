"""A map with a counting serializer, under faults: each branch value is serialized once per
branch record (issue 29, defect 6), and a whole-batch serializer once per batch record (issue 32).

The simulator (``sim.Simulator``) drives a small agent instead of the reference one: a map of
``ITEMS`` whose branch values go through ``COUNTING``, a serializer that numbers every call in
the text it writes. It runs twice: given as ``item_serdes=`` (each branch's value only), and
as ``serdes=`` alone (the AWS SDK's meaning: each branch's value, and the ``BatchResult`` as a
whole). A schedule must end with:

* the run SUCCEEDED with the fault-free output;
* each branch's record holding its value's text; the batch record holding none
  (``item_serdes``: it refers to the branches), or exactly one serialization of the whole batch
  under ``batch`` and no branch value of its own (``serdes``);
* the serializer run on values once per branch record, and (``serdes``) on the whole batch
  once, plus at most one call per injected process or storage fault (an invocation that died,
  or whose write failed, after serializing and before its record landed). Before the fix,
  every invocation that recorded the batch serialized every branch value again, and the batch
  record stored them all a second time.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from durable_agents import AgentRegistry, BatchResult, DurableContext, agent
from durable_agents.engine.events import EventPublishError
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.errors import InfrastructureError
from tests.reliability.faults import PROCESS, STORAGE, WRITE_MODES, FaultPlan, Target, mixed_plans
from tests.reliability.sim import RUN_ID, SimResult, Simulator, _Scheduler

pytestmark = pytest.mark.reliability

ITEMS = ["tea", "jam", "bread", "scone"]
EXPECTED = [{"item": item, "stock": index * 10} for index, item in enumerate(ITEMS)]


class CountingSerdes:
    """Numbers every serialization in the text it writes (JSON: the simulator reads results
    as JSON), so the journal tells which call each record holds. A whole ``BatchResult``
    (``serdes=``) is written under ``batch``, a branch's value under ``value``."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self._lock = threading.Lock()

    def serialize(self, value: Any) -> str:
        with self._lock:
            self.calls.append(value)
            number = len(self.calls)
        if isinstance(value, BatchResult):
            return json.dumps({"counted": number, "batch": value.model_dump(mode="json")})
        return json.dumps({"counted": number, "value": value})

    def deserialize(self, text: str) -> Any:
        held = json.loads(text)
        if "batch" in held:
            return BatchResult[Any].model_validate(held["batch"])
        return held["value"]

    def batches(self) -> int:
        """How many times it serialized a whole batch."""
        return sum(isinstance(v, BatchResult) for v in self.calls)


COUNTING = CountingSerdes()
agents = AgentRegistry()


def stock_line(ctx: DurableContext, item: str, index: int) -> dict[str, Any]:
    return {"item": item, "stock": ctx.step(lambda: index * 10, name="stock")}


@agent(name="serdes-map", version="1", registry=agents)
def serdes_map(ctx: DurableContext, _: Any) -> list[Any]:
    """A map with a per-item serializer; a step after it, so later invocations replay it."""
    lines = ctx.map(ITEMS, stock_line, name="lines", item_serdes=COUNTING)
    ctx.step(lambda: None, name="after")
    return lines.results()


@agent(name="serdes-map-whole", version="1", registry=agents)
def serdes_map_whole(ctx: DurableContext, _: Any) -> list[Any]:
    """The same map given the serializer as ``serdes=`` alone: per item and the whole batch."""
    lines = ctx.map(ITEMS, stock_line, name="lines", serdes=COUNTING)
    ctx.step(lambda: None, name="after")
    return lines.results()


# The batch option under test, and the agent that passes the serializer so.
OPTIONS = {"item_serdes": "serdes-map", "serdes": "serdes-map-whole"}


class BatchSimulator(Simulator):
    """The simulator, driving ``serdes-map`` (or ``serdes-map-whole``) instead of the
    reference agent."""

    def __init__(self, plan: FaultPlan, option: str = "item_serdes"):
        COUNTING.calls.clear()
        self.agent_name = OPTIONS[option]
        super().__init__(plan)

    def _runtime(self, sticky: StickyRuns | None) -> Runtime:
        return Runtime(
            self.store,
            registry=agents,
            publisher=self.bus,
            clock=self.clock,
            wait_scheduler=_Scheduler(self),
            sticky=sticky,
        )

    def _start(self) -> None:
        for _ in range(self.plan.max_faults + 10):
            try:
                self.runtime.start_run(self.agent_name, None, run_id=RUN_ID, idempotency_key="k-1")
                return
            except (InfrastructureError, EventPublishError):  # refused: the client retries
                self.clock.advance(1_000)
        raise AssertionError("the run could not be started after the faults stopped")


def problems_of(result: SimResult, option: str = "item_serdes") -> list[str]:
    """What the schedule broke (empty: the values, and the whole batch, were serialized and
    stored once)."""
    problems: list[str] = []
    if result.escaped:
        problems.append(f"an invocation raised an unexpected error: {result.escaped[:3]}")
    if result.status != "SUCCEEDED" or result.output != EXPECTED:
        problems.append(f"the run is {result.status} with {result.output} {result.error}")
    if result.duplicates:
        problems.append(f"results recorded twice: {result.duplicates}")
    # The final journal: the branch records, and the batch record.
    branches: list[Any] = []
    for key, (_, value) in result.journal.get(RUN_ID, {}).items():
        if key.endswith(":lines") and option == "serdes":
            problems.extend(whole_problems(value))
        elif key.endswith(":lines") and "counted" in json.dumps(value):
            problems.append(f"the batch record holds branch values: {value}")
        elif "/" in key and key.rsplit(":", 1)[-1].startswith("branch-"):
            branches.append(value)
    # Each branch record holds the text of one serialization of its own value.
    held = [v for v in branches if isinstance(v, dict) and set(v) == {"counted", "value"}]
    items = sorted(str(v["value"].get("item")) for v in held if isinstance(v["value"], dict))
    if len(held) != len(branches) or items != sorted(ITEMS):
        problems.append(f"each branch record should hold its value once: {branches}")
    elif len({v["counted"] for v in held}) != len(held):
        problems.append(f"branch records hold the same serialization: {branches}")
    faults = sum(
        n
        for cls, n in result.faults.items()
        if cls in STORAGE + PROCESS or cls.startswith("target")
    )
    batches = COUNTING.batches()
    calls = len(COUNTING.calls) - batches
    if not len(ITEMS) <= calls <= len(ITEMS) + faults:
        problems.append(
            f"{calls} serializations for {len(ITEMS)} branch records and {faults} fault(s)"
        )
    if not faults and calls != len(ITEMS):
        problems.append(f"{calls} serializations without a fault, for {len(ITEMS)} branches")
    wanted = 1 if option == "serdes" else 0  # the whole batch, once per batch record
    if not wanted <= batches <= wanted * (1 + faults):
        problems.append(f"the whole batch serialized {batches} time(s), {faults} fault(s)")
    return problems


def whole_problems(value: Any) -> list[str]:
    """What is wrong with a batch record written with ``serdes=`` (the whole batch): it must
    hold one serialization of the whole ``BatchResult`` under ``batch``, and nothing else of
    the values."""
    if not isinstance(value, dict) or set(value) != {"branches", "completion_reason", "batch"}:
        return [f"the batch record is not in the whole-batch form: {value}"]
    held = json.loads(value["batch"])
    items = held.get("batch", {}).get("items", [])
    if "counted" not in held or [i.get("result") for i in items] != EXPECTED:
        return [f"the batch record's text is not the whole batch: {value}"]
    return []


def run(plan: FaultPlan, option: str = "item_serdes") -> None:
    simulator = BatchSimulator(plan, option)
    result = simulator.run()
    problems = problems_of(result, option)
    assert not problems, (
        f"{problems}\nreproduce with: {plan.describe()}\nfaults injected: {dict(result.faults)}"
    )


RANDOM = mixed_plans(12)


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("plan", list(RANDOM.values()), ids=list(RANDOM))
def test_a_map_serializes_each_branch_value_once_per_branch_record(
    plan: FaultPlan, option: str
) -> None:
    run(plan, option)


# Every write boundary of the batch record and of a branch's record (its child scope).
TARGETED = {
    f"{op}-{point}-{mode}": FaultPlan(targets=(Target(op, point, mode),), reviewer=False)
    for op in ("lines", "branch-2")
    for point, mode in [
        *((p, m) for p in ("before_claim", "after_record") for m in ("crash", "timeout")),
        *(("commit", m) for m in WRITE_MODES),
    ]
}


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("plan", list(TARGETED.values()), ids=list(TARGETED))
def test_faults_at_the_batch_and_branch_writes_serialize_no_value_twice_once_recorded(
    plan: FaultPlan, option: str
) -> None:
    run(plan, option)
    if plan.targets[0].op == "lines":
        # Recording the batch serializes no branch value: however often it is tried, the
        # values were serialized by their branches only (``serdes``: and the whole batch,
        # once per try).
        values = [v for v in COUNTING.calls if not isinstance(v, BatchResult)]
        assert len(values) == len(ITEMS)
        if option == "item_serdes":
            assert COUNTING.batches() == 0
