"""Plugins under faults: the reference agent's schedules with a plugin that raises in every hook.

With plugins, every write of an invocation goes through the plugins' observer and every hook is
called between the runtime's steps. Under the same fault plan (a plan is a pure function of its
fields) the run must end exactly as without plugins — same status, output, journal, effects,
invocations — and every invariant must hold; the recording plugin must have heard something.
"""

from __future__ import annotations

import functools
from dataclasses import asdict

import pytest

from durable_agents.engine.runtime import Runtime
from tests.contract.test_plugins_contract import HOOKS, Raising, Recorder
from tests.reliability import sim
from tests.reliability.faults import FAULT_CLASSES, FaultPlan
from tests.reliability.invariants import check

pytestmark = pytest.mark.reliability

PLANS = [
    pytest.param(FaultPlan(seed=seed, rates={cls: 0.15}), id=f"{cls}-{seed}")
    for cls in FAULT_CLASSES
    for seed in (1, 2)
] + [pytest.param(FaultPlan(seed=3, rates=dict.fromkeys(FAULT_CLASSES, 0.05)), id="all-3")]


@pytest.mark.parametrize("plan", PLANS)
def test_a_raising_plugin_changes_nothing_under_faults(plan: FaultPlan) -> None:
    without = sim.simulate(plan)
    recorder = Recorder()
    with pytest.MonkeyPatch.context() as patch:
        plugged = functools.partial(Runtime, plugins=[Raising(), recorder])
        patch.setattr(sim, "Runtime", plugged)
        with_plugins = sim.simulate(plan)
    assert asdict(with_plugins) == asdict(without)  # to the simulated millisecond
    assert check(with_plugins) == check(without)
    heard = {hook for hook, _ in recorder.calls}
    assert {"on_invocation_start", "on_invocation_end", "on_operation_start"} <= heard <= set(HOOKS)
