"""Sticky continuation under reconfiguration and reused run ids (issue 29, defects 4 and 5).

A parked agent must go on with exactly what a new invocation would hold (ADR 0017), which
``test_schedules.py`` cannot see: its runtimes keep their parts for good and its run id is
used once. Two properties close that gap, each over hypothesis schedules with 1-3 warm
containers parking agents on greenlets or threads:

* **Parts swapped between invocations** (``test_parts_swapped_between_invocations``): the
  fault suite's reference agent (every operation kind) under the survived fault classes,
  where before some deliveries every runtime is given a new memory store, model provider,
  credentials provider, clock, journal store client, publisher, wait scheduler, registry or
  plugin set. Each part is a stand-in for the real one that records any use once it was
  replaced: besides every invariant of ``invariants.py``, no replaced part may be used.
* **A run id used again after its run expired** (``test_a_run_id_used_again_after_expiry``):
  a small agent (steps, a memory write, a model call, continue-as-new) whose runs all use one
  id; a schedule delivers its invocations to the containers or elsewhere, swaps parts, and
  lets a run finish elsewhere, expire and a new run with the same id start. Every run ends
  with its own input's output, every step of it runs once (no crash is injected), no step
  of an expired run or a left generation runs, and no replaced part is used.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.clock import SkipClock
from durable_agents.core.credentials import Secret
from durable_agents.core.models import RunStatus
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.memory_store import InMemoryMemoryStore
from durable_agents.engine.plugin_calls import PluginSet
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.llm.types import ContentBlock, LlmRequest, LlmResponse, Message, ModelConfig
from durable_agents.plugins import OperationEndInfo, OperationStartInfo
from tests.reliability import tally, world
from tests.reliability.faults import FaultPlan
from tests.reliability.invariants import check, explain
from tests.reliability.sim import SimResult, Simulator
from tests.reliability.sim import _Scheduler as Scheduler

pytestmark = pytest.mark.reliability

EXAMPLES = int(os.environ.get("RELIABILITY_EXAMPLES", "20"))
SHRINK = os.environ.get("RELIABILITY_SHRINK") == "1"
SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
    phases=[Phase.explicit, Phase.generate, *([Phase.shrink] if SHRINK else [])],
)


class Part:
    """Stands for one of a runtime's parts; any use of it once it was replaced is recorded.

    Args:
        name: Which part (for the violation's sentence).
        inner: The real part every use is passed on to.
        stale: Where uses after ``retire`` are recorded.
    """

    def __init__(self, name: str, inner: Any, stale: list[str]):
        self._part_name = name
        self._part_inner = inner
        self._part_stale = stale
        self._part_retired = False

    def retire(self) -> None:
        """The runtime was given another one: from now on, any use is a violation."""
        self._part_retired = True

    def __getattr__(self, attr: str) -> Any:
        if self._part_retired:
            self._part_stale.append(f"{self._part_name}.{attr} used after it was replaced")
        return getattr(self._part_inner, attr)


class WatchPlugin:
    """A plugin that records being called once it was replaced (it hears live operations)."""

    replayed_operations = False

    def __init__(self, stale: list[str]):
        self.stale = stale
        self.retired = False

    def retire(self) -> None:
        """The runtime was given another plugin set."""
        self.retired = True

    def _heard(self, hook: str) -> None:
        if self.retired:
            self.stale.append(f"plugin.{hook} called after it was replaced")

    def on_operation_start(self, info: OperationStartInfo) -> None:
        self._heard("on_operation_start")

    def on_operation_end(self, info: OperationEndInfo) -> None:
        self._heard("on_operation_end")


class NoCredentials:
    """A credentials provider with nothing to give (the reference tools need none)."""

    def credentials_for(self, purpose: str) -> dict[str, Secret]:
        return {}


PARTS = (
    "memory",
    "providers",
    "credentials",
    "clock",
    "store",
    "publisher",
    "wait_scheduler",
    "registry",
    "plugins",
)


@dataclass
class Parts:
    """Makes each part's stand-ins over the real parts, and swaps them on runtimes.

    Attributes:
        real: The real part behind each stand-in, by attribute name (``providers``: the
            provider under ``provider_name``).
        provider_name: The name ``ModelConfig.provider`` gives the model provider.
        stale: Uses of replaced parts.
    """

    real: dict[str, Any]
    provider_name: str
    stale: list[str] = field(default_factory=list)

    def fresh(self, name: str) -> Any:
        """A new stand-in for part ``name`` (what ``Runtime`` is given as that attribute)."""
        if name == "providers":
            return {self.provider_name: Part("provider", self.real["providers"], self.stale)}
        if name == "plugins":
            return PluginSet([WatchPlugin(self.stale)])
        return Part(name, self.real[name], self.stale)

    def all_fresh(self) -> dict[str, Any]:
        """A stand-in for every part, as ``Runtime`` keyword arguments."""
        given = {name: self.fresh(name) for name in PARTS if name != "plugins"}
        given["plugins"] = [WatchPlugin(self.stale)]
        return given

    def swap(self, runtime: Runtime, name: str) -> None:
        """Gives ``runtime`` a new stand-in for ``name`` and retires the one it had."""
        old = getattr(runtime, name)
        setattr(runtime, name, self.fresh(name))
        if name == "providers":
            old = old[self.provider_name]
        for one in old.plugins if name == "plugins" else (old,):
            one.retire()


# -- parts swapped between invocations: the reference agent under the survived faults ---------


class SwappingSimulator(Simulator):
    """The fault suite's simulator, whose runtimes are given new parts between deliveries.

    Before a delivery (not one run inside another: a concurrent duplicate), with probability
    ``swap_rate``, every runtime (the warm containers and the one the reconciler and the
    people use) is given a new stand-in of one part, chosen at random.
    """

    def __init__(self, plan: FaultPlan, swap_rate: float):
        self.swap_rate = swap_rate
        self.swaps: Counter[str] = Counter()
        super().__init__(plan)
        self._swapping = random.Random(plan.seed ^ 0x5A4B)

    def _runtime(self, sticky: StickyRuns | None) -> Runtime:
        if not hasattr(self, "parts"):
            real = {
                "memory": world.WORLD.memory,
                "providers": world.SimModel(),
                "credentials": NoCredentials(),
                "clock": self.clock,
                "store": self.store,
                "publisher": self.bus,
                "wait_scheduler": Scheduler(self),
                "registry": world.agents,
            }
            self.parts = Parts(real, world.MODEL.provider)
        return Runtime(sticky=sticky, **self.parts.all_fresh())

    def invoke(self, run_id: str, target: str | None, attempt: int) -> None:
        if self.depth == 0 and self._swapping.random() < self.swap_rate:
            name = self._swapping.choice(PARTS)
            self.swaps[name] += 1
            for runtime in [self.runtime, *self.containers]:
                self.parts.swap(runtime, name)
        super().invoke(run_id, target, attempt)


def _swapping_plans() -> st.SearchStrategy[tuple[FaultPlan, float]]:
    survived = ("stale_index", "concurrent", "provider_lost", "dup2", "dup5", "reorder", "delay")
    plan = st.builds(
        FaultPlan,
        seed=st.integers(0, 2**32 - 1),
        rates=st.fixed_dictionaries({c: st.floats(0.0, 0.3) for c in survived}),
        window=st.integers(3, 80),
        max_faults=st.integers(0, 10),
        budget=st.sampled_from([1, 1, 1, 2]),
        reviewer=st.booleans(),
        sticky=st.sampled_from([1, 2]),
        carrier=st.sampled_from(["greenlet", "thread"]),
    )
    return st.tuples(plan, st.floats(0.1, 0.6))


@SETTINGS
@given(case=_swapping_plans())
@example(case=(FaultPlan(seed=7, sticky=1, carrier="greenlet", max_faults=0), 0.5))
@example(case=(FaultPlan(seed=7, sticky=1, carrier="thread", max_faults=0), 0.5))
def test_parts_swapped_between_invocations(case: tuple[FaultPlan, float]) -> None:
    plan, swap_rate = case
    sim = SwappingSimulator(plan, swap_rate)
    result: SimResult = sim.run()
    tally.schedules["sticky-parts-swapped"] += 1
    tally.injected.update(result.faults)
    problems = check(result) + sorted(set(sim.parts.stale))
    if problems:
        tally.violations["sticky-parts-swapped"] += 1
    assert not problems, explain(result, problems) + f"; swaps: {dict(sim.swaps)}"


# -- a run id used again after its run expired ------------------------------------------------

reuse = AgentRegistry()
REUSED_ID = "run-00000000000000r5"
MODEL = ModelConfig(name="reuse-model", version="1", provider="echo", model_id="echo-1")
STEPS = 2
RETENTION_PASSED_MS = 31 * 86_400_000


class Echo:
    """A model provider that answers ``re: <the last user text>``."""

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        last = request.messages[-1].content[0].text or ""
        return LlmResponse(content=[ContentBlock.of_text(f"re: {last}")], stop_reason="end_turn")

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Any
    ) -> LlmResponse:
        answer = self.converse(config, request)
        on_text(answer.text)
        return answer


@dataclass
class Ledger:
    """What the reused id's runs did, and which run and generation the journal holds now."""

    ran: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)
    current: tuple[str, int] = ("", 0)  # the live run's tag, and its generation

    def step(self, tag: str, generation: int, index: int) -> str:
        """A step of run ``tag`` in ``generation`` executes: it must be the live one's."""
        name = f"{tag}/g{generation}/s{index}"
        self.ran[name] += 1
        if (tag, generation) != self.current:
            self.wrong.append(f"{name} ran while the journal held {self.current}")
        return name


