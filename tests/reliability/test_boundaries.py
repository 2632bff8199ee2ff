"""Faults at every write boundary of every operation kind of the reference agent.

For each operation (step, model call, the four tool kinds, wait, approval, callback, sub-agent
invoke and its step, map and a map branch, emit, a memory write and read, durable polling (its
scope, a check, a pause), and the reversible tool's compensation, which recovery writes as
further commits of ``book-hotel``):

* at each of the runtime's hook points (where it has them): a crash (``SimulatedCrash``) and a
  Lambda timeout, once and three times in a row;
* at each of its journal writes (1st, 2nd, 3rd): the write refused (never lands), landed but
  reported as failed, the process dying just before or just after it, the Lambda timing out
  just after it; and refused / landed-but-failed three times in a row.

Each case runs the simulator with that one fault (no random faults) and checks every invariant.
A case that fails today because of a known defect is ``xfail(strict=True)``: it turns into a
failure (XPASS) the moment the fix lands, so the mark is removed with the fix.
"""

from __future__ import annotations

import pytest

from durable_agents.engine.sticky.carriers import CARRIERS
from tests.reliability import tally
from tests.reliability.faults import WRITE_MODES, FaultPlan, Target
from tests.reliability.invariants import reference

pytestmark = pytest.mark.reliability

OPERATIONS = {
    "step": "shipment-submit",
    "llm": "plan",
    "tool-lookup": "reserve-seat",
    "tool-idempotent": "charge-card",
    "tool-reversible+compensation": "book-hotel",
    "tool-irreversible": "send-sms",
    "wait": "cool-off",
    "approval": "approve",
    "callback": "shipment",
    "invoke": "audit",
    "sub-agent-step": "stamp",
    "map": "parts",
    "map-branch": "part",
    "child": "branch-0",  # a map branch's child scope: its result is a child-context write
    "emit": "done-event",
    "memory-write": "memory.put",
    "memory-read": "memory.get",
    "condition": "settle",  # durable polling: its scope's result is one write
    "condition-check": "check-1",  # a check: a step with the check's retry policy
    "condition-pause": "pause-1",  # the timer between the two checks
    # wait_for_callback: a scope and its callback (both "pickup"), and the submitter's step
    "wait-for-callback": "pickup",
    "wait-for-callback-submit": "submit",
    # a flat map (no branch scope records) and a step of one of its branches
    "flat-map": "flat-parts",
    "flat-map-branch": "flat-part",
}
HOOK_POINTS = ("before_claim", "before_execute", "after_execute", "after_record")
# Operation kinds with all four hook points (they claim, execute, then record).
EXECUTED = ("step", "llm", "tool-lookup", "tool-idempotent", "tool-reversible+compensation",
            "tool-irreversible", "invoke", "sub-agent-step", "map-branch",
            "condition-check", "wait-for-callback-submit", "flat-map-branch")  # fmt: skip
# The others call before_claim / after_record around their writes; the wait writes twice (its
# timer, then its completion), so its 2nd opportunity is a case of its own.
RECORDED = {"wait": 2, "approval": 1, "callback": 1, "map": 1, "child": 1, "emit": 1,
            "memory-read": 1, "condition": 1, "condition-pause": 2,
            "wait-for-callback": 2, "flat-map": 1}  # fmt: skip
# A memory write has no claim: it applies the write (keyed by its operation id) between
# before_claim and after_execute, then records it; a crash after_execute must not write twice.
MEMORY_WRITE_POINTS = ("before_claim", "after_execute", "after_record")

# Cases that fail today, by the defect they hit (found by this suite; see docs/reliability.md).
D13 = "defect 13: crashes and failed writes consume the operation's retry budget"
KNOWN: dict[str, str] = {
    **{
        f"step-{p}-{m}-x3": D13
        for p in ("before_execute", "after_execute")
        for m in ("crash", "timeout")
    },
    **{
        f"sub-agent-step-{p}-{m}-x3": D13
        for p in ("before_execute", "after_execute")
        for m in ("crash", "timeout")
    },
    "step-write1-infra_after-x3": D13,
    "sub-agent-step-write1-infra_after-x3": D13,
    "tool-lookup-before_execute-timeout-x3": D13,
    "tool-lookup-write1-infra_after-x3": D13,
    "map-branch-before_execute-timeout-x3": D13,
    "map-branch-after_execute-timeout-x3": D13,
}


def _cases() -> list[tuple[str, Target]]:
    writes = reference().writes
    cases: list[tuple[str, Target]] = []
    for kind, op in OPERATIONS.items():
        if kind in EXECUTED:
            for point in HOOK_POINTS:
                for mode in ("crash", "timeout"):
                    cases.append((f"{kind}-{point}-{mode}", Target(op, point, mode)))
                    cases.append((f"{kind}-{point}-{mode}-x3", Target(op, point, mode, times=3)))
        if kind == "memory-write":
            for point in MEMORY_WRITE_POINTS:
                for mode in ("crash", "timeout"):
                    cases.append((f"{kind}-{point}-{mode}", Target(op, point, mode)))
                    cases.append((f"{kind}-{point}-{mode}-x3", Target(op, point, mode, times=3)))
        for nth in range(1, RECORDED.get(kind, 0) + 1):
            for point in ("before_claim", "after_record"):
                at = f"{point}{nth}" if RECORDED[kind] > 1 else point
                for mode in ("crash", "timeout"):
                    cases.append((f"{kind}-{at}-{mode}", Target(op, point, mode, nth=nth)))
                    target = Target(op, point, mode, nth=nth, times=3)
                    cases.append((f"{kind}-{at}-{mode}-x3", target))
        assert writes[op], f"the reference run never writes {op}"
        for nth in range(1, min(writes[op], 3) + 1):
            for mode in WRITE_MODES:
                cases.append((f"{kind}-write{nth}-{mode}", Target(op, "commit", mode, nth=nth)))
            for mode in ("infra_before", "infra_after"):
                target = Target(op, "commit", mode, nth=nth, times=3)
                cases.append((f"{kind}-write{nth}-{mode}-x3", target))
    return cases


CASES = _cases()


@pytest.mark.parametrize(
    "target",
    [pytest.param(t, id=i) for i, t in CASES],
)
def test_fault_at_boundary(target: Target) -> None:
    result = tally.run_checked(FaultPlan(targets=(target,)), f"boundary-{target.mode}")
    assert sum(result.faults.values()) >= 1, f"{target} never fired: the case tests nothing"


@pytest.mark.parametrize(
    ("target", "carrier"),
    [
        # Every boundary with sticky continuation too (ADR 0017): the fault then often hits an
        # agent that went on from where it parked, on a greenlet or a thread (alternating
        # within the fast subset). A quarter of the cases in the fast subset, all of them in
        # `make reliability`.
        pytest.param(
            t,
            CARRIERS[(n // 4) % 2],
            id=f"{i}-{CARRIERS[(n // 4) % 2]}",
            marks=() if n % 4 == 0 else pytest.mark.reliability_full,
        )
        for n, (i, t) in enumerate(CASES)
    ],
)
def test_fault_at_boundary_sticky(target: Target, carrier: str) -> None:
    plan = FaultPlan(targets=(target,), sticky=1, carrier=carrier)
    result = tally.run_checked(plan, f"boundary-sticky-{target.mode}")
    assert sum(result.faults.values()) >= 1, f"{target} never fired: the case tests nothing"
