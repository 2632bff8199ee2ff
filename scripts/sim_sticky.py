"""Sticky continuation under Lambda-like routing: CPU per run with it on and off (ADR 0021).

Run ``python scripts/sim_sticky.py --quick`` (seconds) or ``python scripts/sim_sticky.py``
(the fuller run ADR 0021 records: about 25 minutes on 2 busy cores; ``--long-containers ""``
or ``--containers ""`` runs half of it). Not part of ``make bench``.

What it simulates. ``K`` warm StepRunner containers, each a real ``Runtime`` of its own (with
its own ``StickyRuns(STICKY_RUNS=16)``, as ``aws.deployment.build_runtime`` makes it, or none:
``STICKY_RUNS=0``; and its own warm journal cache, ``replay_index.WarmRecords``), all on one
in-memory journal (the table). A discrete-event loop plays the platform on a simulated clock:

* ``runs_in_flight`` runs are under way at once (``--utilisation`` of the containers: runs
  keep a container busy for nearly all their life, model and tool calls taking seconds and a
  delivery a few hundred milliseconds). The runs measured start first; while any of them is
  unfinished, a run that ends is replaced by a short filler run (10 or 30 operations, not
  measured), so the competition for containers stays the same to the end. The long run's
  fillers (thousands) are routed and keep containers busy but run no agent: the long run's
  hits depend on the routing alone, and their CPU would dwarf the run measured;
* every ``Step Ready`` an invocation publishes is delivered after an EventBridge -> Lambda
  latency to **an idle container chosen at random** (``--routing random``: Lambda gives an
  event to any idle warm execution environment, not to the one that holds the run); when none
  is idle it waits for the first one to free up. ``--routing mru`` (the most recently freed
  idle container) is a sensitivity check, not something Lambda promises; ``--routing away``
  (never the run's last container while another is idle) measures what sticky continuation
  costs when it never hits;
* an invocation really runs ``Runtime.execute(run_id, agent_budget=True, ...)`` as the
  StepRunner does, on the container it was routed to, and its CPU (``time.thread_time``: the
  parked agents' greenlets run on this thread) is charged to its run. It keeps the container
  busy for a simulated time: ``OVERHEAD_MS``, plus the model's latency if it called the
  model, plus the tool's if it called a tool (log-normal, drawn per run: ``LATENCY``). Nothing
  sleeps.

The agents. **Typical** runs are the library's tool-use loop (``run_tool_loop``) over a
scripted model that asks for one tool per turn (two, run as parallel branches, in
``--parallel-share`` of the turns) and answers at the end: 10, 30, 100 and 300 operations,
with the defaults of ADR 0016/0017: one operation per invocation (``InvocationBudget()``) and
no continue-as-new (nothing calls it unless the agent does). The **long** run is one agent of
10,000 operations (5,000 model turns, each followed by a tool call; the model sees the opening
message and the last ``WINDOW`` messages), calling ``ctx.continue_as_new`` every
``--long-continue-every`` turns as ADR 0016 asks of long loops (0: never; the replay is then
quadratic, about an hour and a half of CPU per 10,000-operation run replayed every time).

The same seed gives the same runs, latencies and routing with sticky continuation on and off
(nothing the simulation draws depends on it), so the two are compared run by run; only the CPU
times are measurements. ``simulate_pair`` plays both in lockstep in one process, event by event
(and checks they agree), so each invocation with it on is timed beside the same one with it
off; the cyclic garbage collector runs between events, untimed (this process holds every
container's parked agents). Each scenario runs in a process of its own (``--child``);
``--rounds`` repeats them, and the medians of the rounds are shown.

``hit rate``: of the invocations whose run's previous invocation ended where an agent parks (an
untargeted invocation that ended ``CONTINUE`` for one more operation), the share that went on
with a parked agent (``StickyRuns.resumed``, sticky on). ``routed back``: the share the routing
sent to the container of the run's previous invocation (the hit rate can only be lower).
``--sweep`` prints the routing's hit rate alone (no runtime: each container keeps the 16 runs
it advanced last) over containers, utilisation and routing, in a second.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import bench_common  # noqa: F401  (puts the runtime on sys.path; points AWS at nothing real)
from pydantic import BaseModel

from durable_agents import AgentRegistry, SkipClock, agent
from durable_agents.core.invocation_budget import InvocationBudget
from durable_agents.engine import replay_index
from durable_agents.engine.events import STEP_READY, CollectingPublisher
from durable_agents.engine.outcomes import OutcomeKind
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.carriers import default_carrier
from durable_agents.engine.sticky.parking import DEFAULT_STICKY_RUNS, StickyRuns
from durable_agents.engine.tool_loop import run_tool_loop, tool_spec
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.llm.types import (
    ContentBlock,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
    Usage,
)
from durable_agents.tools import ToolCall, ToolRegistry, tool

TYPICAL_SIZES = (10, 30, 100, 300)
"""Operations of the typical runs measured."""
FILLER_SIZES = (10, 30)
LONG_SIZE = 10_000
WINDOW = 6
"""Messages of the long agent's conversation its model sees besides the opening one."""
REMAINING_MS = 30_000  # template.yaml's function timeout: what the StepRunner passes at most
START_MS = 1_767_225_600_000
MODEL = ModelConfig(name="sim-model", version="1", provider="sim", model_id="sim-model")
TASK = "Find out what the customer ordered, check the stock and the carrier, then answer."


