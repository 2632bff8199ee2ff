"""Plugins under faults: the reference agent's schedules with a plugin that raises in every hook.

With plugins, every write of an invocation goes through the plugins' observer and every hook is
called between the runtime's steps. Under the same fault plan (a plan is a pure function of its
fields) the run must end exactly as without plugins — same status, output, journal, effects,
invocations — and every invariant must hold; the recording plugin must have heard something.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from typing import Any

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
    assert_first_invocations(recorder)


def assert_first_invocations(recorder: Recorder) -> None:
    """``is_first_invocation`` is what each invocation read, whatever the faults.

    Every end says what its start said (a concurrent duplicate nests inside another
    invocation: starts and ends pair as a stack). Per run, the starts that say True all come
    before the first write of the run a hook reported (an attempt's claim, an operation's
    result), and there is one: the first read that succeeded found nothing recorded.
    """
    open_starts: list[Any] = []
    written: set[str] = set()  # the runs a recorded write was reported for
    first_before_write: set[str] = set()
    for hook, info in recorder.calls:
        if hook == "on_invocation_start":
            open_starts.append(info)
            if info.is_first_invocation:
                assert info.run_id not in written, f"first after a recorded write: {info}"
                first_before_write.add(info.run_id)
        elif hook == "on_invocation_end":
            start = open_starts.pop()
            assert (start.run_id, start.is_first_invocation) == (
                info.run_id,
                info.is_first_invocation,
            ), (start, info)
        elif hook == "on_operation_attempt_start" or (
            hook == "on_operation_end" and not info.replayed and info.outcome != "pending"
        ):
            written.add(info.run_id)
    assert not open_starts
    assert written <= first_before_write, written - first_before_write