LEDGER = Ledger()


@agent(name="reused-id", version="1", registry=reuse)
def reused_id(ctx: DurableContext, value: dict[str, Any]) -> list[str]:
    """Steps, a memory write and a model call per generation; the output names its run."""
    tag, generation = value["tag"], value["generation"]
    done = [
        ctx.step(lambda i=i: LEDGER.step(tag, generation, i), name=f"s{i}") for i in range(STEPS)
    ]
    ctx.memory.put("last", f"{tag}/g{generation}")
    answer = ctx.llm("ask", LlmRequest(messages=[Message.user(tag)]), config=MODEL).text
    if generation < value["generations"]:
        ctx.continue_as_new({**value, "generation": generation + 1})
    return [*done, answer]


def expected_output(tag: str, generations: int) -> list[str]:
    """What the run ``tag`` ends with: its last generation's steps and its model answer."""
    return [f"{tag}/g{generations}/s{i}" for i in range(STEPS)] + [f"re: {tag}"]


Action = tuple[str, int]
"""``("deliver", container)``, ``("elsewhere", 0)`` (a runtime that keeps nothing parked),
``("swap", part index)`` (every runtime gets a new stand-in of that part) or
``("expire", generations)`` (the run is finished elsewhere, expires, and a new run with the
same id and that many continue-as-new switches starts)."""