@dataclass(frozen=True)
class Latency:
    """A log-normal latency: its median (seconds) and sigma."""

    median_s: float
    sigma: float

    def draw(self, rng: random.Random) -> float:
        """One latency, in milliseconds."""
        return 1000 * self.median_s * math.exp(rng.gauss(0.0, self.sigma))


LATENCY = {
    "model": Latency(2.5, 0.6),  # a model turn: ~0.9-6.7 s (5th-95th percentile)
    "tool": Latency(0.3, 1.0),  # a tool call: ~0.06-1.6 s
    "delivery": Latency(0.25, 0.5),  # Step Ready -> EventBridge -> Lambda: ~0.1-0.6 s
    "pause": Latency(1.0, 1.0),  # between a run's end and the next run's start
}
OVERHEAD_MS = 20.0
"""An invocation's own time besides the model and the tool (journal reads and writes)."""


@dataclass(frozen=True)
class Scenario:
    """One simulation: what runs, on how many containers, routed how."""

    containers: int
    runs_in_flight: int
    sizes: tuple[int, ...] = TYPICAL_SIZES
    """Sizes (operations) of the typical runs measured, ``per_size`` runs of each."""
    per_size: int = 1
    long_turns: int = 0
    """Model turns of the long run; when set, it is the only run measured."""
    long_continue_every: int = 0
    parallel_share: float = 0.0
    routing: str = "random"
    sticky: bool = True
    seed: int = 1
    routing_only: bool = False
    """No runtime: runs are sequences of single operations (``--sweep``)."""


@dataclass
class RunPlan:
    """One run: what its model will ask for, and what it cost."""

    number: int
    kind: str  # "typical", "filler" or "long"
    size: int
    turns: int
    parallel_turns: frozenset[int]
    rng: random.Random = field(repr=False)
    run_id: str = ""
    phantom: bool = False
    """Routed and timed, but runs no agent (the long scenario's fillers)."""
    # Measured:
    cpu_s: float = 0.0
    invocations: int = 0
    operations: int = 0
    opportunities: int = 0
    resumed: int = 0
    routed_back: int = 0
    last_container: int | None = None
    last_parkable: bool = False
    finished_ms: float | None = None


def measured_sizes(scenario: Scenario) -> list[int]:
    """The sizes of the runs measured, in the order they start (sizes interleaved)."""
    if scenario.long_turns:
        return [2 * scenario.long_turns - 1]
    return [size for _ in range(scenario.per_size) for size in scenario.sizes]


