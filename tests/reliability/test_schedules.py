"""Property-based schedules: random faults of each class (and all at once) over the reference
agent, with every invariant of ``invariants.py`` checked after each schedule.

Each fault class is its own hypothesis test, so a class that still hits a known defect is an
``xfail`` of its own (``strict=False``: flip it to a plain test when the fix lands) and the
classes the runtime survives stay green. Examples per test come from ``RELIABILITY_EXAMPLES``
(``make reliability`` sets it so that the suite runs over 10,000 schedules; the default keeps
``make test`` short). Examples are derandomized: the same schedules every run, no database.
A failure prints the shrunk plan; ``test_regressions.py`` keeps the ones found.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.reliability import tally
from tests.reliability.faults import FAULT_CLASSES, FaultPlan

pytestmark = pytest.mark.reliability

EXAMPLES = int(os.environ.get("RELIABILITY_EXAMPLES", "20"))
# Shrinking a failure costs hundreds of schedules; on by request (RELIABILITY_SHRINK=1) to get
# a minimal plan, off otherwise (the failing plan is printed as generated).
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

# The known defect each failing class hits today (see docs/reliability.md for the examples).
KNOWN: dict[str, str] = {
    "commit_before": "defect 13: failed writes consume the retry budget (StepInterruptedError)",
    "commit_after": "defect 13: writes that landed but reported an error consume attempts",
    "read": "defect 5: a failed invocation loses the child's parent Step Ready; parent stuck",
    "crash": "defect 13 (crashes consume the retry budget) and defect 1 (retry honoured forever)",
    "timeout": "defect 1: a review's retry decision is honoured again after a second crash",
    "publish": "defect 5: a failed PutEvents loses the child's parent Step Ready; parent stuck",
    "publish_partial": "defect 5: a partially failed PutEvents loses the parent's Step Ready",
    "loss": "defect 5: a lost parent Step Ready after a child finished is never re-driven",
}


def plans(classes: tuple[str, ...]) -> st.SearchStrategy[FaultPlan]:
    """Fault plans with these classes on, at random rates, windows and budgets."""
    return st.builds(
        FaultPlan,
        seed=st.integers(0, 2**32 - 1),
        rates=st.fixed_dictionaries({c: st.floats(0.02, 0.4) for c in classes}),
        window=st.integers(3, 80),
        max_faults=st.integers(1, 15),
        budget=st.sampled_from([1, 1, 1, None]),
        reviewer=st.booleans(),
        # Sticky continuation on 1 or 2 warm containers in half the schedules (ADR 0017),
        # their agents parked on greenlets or on threads.
        sticky=st.sampled_from([0, 0, 1, 2]),
        carrier=st.sampled_from(["greenlet", "thread"]),
    )


def _class_test(cls: str) -> object:
    @SETTINGS
    @given(plan=plans((cls,)))
    def test(plan: FaultPlan) -> None:
        _, problems = tally.run_counted(plan, cls)
        assert not problems, problems

    test.__name__ = f"test_{cls}"
    return test


for _cls in FAULT_CLASSES:
    globals()[f"test_{_cls}"] = _class_test(_cls)


@SETTINGS
@given(plan=plans(FAULT_CLASSES))
def test_all_classes_at_once(plan: FaultPlan) -> None:
    _, problems = tally.run_counted(plan, "all")
    assert not problems, problems


@SETTINGS
@given(
    plan=plans(("stale_index", "concurrent", "provider_lost", "dup2", "dup5", "reorder", "delay"))
)
def test_survived_classes_together(plan: FaultPlan) -> None:
    """Every class the runtime survives today, mixed in one schedule."""
    _, problems = tally.run_counted(plan, "survived-together")
    assert not problems, problems