REUSE_PARTS = ("memory", "providers", "clock", "store", "publisher", "registry")


def _actions() -> st.SearchStrategy[list[Action]]:
    one = st.one_of(
        st.tuples(st.just("deliver"), st.integers(0, 2)),
        st.tuples(st.just("elsewhere"), st.just(0)),
        st.tuples(st.just("swap"), st.integers(0, len(REUSE_PARTS) - 1)),
        st.tuples(st.just("expire"), st.integers(0, 2)),
    )
    return st.lists(one, min_size=4, max_size=40)


class Reuse:
    """Plays one schedule of ``test_a_run_id_used_again_after_expiry``."""

    def __init__(self, containers: int, carrier: str):
        LEDGER.ran.clear()
        LEDGER.wrong.clear()
        self.clock = SkipClock()
        self.journal = InMemoryJournal()
        real = {
            "memory": InMemoryMemoryStore(),
            "providers": Echo(),
            "clock": self.clock,
            "store": self.journal,
            "publisher": CollectingPublisher(),
            "registry": reuse,
        }
        self.parts = Parts(real, MODEL.provider)
        self.containers = [
            self._runtime(StickyRuns(carrier=carrier))  # type: ignore[arg-type]
            for _ in range(containers)
        ]
        self.elsewhere = self._runtime(None)
        self.runs: list[tuple[str, int]] = []  # every run's tag and generations, in order
        self.problems: list[str] = []

    def _runtime(self, sticky: StickyRuns | None) -> Runtime:
        return Runtime(sticky=sticky, **{n: self.parts.fresh(n) for n in REUSE_PARTS})

    def start(self, generations: int) -> None:
        tag = f"t{len(self.runs)}"
        self.runs.append((tag, generations))
        LEDGER.current = (tag, 0)
        value = {"tag": tag, "generation": 0, "generations": generations}
        self.elsewhere.start_run("reused-id", value, run_id=REUSED_ID)

    def deliver(self, runtime: Runtime) -> None:
        if self.journal.get_run(REUSED_ID).status is not RunStatus.RUNNING:
            return
        runtime.execute(REUSED_ID, agent_budget=True)
        header = self.journal.get_run(REUSED_ID)
        LEDGER.current = (LEDGER.current[0], header.generation)

    def settle(self, runtimes: list[Runtime]) -> None:
        """Delivers (round robin) until the run is no longer RUNNING, then checks its end."""
        for n in range(200):
            if self.journal.get_run(REUSED_ID).status is not RunStatus.RUNNING:
                break
            self.deliver(runtimes[n % len(runtimes)])
        header = self.journal.get_run(REUSED_ID)
        tag, generations = self.runs[-1]
        if header.status is not RunStatus.SUCCEEDED:
            self.problems.append(f"run {tag} ended {header.status}: {header.error}")
            return
        output = json.loads(header.result or "null")
        if output != expected_output(tag, generations):
            self.problems.append(f"run {tag} ended with {output}")

    def expire(self, generations: int) -> None:
        self.settle([self.elsewhere])  # finished elsewhere: the containers keep their agents
        self.clock.advance(RETENTION_PASSED_MS)
        gone = self.journal.expire(self.clock.now_ms())
        if gone != [REUSED_ID]:
            self.problems.append(f"the run did not expire: {gone}")
        self.start(generations)

    def play(self, actions: list[Action]) -> list[str]:
        self.start(1)
        for what, arg in actions:
            if what == "deliver":
                self.deliver(self.containers[arg % len(self.containers)])
            elif what == "elsewhere":
                self.deliver(self.elsewhere)
            elif what == "swap":
                for runtime in [*self.containers, self.elsewhere]:
                    self.parts.swap(runtime, REUSE_PARTS[arg])
            else:
                self.expire(arg)
            self.clock.advance(1_000)
        self.settle([*self.containers, self.elsewhere])
        for container in self.containers:
            assert container.sticky is not None
            container.sticky.clear()
        twice = sorted(name for name, n in LEDGER.ran.items() if n != 1)
        if twice:
            self.problems.append(f"steps that ran more than once: {twice[:4]}")
        return self.problems + LEDGER.wrong[:4] + sorted(set(self.parts.stale))