def plan_run(scenario: Scenario, number: int) -> RunPlan:
    """Run ``number`` of ``scenario``'s seed (the same with sticky continuation on and off)."""
    draw = random.Random(f"{scenario.seed}/plan/{number}")
    measured = measured_sizes(scenario)
    if number < len(measured) and scenario.long_turns:
        kind, turns = "long", scenario.long_turns
        size = 2 * turns - 1  # operations: turns model calls and turns - 1 tool calls
    else:
        kind = "typical" if number < len(measured) else "filler"
        size = measured[number] if kind == "typical" else draw.choice(FILLER_SIZES)
        turns = max(2, (size + 1) // 2)  # turns model calls and turns - 1 tool calls
    parallel = frozenset(
        t for t in range(turns - 1) if kind != "long" and draw.random() < scenario.parallel_share
    )
    rng = random.Random(f"{scenario.seed}/latency/{number}")
    return RunPlan(number, kind, size, turns, parallel, rng)


# -- the model and the tool ----------------------------------------------------------------------

_SIM: Simulation | None = None
"""The simulation running (the model and the tool charge their latency to it)."""
_RUN_TAG = re.compile(r"\[run (\d+)\](?: \[turn (\d+)\])?")


class SimModel:
    """A scripted model: a tool call per turn (two in a run's parallel turns), then an answer.

    The turn is the number of assistant messages in the request (the tool-use loop) or the
    ``[turn n]`` of the opening message (the long agent, whose model sees a window).
    """

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        """The scripted answer; charges one model latency to the invocation."""
        sim = _SIM
        assert sim is not None
        opening = request.messages[0].content[0].text or ""
        found = _RUN_TAG.search(opening)
        if found is None:
            raise ValueError(f"no run tag in {opening[:60]!r}")
        plan = sim.plans[int(found.group(1))]
        turn = (
            int(found.group(2))
            if found.group(2) is not None
            else sum(1 for m in request.messages if m.role == "assistant")
        )
        sim.charge("model")
        text = f"Turn {turn}: " + "I will look this up before I answer the customer. " * 3
        if turn >= plan.turns - 1:
            content = [ContentBlock.of_text(text + "Here is the answer.")]
            stop = "end_turn"
        else:
            calls = 2 if turn in plan.parallel_turns else 1
            content = [ContentBlock.of_text(text)] + [
                ContentBlock(
                    type="tool_use",
                    tool_use_id=f"tu-{turn}-{i}",
                    name="search",
                    input={"query": f"order {plan.number} item {turn}.{i}", "limit": 3},
                )
                for i in range(calls)
            ]
            stop = "tool_use"
        return LlmResponse(
            content=content,
            stop_reason=stop,
            usage=Usage(input_tokens=100 * turn + 50, output_tokens=40, total_tokens=0),
            model_id=config.model_id,
        )

    def converse_stream(self, config: ModelConfig, request: LlmRequest, on_text: Any) -> Any:
        """Not streamed: the whole answer at once."""
        response = self.converse(config, request)
        on_text(response.text)
        return response


class SearchRequest(BaseModel):
    """What the model asks the search tool."""

    query: str
    limit: int = 3


@tool(name="search", registry=ToolRegistry(), idempotent=True)
def search(request: SearchRequest, call: ToolCall) -> dict[str, Any]:
    """Searches the order system (about 400 bytes of results); charges one tool latency."""
    if _SIM is not None:
        _SIM.charge("tool")
    return {
        "query": request.query,
        "hits": [
            {
                "id": f"{request.query}/{i}",
                "title": f"Result {i} for {request.query}",
                "snippet": "In stock at the north warehouse; ships in two days by ground.",
            }
            for i in range(request.limit)
        ],
    }


SPECS = [tool_spec(search)]
REGISTRY = AgentRegistry()


@agent(name="sim-typical", version="1", registry=REGISTRY, invocation_budget=InvocationBudget())
def typical_agent(ctx: Any, plan: dict[str, int]) -> int:
    """The library's tool-use loop until the model answers."""
    outcome = run_tool_loop(
        ctx,
        config=MODEL,
        messages=[Message.user(f"[run {plan['run']}] {TASK}")],
        tools=[search],
        max_turns=plan["turns"] + 1,
    )
    return outcome.turns


@agent(name="sim-long", version="1", registry=REGISTRY, invocation_budget=InvocationBudget())
def long_agent(ctx: Any, plan: dict[str, int]) -> int:
    """A model turn and a tool call, ``turns`` times; continues as new every ``every`` turns."""
    window: list[Message] = []
    since, turn, every = 0, plan["turn"], plan["every"]
    while turn < plan["turns"]:
        opening = Message.user(f"[run {plan['run']}] [turn {turn}] {TASK}")
        request = LlmRequest(messages=[opening, *window], tools=SPECS)
        reply = ctx.llm(f"turn-{turn}", request, config=MODEL)
        window.append(reply.as_message())
        for call in reply.tool_calls:
            found = ctx.tool(search, SearchRequest.model_validate(call.input or {}))
            block = ContentBlock.tool_result(call.tool_use_id or "", found)
            window.append(Message(role="user", content=[block]))
        window = window[-WINDOW:]
        turn, since = turn + 1, since + 1
        if every and since >= every and turn < plan["turns"]:
            ctx.continue_as_new({**plan, "turn": turn})
    return turn


# -- the platform --------------------------------------------------------------------------------


@dataclass
class Container:
    """A warm StepRunner execution environment."""

    index: int
    runtime: Runtime | None  # None: routing only
    publisher: CollectingPublisher
    warm: replay_index.WarmRecords
    busy: bool = False
    freed_ms: float = 0.0
    parked: OrderedDict[str, None] = field(default_factory=OrderedDict)  # routing only


@dataclass
class Totals:
    """What a simulation counted besides the runs."""

    invocations: int = 0
    queued: int = 0
    abandoned: int = 0
    fillers: int = 0
    sim_hours: float = 0.0


_PROCESS_WARM = replay_index.WARM_RECORDS


@contextmanager
def _warm_records_of(container: Container) -> Iterator[None]:
    """Gives the runtime's modules the container's warm journal cache for one invocation.

    ``WARM_RECORDS`` is one per process; the containers share this process, so each gets its
    own, as separate Lambda execution environments have.
    """
    holders = [
        m
        for name, m in list(sys.modules.items())
        if name.startswith("durable_agents") and getattr(m, "WARM_RECORDS", None) is _PROCESS_WARM
    ]
    for module in holders:
        module.WARM_RECORDS = container.warm
    try:
        yield
    finally:
        for module in holders:
            module.WARM_RECORDS = _PROCESS_WARM


class Simulation:
    """One scenario played out (see the module docstring)."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.journal = InMemoryJournal()
        self.clock = SkipClock(START_MS)
        self.api = Runtime(self.journal, registry=REGISTRY, clock=self.clock)
        self.containers = [self._container(i) for i in range(scenario.containers)]
        self.routing = random.Random(f"{scenario.seed}/routing")
        self.measured = len(measured_sizes(scenario))
        self.plans: dict[int, RunPlan] = {}
        self.by_run_id: dict[str, RunPlan] = {}
        self.events: list[tuple[float, int, str, Any]] = []
        self.sequence = 0
        self.waiting: deque[tuple[str, str | None]] = deque()
        self.charged_ms = 0.0
        self.current: RunPlan | None = None
        self.totals = Totals()
        self.unfinished = self.measured

    def _container(self, index: int) -> Container:
        publisher = CollectingPublisher()
        if self.scenario.routing_only:
            return Container(index, None, publisher, replay_index.WarmRecords())
        sticky = (
            StickyRuns(DEFAULT_STICKY_RUNS, default_carrier()) if self.scenario.sticky else None
        )
        runtime = Runtime(
            self.journal,
            registry=REGISTRY,
            publisher=publisher,
            clock=self.clock,
            providers={"sim": SimModel()},
            sticky=sticky,
        )
        return Container(index, runtime, publisher, replay_index.WarmRecords())

    def _push(self, at_ms: float, kind: str, data: Any) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (at_ms, self.sequence, kind, data))

    def charge(self, what: str) -> None:
        """Adds a model's or a tool's latency to the running invocation's simulated time."""
        assert self.current is not None
        self.charged_ms += LATENCY[what].draw(self.current.rng)

    # runs --------------------------------------------------------------------------------------

    def _start(self, now_ms: float) -> None:
        number = len(self.plans)
        plan = plan_run(self.scenario, number)
        self.plans[number] = plan
        self.totals.fillers += plan.kind == "filler"
        # The long scenario's fillers only keep containers busy (thousands of them would cost
        # more CPU than the run measured; its hits depend on the routing alone).
        plan.phantom = self.scenario.routing_only or (
            plan.kind == "filler" and bool(self.scenario.long_turns)
        )
        if plan.phantom:
            plan.run_id = f"run-{number}"
        else:
            value = {"run": number, "turns": plan.turns}
            if plan.kind == "long":
                value |= {"turn": 0, "every": self.scenario.long_continue_every}
            self.clock.advance_to(START_MS + int(now_ms))
            name = "sim-long" if plan.kind == "long" else "sim-typical"
            run_id = f"run-sim-{self.scenario.seed}-{number}"  # the same on and off
            self.api.start_run(name, value, run_id=run_id)  # the Api's work: not measured
            plan.run_id = run_id
        self.by_run_id[plan.run_id] = plan
        self._push(now_ms + LATENCY["delivery"].draw(plan.rng), "deliver", (plan.run_id, None))

    def begin(self) -> None:
        """Starts the first runs."""
        for i in range(self.scenario.runs_in_flight):
            self._start(i * 100.0)

    def step(self) -> tuple[float, str, Any]:
        """Plays the next event; returns what it was (to check two simulations agree)."""
        global _SIM  # noqa: PLW0603  (the model and the tool charge the running simulation)
        at_ms, _, kind, data = heapq.heappop(self.events)
        _SIM = self
        try:
            if kind == "deliver":
                self._deliver(at_ms, *data)
                return at_ms, kind, data
            if kind == "free":
                self._free(at_ms, data)
                return at_ms, kind, data.index
            self._start(at_ms)
            return at_ms, kind, None
        finally:
            _SIM = None

    def end(self) -> list[RunPlan]:
        """Lets every parked agent go; returns the runs measured.

        Raises:
            RuntimeError: If one of them did not finish.
        """
        self.totals.sim_hours = (self.clock.now_ms() - START_MS) / 3_600_000
        for c in self.containers:
            if c.runtime is not None and c.runtime.sticky is not None:
                c.runtime.sticky.clear()
                self.totals.abandoned += c.runtime.sticky.abandoned
        if self.unfinished:
            raise RuntimeError(f"{self.unfinished} runs measured did not finish")
        return [p for p in self.plans.values() if p.kind != "filler"]

    def result(self) -> dict[str, Any]:
        """The runs measured and the totals, as JSON."""
        runs = [{k: getattr(p, k) for k in _KEPT} for p in self.end()]
        return {"scenario": asdict(self.scenario), "runs": runs, "totals": asdict(self.totals)}

    # routing -----------------------------------------------------------------------------------

    def _deliver(self, now_ms: float, run_id: str, target: str | None) -> None:
        idle = [c for c in self.containers if not c.busy]
        if not idle:
            self.totals.queued += 1
            self.waiting.append((run_id, target))
            return
        if self.scenario.routing == "mru":
            chosen = max(idle, key=lambda c: (c.freed_ms, -c.index))
        elif self.scenario.routing == "away":  # anywhere but where the run was last
            last = self.by_run_id[run_id].last_container
            idle = [c for c in idle if c.index != last] or idle
            chosen = idle[self.routing.randrange(len(idle))]
        else:
            chosen = idle[self.routing.randrange(len(idle))] if len(idle) > 1 else idle[0]
        self._invoke(chosen, now_ms, run_id, target)

    def _free(self, now_ms: float, container: Container) -> None:
        container.busy, container.freed_ms = False, now_ms
        if self.waiting:
            self._invoke(container, now_ms, *self.waiting.popleft())

    def _invoke(self, c: Container, now_ms: float, run_id: str, target: str | None) -> None:
        plan = self.by_run_id[run_id]
        top = target is None
        if top and plan.last_parkable:
            plan.opportunities += 1
            plan.routed_back += plan.last_container == c.index
        self.current, self.charged_ms = plan, 0.0
        if plan.phantom:
            kind, targets, published, executed = self._routing_only(c, plan)
        else:
            kind, targets, published, executed = self._execute(c, now_ms, plan, target)
        self.current = None
        self.totals.invocations += 1
        plan.invocations += 1
        plan.operations += executed
        if kind is not OutcomeKind.NOOP:
            # Only an untargeted invocation that asked for one more operation parks its agent.
            plan.last_container = c.index
            plan.last_parkable = top and kind is OutcomeKind.CONTINUE and not targets
        ends_ms = now_ms + OVERHEAD_MS + self.charged_ms
        c.busy = True
        self._push(ends_ms, "free", c)
        for detail in published:
            delivered = ends_ms + LATENCY["delivery"].draw(plan.rng)
            self._push(delivered, "deliver", (detail["run_id"], detail.get("target")))
        if kind is OutcomeKind.SUCCEEDED:  # (a later delivery finds it finished: NOOP)
            plan.finished_ms = ends_ms
            if plan.kind != "filler":
                self.unfinished -= 1
            if self.unfinished:  # the next run takes its place
                self._push(ends_ms + LATENCY["pause"].draw(plan.rng), "start", None)

    def _execute(
        self, c: Container, now_ms: float, plan: RunPlan, target: str | None
    ) -> tuple[OutcomeKind, tuple[str, ...], list[dict[str, Any]], int]:
        """One StepRunner invocation on ``c``'s runtime, its CPU charged to ``plan``."""
        runtime = c.runtime
        assert runtime is not None
        sticky = runtime.sticky
        resumed = sticky.resumed if sticky is not None else 0
        self.clock.advance_to(START_MS + int(now_ms))
        with _warm_records_of(c):
            began = time.thread_time()
            outcome = runtime.execute(
                plan.run_id, agent_budget=True, remaining_ms=REMAINING_MS, target=target
            )
            plan.cpu_s += time.thread_time() - began
        if sticky is not None:
            plan.resumed += sticky.resumed - resumed
        if outcome.kind in _FAILED:
            raise RuntimeError(f"run {plan.number} ended {outcome.kind}: {outcome.detail}")
        published = [e.detail for e in c.publisher.drain() if e.detail_type == STEP_READY]
        return outcome.kind, outcome.targets, published, len(outcome.executed)

    def _routing_only(
        self, c: Container, plan: RunPlan
    ) -> tuple[OutcomeKind, tuple[str, ...], list[dict[str, Any]], int]:
        """An invocation without a runtime: the run's next operation, one at a time.

        A container keeps the last ``DEFAULT_STICKY_RUNS`` runs it advanced; it holds a run
        fresh when the run's previous invocation was its own.
        """
        done = plan.operations
        self.charge("model" if done % 2 == 0 else "tool")
        if plan.run_id in c.parked and plan.last_container == c.index and plan.last_parkable:
            plan.resumed += 1
        c.parked.pop(plan.run_id, None)
        if done + 1 >= 2 * plan.turns - 1:
            return OutcomeKind.SUCCEEDED, (), [], 1
        c.parked[plan.run_id] = None
        while len(c.parked) > DEFAULT_STICKY_RUNS:
            c.parked.popitem(last=False)
        return OutcomeKind.CONTINUE, (), [{"run_id": plan.run_id}], 1


_FAILED = {
    OutcomeKind.FAILED,
    OutcomeKind.PAUSED,
    OutcomeKind.CANCELLED,
    OutcomeKind.TERMINATED,
    OutcomeKind.TIMED_OUT,
    OutcomeKind.VERSION_UNAVAILABLE,
}
_KEPT = ("number", "kind", "size", "turns", "cpu_s", "invocations", "operations")
_KEPT += ("opportunities", "resumed", "routed_back")


def simulate(scenario: Scenario) -> dict[str, Any]:
    """Plays ``scenario`` in this process: the runs measured and the totals, as JSON."""
    sim = Simulation(scenario)
    sim.begin()
    while sim.events and sim.unfinished:
        sim.step()
    return sim.result()


def simulate_pair(scenario: Scenario) -> list[dict[str, Any]]:
    """Plays ``scenario`` with sticky continuation on and off in lockstep, event by event.

    Both see the same events in the same order (checked), so each invocation with it on is
    timed right beside the same invocation with it off, and a change in the machine's load
    touches both alike. The cyclic garbage collector runs only between events, untimed: this
    one process holds every container's parked agents (a Lambda environment holds its own).

    Raises:
        RuntimeError: If the two simulations diverge.
    """
    sims = [Simulation(replace(scenario, sticky=True)), Simulation(replace(scenario, sticky=False))]
    enabled = gc.isenabled()
    gc.disable()
    try:
        for sim in sims:
            sim.begin()
        played = 0
        while sims[0].unfinished and sims[0].events:
            first, second = sims if played % 2 == 0 else sims[::-1]
            if first.step() != second.step():
                raise RuntimeError(f"the simulations diverged at event {played}")
            played += 1
            if played % GC_EVERY == 0:
                gc.collect()
        return [sim.result() for sim in sims]
    finally:
        if enabled:
            gc.enable()


GC_EVERY = 500
"""Events between two (untimed) collections of the cyclic garbage collector."""


def hit_rate(result: dict[str, Any]) -> float:
    """Invocations that went on with a parked agent, of those that could have."""
    chances = sum(r["opportunities"] for r in result["runs"])
    return sum(r["resumed"] for r in result["runs"]) / chances if chances else 0.0


# -- the measurements ----------------------------------------------------------------------------


def measure(scenario: Scenario, *, in_process: bool) -> list[dict[str, Any]]:
    """``simulate_pair`` in a process of its own (or in this one)."""
    if in_process:
        return simulate_pair(scenario)
    command = [sys.executable, __file__, "--child", json.dumps(asdict(scenario))]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def in_flight(containers: int, utilisation: float) -> int:
    """Runs under way at once that keep about ``utilisation`` of ``containers`` busy."""
    return max(1, round(utilisation * containers))


def session(
    scenarios: Sequence[Scenario], rounds: int, *, in_process: bool
) -> list[dict[str, Any]]:
    """Every scenario with sticky continuation on and off, ``rounds`` times; the raw results."""
    results = []
    for r in range(rounds):
        for scenario in scenarios:
            began = time.perf_counter()
            for got in measure(scenario, in_process=in_process):
                got["round"] = r
                results.append(got)
            print(
                f"round {r}: {'long' if scenario.long_turns else 'typical'} runs, "
                f"{scenario.containers} containers: {time.perf_counter() - began:.1f} s",
                file=sys.stderr,
            )
    return results


def summarise(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario and run size: hit rate, CPU per run on and off (medians of rounds), saving.

    Raises:
        RuntimeError: If a run was routed differently with sticky continuation on and off.
    """
    groups: dict[tuple[str, int, Any], dict[bool, list[list[dict[str, Any]]]]] = {}
    for got in results:
        s = got["scenario"]
        label = "long" if s["long_turns"] else "typical"
        by_size: dict[Any, list[dict[str, Any]]] = {}
        for run in got["runs"]:
            by_size.setdefault(run["size"], []).append(run)
        if label == "typical" and len(by_size) > 1:
            by_size["mix"] = list(got["runs"])
        for size, runs in by_size.items():
            key = (label, s["containers"], size)
            groups.setdefault(key, {True: [], False: []})[s["sticky"]].append(runs)
    rows = []
    for (label, k, size), modes in sorted(groups.items(), key=_row_order):
        on, off = modes[True], modes[False]
        if not on or not off:
            continue
        routed = {tuple(r["routed_back"] for r in runs) for runs in on + off}
        if len(routed) > 1:
            raise RuntimeError(f"{label} runs on {k} containers were routed differently")
        chances = sum(r["opportunities"] for r in on[0])
        cpu_on = statistics.median(_total(runs) for runs in on) / len(on[0])
        cpu_off = statistics.median(_total(runs) for runs in off) / len(off[0])
        rows.append(
            {
                "runs": label,
                "containers": k,
                "size": size,
                "count": len(on[0]),
                "operations": _mean(on[0], "operations"),
                "invocations": _mean(on[0], "invocations"),
                "hit_rate": sum(r["resumed"] for r in on[0]) / chances if chances else 0.0,
                "routed_back": sum(r["routed_back"] for r in on[0]) / chances if chances else 0.0,
                "cpu_on_s": cpu_on,
                "cpu_off_s": cpu_off,
                "saving": 1 - cpu_on / cpu_off if cpu_off else 0.0,
                "rounds": len(on),
            }
        )
    return rows


def _row_order(item: Any) -> tuple[bool, int, int]:
    (label, k, size), _ = item
    return (label == "long", k, 10**9 if size == "mix" else int(size))


def _total(runs: Sequence[dict[str, Any]]) -> float:
    return float(sum(r["cpu_s"] for r in runs))


def _mean(runs: Sequence[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in runs) / len(runs) if runs else 0.0


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    out = [
        "| runs | warm containers | run size (operations) | runs measured | invocations per run "
        "| hit rate | routed back | CPU per run, sticky on | CPU per run, sticky off | saving |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        size = "typical mix (all sizes)" if r["size"] == "mix" else f"{r['size']:,}"
        out.append(
            f"| {r['runs']} | {r['containers']} | {size} | {r['count']} | {r['invocations']:.0f} "
            f"| {r['hit_rate']:.2f} | {r['routed_back']:.2f} | {_seconds(r['cpu_on_s'])} "
            f"| {_seconds(r['cpu_off_s'])} | {100 * r['saving']:.0f}% |"
        )
    return "\n".join(out)


def _seconds(value: float) -> str:
    return f"{value * 1000:,.1f} ms" if value < 10 else f"{value:,.1f} s"


def sweep(seed: int, per_size: int = 25) -> str:
    """The routing's hit rate alone, over containers, utilisation and routing (Markdown)."""
    utilisations = (0.25, 0.5, 0.75, 1.0)
    out = [
        "| warm containers | routing | "
        + " | ".join(f"utilisation {u:.2f}" for u in utilisations)
        + " |",
        "|---:|---|" + "---:|" * len(utilisations),
    ]
    for k in (1, 4, 16):
        for routing in ("random", "mru"):
            cells = []
            for u in utilisations:
                scenario = Scenario(
                    k, in_flight(k, u), per_size=per_size, routing=routing, seed=seed
                )
                got = simulate(replace(scenario, routing_only=True))
                cells.append(f"{hit_rate(got):.2f} ({in_flight(k, u)} runs)")
            out.append(f"| {k} | {routing} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def machine() -> str:
    """The interpreter and the machine, one line."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu})"
    )


def scenarios_of(args: argparse.Namespace) -> tuple[list[Scenario], int, bool]:
    """The scenarios, rounds and whether to stay in this process, from the arguments."""
    base = Scenario(
        1,
        1,
        parallel_share=args.parallel_share,
        routing=args.routing,
        seed=args.seed,
        long_continue_every=args.long_continue_every,
    )
    if args.quick:
        quick = replace(base, sizes=(10, 30), per_size=2)
        return (
            [replace(quick, containers=k, runs_in_flight=in_flight(k, 0.5)) for k in (1, 16)],
            1,
            True,
        )
    containers = [int(k) for k in args.containers.split(",") if k]
    long_containers = [int(k) for k in args.long_containers.split(",") if k]
    sizes = tuple(int(n) for n in args.sizes.split(",") if n)
    typical = replace(base, sizes=sizes, per_size=args.per_size)
    out = [
        replace(typical, containers=k, runs_in_flight=in_flight(k, args.utilisation))
        for k in containers
    ]
    out += [
        replace(
            base,
            containers=k,
            runs_in_flight=in_flight(k, args.utilisation),
            long_turns=(args.long_ops + 1) // 2,
        )
        for k in long_containers
    ]
    return out, args.rounds, False


def main(argv: list[str] | None = None) -> int:
    """Runs the session and prints the table (and, with ``--json``, writes the raw results)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few short runs (seconds)")
    parser.add_argument("--containers", default="1,4,16", help="for the typical runs")
    parser.add_argument("--sizes", default="10,30,100,300", help="typical runs' operations")
    parser.add_argument("--per-size", type=int, default=2, help="typical runs of each size")
    parser.add_argument("--long-containers", default="1,4,16", help="for the long run")
    parser.add_argument("--long-ops", type=int, default=LONG_SIZE)
    parser.add_argument("--long-continue-every", type=int, default=50, help="turns (0: never)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--utilisation", type=float, default=0.5)
    parser.add_argument("--parallel-share", type=float, default=0.0, help="turns with 2 tools")
    parser.add_argument("--routing", choices=("random", "mru", "away"), default="random")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sweep", action="store_true", help="the routing's hit rates alone")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        fields = json.loads(args.child)
        fields["sizes"] = tuple(fields["sizes"])
        print(json.dumps(simulate_pair(Scenario(**fields))))
        return 0
    if args.sweep:
        print(f"routing only, seed {args.seed}: hit rate (runs in flight)")
        print(sweep(args.seed))
        return 0
    scenarios, rounds, in_process = scenarios_of(args)
    began = time.perf_counter()
    results = session(scenarios, rounds, in_process=in_process)
    rows = summarise(results)
    print(
        f"{machine()}; seed {args.seed}, routing {args.routing}, utilisation "
        f"{0.5 if args.quick else args.utilisation}, parallel share {args.parallel_share}, "
        f"long run: continue-as-new every {args.long_continue_every} turns; "
        f"{time.perf_counter() - began:.0f} s"
    )
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
