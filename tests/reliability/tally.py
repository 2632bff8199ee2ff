"""Counts schedules and injected faults per fault class; printed at the end of the session."""

from __future__ import annotations

from collections import Counter

from tests.reliability.faults import FaultPlan
from tests.reliability.invariants import check, explain
from tests.reliability.sim import SimResult, simulate

schedules: Counter[str] = Counter()
injected: Counter[str] = Counter()
violations: Counter[str] = Counter()


def run_counted(plan: FaultPlan, label: str) -> tuple[SimResult, str]:
    """Runs one schedule, counts it under ``label``, and checks every invariant.

    Returns:
        The result, and the violations explained with the plan that reproduces them (empty
        when every invariant held) — for the test's own ``assert not problems, problems``.
    """
    result = simulate(plan)
    schedules[label] += 1
    injected.update(result.faults)
    problems = check(result)
    if problems:
        violations[label] += 1
        return result, explain(result, problems)
    return result, ""


def run_checked(plan: FaultPlan, label: str) -> SimResult:
    """``run_counted``, asserting that every invariant held."""
    result, problems = run_counted(plan, label)
    assert not problems, problems
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
