"""Stop requests under faults (issue 29): cancel, terminate and time limits at every boundary.

Each property draws a fault plan (every fault class, the StepRunner's budget or continuous,
cold or sticky containers on greenlets or threads) and one stop: its mode, the boundary it
lands at (a hook point of one operation of either generation, or between invocations) and
what the agent's cleanup does. ``stop_sim.check`` holds the invariants
(docs/reliability.md, "Stop requests"). ``RELIABILITY_EXAMPLES`` sets the examples per
property, as for ``test_schedules.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.reliability import stop_sim, tally
from tests.reliability.faults import FAULT_CLASSES, FaultPlan
from tests.reliability.test_schedules import SETTINGS, plans

pytestmark = pytest.mark.reliability


def stop_plans(mode: str) -> st.SearchStrategy[stop_sim.StopPlan]:
    """A fault plan and one stop of ``mode`` at a random boundary."""
    return st.builds(
        stop_sim.StopPlan,
        faults=plans(FAULT_CLASSES),
        mode=st.just(mode),
        operation=st.sampled_from([*stop_sim.OPERATIONS, "tick"]),
        point=st.sampled_from(stop_sim.POINTS),
        generation=st.sampled_from([0, 0, 1]),
        tick=st.integers(1, 30),
        cleanup=st.sampled_from(stop_sim.CLEANUP_MODES),
    )


def _run(plan: stop_sim.StopPlan) -> None:
    result = stop_sim.simulate(plan)
    label = f"stop-{plan.mode}"
    tally.schedules[label] += 1
    tally.injected.update(result.faults)
    problems = stop_sim.check(result)
    if problems:
        tally.violations[label] += 1
    assert not problems, stop_sim.explain(result, problems)


@SETTINGS
@given(plan=stop_plans("cancel"))
def test_cancel_at_any_boundary(plan: stop_sim.StopPlan) -> None:
    _run(plan)


@SETTINGS
@given(plan=stop_plans("terminate"))
def test_terminate_at_any_boundary(plan: stop_sim.StopPlan) -> None:
    _run(plan)


@SETTINGS
@given(plan=stop_plans("timeout"))
def test_time_limit_at_any_boundary(plan: stop_sim.StopPlan) -> None:
    _run(plan)


@pytest.mark.parametrize("cleanup", stop_sim.CLEANUP_MODES)
@pytest.mark.parametrize("operation", stop_sim.OPERATIONS)
def test_cancel_at_each_operation_without_faults(operation: str, cleanup: str) -> None:
    """Every operation's boundaries, both generations, each cleanup: no fault, one container."""
    for point in stop_sim.POINTS:
        for generation in (0, 1):
            _run(
                stop_sim.StopPlan(
                    FaultPlan(seed=1, reviewer=False),
                    "cancel",
                    operation,
                    point,
                    generation,
                    0,
                    cleanup,
                )
            )


def test_an_event_sent_as_the_cancel_lands_is_a_refusal_not_an_error() -> None:
    """Found by `make reliability` (seed 169): the Api sends the awaited event in the tick the
    cancel is recorded. The inbox refuses it (``RunNotAcceptingEventsError``, a 409 to the
    caller): the run is stopping. That is an answer to the sender, not an escaped error."""
    rates = {
        "commit_after": 0.2508520605390016, "commit_before": 0.049107864028156464,
        "concurrent": 0.31908377491972006, "crash": 0.3172287330621892,
        "delay": 0.3606121260488346, "dup2": 0.1, "dup5": 0.4, "loss": 0.2397297477262771,
        "provider_lost": 0.37725004592706896, "publish": 0.15829878311446108,
        "publish_partial": 0.023398620721628377, "read": 0.06317005088609305,
        "reorder": 0.2282172027975774, "stale_index": 0.27719047054668167,
        "timeout": 0.37042881013881523,
    }  # fmt: skip
    faults = FaultPlan(seed=169, rates=rates, window=19, max_faults=12, budget=1, reviewer=True)
    _run(stop_sim.StopPlan(faults, "cancel", "tick", "after_execute", 0, 14, "reraise"))


# Found by `make reliability` on 2026-12-07 (and reproduced on 660e207): a cancel told inside
# a branch of a quorum (``min_successful=1``) was read back on replay as that branch's plain
# failure; the other branch completed the batch, and the agent, never told again, started
# three operations and ran into its time limit (TIMED_OUT, not CANCELLED).
KNOWN_WINDOW = stop_sim.StopPlan(
    faults=FaultPlan(
        seed=479001601,
        rates={
            "commit_after": 0.09753218194553873,
            "commit_before": 0.02774802260763307,
            "concurrent": 0.05,
            "crash": 0.05,
            "delay": 0.2733181673514032,
            "dup2": 0.21404834985654717,
            "dup5": 0.07808704159115108,
            "loss": 0.39999999999999997,
            "provider_lost": 0.020000000000000004,
            "publish": 0.35625502405708315,
            "publish_partial": 0.19620237129386112,
            "read": 0.20982322813855467,
            "reorder": 0.23953176446113628,
            "stale_index": 0.2,
            "timeout": 0.2928698346099822,
        },
        window=7,
        max_faults=13,
        targets=(),
        budget=1,
        reviewer=False,
        sticky=1,
        carrier="greenlet",
    ),
    mode="cancel",
    operation="held",
    point="after_record",
    generation=0,
    tick=13,
    cleanup="reraise",
)


def test_a_cancel_told_in_a_branch_ends_its_batch_on_replay_too() -> None:
    result = stop_sim.simulate(KNOWN_WINDOW)
    assert stop_sim.check(result) == []
