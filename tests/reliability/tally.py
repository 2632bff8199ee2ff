"""Counts schedules and injected faults per fault class; printed at the end of the session."""

from __future__ import annotations

from collections import Counter

from tests.reliability.faults import FaultPlan
from tests.reliability.invariants import check, explain
from tests.reliability.sim import SimResult, simulate

schedules: Counter[str] = Counter()
injected: Counter[str] = Counter()
violations: Counter[str] = Counter()


def run_checked(plan: FaultPlan, label: str) -> SimResult:
    """Runs one schedule, counts it under ``label``, and asserts every invariant.

    Raises:
        AssertionError: With the violations and the plan that reproduces them.
    """
    result = simulate(plan)
    schedules[label] += 1
    injected.update(result.faults)
    problems = check(result)
    if problems:
        violations[label] += 1
        raise AssertionError(explain(result, problems))
    return result


def summary() -> list[str]:
    """The lines of the end-of-session report (nothing if no schedule ran)."""
    if not schedules:
        return []
    lines = [f"{'fault class':<28}{'schedules':>10}{'violations':>12}"]
    for label in sorted(schedules):
        lines.append(f"{label:<28}{schedules[label]:>10}{violations[label]:>12}")
    lines.append(f"{'total':<28}{sum(schedules.values()):>10}{sum(violations.values()):>12}")
    lines.append("faults injected: " + ", ".join(f"{k}={v}" for k, v in sorted(injected.items())))
    return lines