# The shortest schedules of each kind: run t0 parks in container 0, finishes elsewhere and
# expires; run t1 reaches the same counts elsewhere, then container 0 gets it (defect 5); and
# a memory store given while an agent is parked (defect 4).
_REUSED = [("deliver", 0), ("expire", 1), ("elsewhere", 0), ("deliver", 0)]
_SWAPPED = [("deliver", 0), ("deliver", 0), ("swap", 0), ("deliver", 0), ("deliver", 0)]


@settings(SETTINGS, max_examples=max(EXAMPLES, 40))
@given(
    containers=st.integers(1, 3),
    carrier=st.sampled_from(["greenlet", "thread"]),
    actions=_actions(),
)
@example(containers=1, carrier="greenlet", actions=_REUSED)
@example(containers=1, carrier="thread", actions=_REUSED)
@example(containers=1, carrier="greenlet", actions=_SWAPPED)
@example(containers=1, carrier="thread", actions=_SWAPPED)
def test_a_run_id_used_again_after_expiry(
    containers: int, carrier: str, actions: list[Action]
) -> None:
    problems = Reuse(containers, carrier).play(actions)
    tally.schedules["sticky-run-id-reused"] += 1
    if problems:
        tally.violations["sticky-run-id-reused"] += 1
    assert not problems, f"{problems}\nreproduce with: {containers}, {carrier!r}, {actions}"
