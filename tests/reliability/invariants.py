"""The invariants every schedule must keep, checked against the fault-free run.

1. **Never stuck**: once faults stop, the run reaches SUCCEEDED, FAILED (by the agent's own
   error — the reference agent has none), PAUSED with a reason, or review, within the bound.
2. **Same result**: a SUCCEEDED run's output equals the fault-free run's.
3. **Effects**: a SUCCEEDED run changed the world exactly once per tool (net of
   compensations); a run left in review or paused did each at most once.
4. **Journal**: no result recorded twice at a position; a SUCCEEDED run recorded exactly the
   fault-free run's results (same positions, types and values); any other run a subset.

``check`` returns the violations as sentences (empty = all held), each naming the plan.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from tests.reliability.faults import FaultPlan
from tests.reliability.sim import SimResult, simulate

# Results that carry the time they were recorded at (the approval's ``decided_at``): compared
# by presence and type, not value.
TIMED = ("approve",)


@cache
def reference() -> SimResult:
    """The fault-free run."""
    result = simulate(FaultPlan(seed=0, reviewer=False))
    assert result.status == "SUCCEEDED", result
    return result


def _comparable(journal: dict[str, dict[str, tuple[str, Any]]]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for run_id, positions in journal.items():
        for key, (type_, value) in positions.items():
            timed = key.rsplit(":", 1)[-1] in TIMED
            flat[f"{run_id}/{key}"] = (type_, None if timed else value)
    return flat


def check(result: SimResult) -> list[str]:
    """The violated invariants of one schedule (empty when all held)."""
    ref = reference()
    problems: list[str] = []
    if result.escaped:
        problems.append(f"an invocation raised an unexpected error: {result.escaped[:3]}")
    if not result.settled:
        problems.append(
            f"stuck: the run is {result.status} (waiting on {result.waiting_on}) "
            f"{result.sim_ms // 60_000} simulated minutes after it started {result.error}"
        )
    elif result.status == "PAUSED" and not result.in_review and not result.error:
        problems.append("paused without a reason")
    elif result.status == "FAILED":
        problems.append(f"failed although the agent raises nothing: {result.error}")
    if result.status == "SUCCEEDED" and result.output != ref.output:
        problems.append(f"result differs from the fault-free run: {result.output}")
    for tool_name, count in result.effects.items():
        if result.status == "SUCCEEDED" and count != 1:
            problems.append(f"{tool_name} happened {count} times in a SUCCEEDED run")
        elif count > 1:
            problems.append(f"{tool_name} happened {count} times (run {result.status})")
    if result.duplicates:
        problems.append(f"results recorded twice: {result.duplicates}")
    mine, theirs = _comparable(result.journal), _comparable(ref.journal)
    extra = sorted(set(mine) - set(theirs))
    differ = sorted(k for k in set(mine) & set(theirs) if mine[k] != theirs[k])
    if extra or differ:
        problems.append(f"journal differs: extra {extra[:3]}, different {differ[:3]}")
    if result.status == "SUCCEEDED":
        lost = sorted(set(theirs) - set(mine))
        if lost:
            problems.append(f"journal lost entries: {lost[:3]}")
    return problems


def explain(result: SimResult, problems: list[str]) -> str:
    """A failure message with everything needed to reproduce the schedule."""
    return (
        f"{len(problems)} invariant(s) violated:\n  - "
        + "\n  - ".join(problems)
        + f"\nreproduce with: simulate({result.plan.describe()})"
        + f"\nfaults injected: {dict(result.faults)}; invocations: {result.invocations}"
        + f"; reviews: {result.reviews}; status {result.status}, in review {result.in_review}"
    )
