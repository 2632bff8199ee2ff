"""Schedules that broke an invariant, kept as regression tests (deterministic: a plan is a
pure function of its fields). Each is ``xfail(strict=True)`` with its defect until the fix
lands, then it must pass: remove the mark with the fix.

Add a plan here whenever a property test finds one (its failure message prints the plan).
"""

from __future__ import annotations

import pytest

from tests.reliability import tally
from tests.reliability.faults import FaultPlan, Target

pytestmark = pytest.mark.reliability

D1 = "defect 1: a review's retry decision is honoured again after the retried call crashes"
D5 = "defect 5: the child's Run Finished / parent's Step Ready is lost; the parent is stuck"
D4 = "defect 4: a lost parallel-branch claim strands the run SUSPENDED without a wake-up"
D13 = "defect 13: crashes consume the retry budget"

REGRESSIONS = [
    # send-sms crashed after executing -> review -> a person says retry -> the retried call
    # times out after executing -> recovery executes it again without asking: 2 messages.
    ("timeout-sms-twice", FaultPlan(seed=5, rates={"timeout": 0.15}), D1),
    # The child finished, but the PutEvents carrying the parent's Step Ready failed; the
    # invocation's retry finds the child finished (NOOP) and publishes nothing. The parent is
    # SUSPENDED on the child with no timer: no sweep ever looks at it again.
    ("publish-parent-stranded", FaultPlan(seed=7, rates={"publish": 0.15}), D5),
    ("partial-publish-parent-stranded", FaultPlan(seed=49, rates={"publish_partial": 0.15}), D5),
    ("lost-delivery-parent-stranded", FaultPlan(seed=13, rates={"loss": 0.15}), D5),
    ("read-fault-parent-stranded", FaultPlan(seed=14, rates={"read": 0.15}), D5),
    # Concurrent and delayed duplicate deliveries of map branches (continuous budget): the run
    # is left SUSPENDED "waiting for its branches" with no timer, and nothing wakes it.
    (
        "map-branches-stranded",
        FaultPlan(
            seed=80,
            rates={"delay": 0.33750642658237306, "dup5": 0.07072059093086087,
                   "dup2": 0.10406553337787039, "reorder": 0.10406553337787039,
                   "stale_index": 0.06605564175279133, "concurrent": 0.10406553337787039,
                   "provider_lost": 0.020000000000000004},
            window=80, max_faults=11, budget=None, reviewer=False,
        ),
        D4,
    ),
    # Three crashes inside one step: the step FAILS with StepInterruptedError.
    ("three-crashes-in-one-step",
     FaultPlan(targets=(Target("shipment-submit", "after_execute", "crash", times=3),)), D13),
    ("three-crashes-in-the-model-call-plan", FaultPlan(seed=9, rates={"crash": 0.15}), D13),
]  # fmt: skip


@pytest.mark.parametrize(
    "plan",
    [pytest.param(p, id=i) for i, p, _defect in REGRESSIONS],
)
def test_regression(plan: FaultPlan) -> None:
    _, problems = tally.run_counted(plan, "regression")
    assert not problems, problems
