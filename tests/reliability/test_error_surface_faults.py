"""The errors a user sees, under faults: always the one that happened (issue 32, item 3).

The simulator (``sim.Simulator``) drives a small agent instead of the reference one: a
``wait_for_condition`` whose check raises, a callback the external system fails, and a batch
with failed branches whose ``throw_if_error`` is caught. Whatever crashes, timeouts, lost or
duplicated writes and deliveries a schedule injects, it must end with:

* the run SUCCEEDED with the fault-free output: each typed wrapper caught by name, its message
  the original error's, its ``__cause__`` the original error (rebuilt as recorded);
* the condition's and the callback's records holding the original error's type and message
  (what the Api, console and CLI show), the wrapper's type beside them.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import (
    NO_RETRY,
    AgentRegistry,
    BatchFailedError,
    CallbackFailedError,
    CompletionPolicy,
    ConditionCheckFailedError,
    DurableContext,
    agent,
)
from durable_agents.core.models import EntryType, WaitStatus
from durable_agents.core.serde_errors import WRAPPER_KEY
from durable_agents.engine.events import EventPublishError
from durable_agents.engine.operations.callback import complete_callback
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.errors import InfrastructureError
from tests.reliability.faults import WRITE_MODES, FaultPlan, Target, mixed_plans
from tests.reliability.sim import RUN_ID, SimResult, Simulator, _Scheduler

pytestmark = pytest.mark.reliability

agents = AgentRegistry()


class StatusCheckError(Exception):
    """What the polled service's check raises."""


def _check(state: int) -> int:
    raise StatusCheckError(f"status down at {state}")


def _declined(child: DurableContext) -> int:
    def charge() -> int:
        raise ValueError("card declined")

    return int(child.step(charge, name="charge", retry=NO_RETRY))


def _seen(exc: BaseException) -> list[Any]:
    cause = exc.__cause__
    return [type(exc).__name__, str(exc), type(cause).__name__, str(cause)]


@agent(name="error-surface", version="1", registry=agents)
def error_surface(ctx: DurableContext, _: Any) -> dict[str, Any]:
    """Each wrapper caught by name; a step after, so later invocations replay them all."""
    out: dict[str, Any] = {}
    try:
        ctx.wait_for_condition(_check, initial_state=3, until=bool, name="poll")
    except ConditionCheckFailedError as exc:
        out["condition"] = _seen(exc)
    try:
        ctx.create_callback("approval").result()
    except CallbackFailedError as exc:
        out["callback"] = _seen(exc)
    batch = ctx.parallel(
        [lambda c: 1, _declined], name="fan", completion=CompletionPolicy(tolerated_failure_count=1)
    )
    try:
        batch.throw_if_error()
    except BatchFailedError as exc:
        out["batch"] = _seen(exc)
    ctx.step(lambda: None, name="after")
    return out


EXPECTED = {
    "condition": [
        "ConditionCheckFailedError",
        "status down at 3",
        "StatusCheckError",
        "status down at 3",
    ],
    "callback": ["CallbackFailedError", "not approved", "StepError", "RejectedError: not approved"],
    "batch": ["BatchFailedError", "card declined", "ValueError", "card declined"],
}
RECORDED = {
    "poll": ("StatusCheckError", "status down at 3"),
    "approval": ("RejectedError", "not approved"),
}


class SurfaceSimulator(Simulator):
    """The simulator, driving ``error-surface``; its external system fails the callback."""

    def _runtime(self, sticky: StickyRuns | None) -> Runtime:
        return Runtime(
            self.store,
            registry=agents,
            publisher=self.bus,
            clock=self.clock,
            wait_scheduler=_Scheduler(self),
            sticky=sticky,
        )

    def _start(self) -> None:
        for _ in range(self.plan.max_faults + 10):
            try:
                self.runtime.start_run("error-surface", None, run_id=RUN_ID, idempotency_key="k-1")
                return
            except (InfrastructureError, EventPublishError):  # refused: the client retries
                self.clock.advance(1_000)
        raise AssertionError("the run could not be started after the faults stopped")

    def _people(self) -> None:
        for record in self.inner.list_waits("callback", WaitStatus.PENDING):
            self._settle(
                lambda r=record: complete_callback(
                    self.inner,
                    self.clock,
                    r,
                    error_type="RejectedError",
                    error_message="not approved",
                ),
                record.run_id,
            )


def problems_of(simulator: SurfaceSimulator, result: SimResult) -> list[str]:
    """What the schedule broke (empty: every error was seen and recorded as it happened)."""
    problems: list[str] = []
    if result.escaped:
        problems.append(f"an invocation raised an unexpected error: {result.escaped[:3]}")
    if result.status != "SUCCEEDED" or result.output != EXPECTED:
        problems.append(f"the run is {result.status} with {result.output} {result.error}")
    if result.duplicates:
        problems.append(f"results recorded twice: {result.duplicates}")
    entries = simulator.inner.load(RUN_ID).entries
    for name, expected in RECORDED.items():
        failed = [e for e in entries if e.name == name and e.type is EntryType.FAILED]
        errors = [(e.error.type, e.error.message) for e in failed if e.error is not None]
        if errors != [expected]:
            problems.append(f"{name} recorded {errors}, not {expected}")
        elif not all(e.error and WRAPPER_KEY in (e.error.data or {}) for e in failed):
            problems.append(f"{name}'s record lost its wrapper")
    return problems


def run(plan: FaultPlan) -> None:
    simulator = SurfaceSimulator(plan)
    result = simulator.run()
    problems = problems_of(simulator, result)
    assert not problems, (
        f"{problems}\nreproduce with: {plan.describe()}\nfaults injected: {dict(result.faults)}"
    )


RANDOM = mixed_plans(8)


@pytest.mark.parametrize("plan", list(RANDOM.values()), ids=list(RANDOM))
def test_the_errors_users_see_survive_any_schedule(plan: FaultPlan) -> None:
    run(plan)


# Every write boundary of the records that hold the errors: the condition's scope, the
# check's step, and the batch.
TARGETED = {
    f"{op}-{point}-{mode}": FaultPlan(targets=(Target(op, point, mode),), reviewer=False)
    for op in ("poll", "check-1", "fan")
    for point, mode in [
        *((p, m) for p in ("before_claim", "after_record") for m in ("crash", "timeout")),
        *(("commit", m) for m in WRITE_MODES),
    ]
}


@pytest.mark.parametrize("plan", list(TARGETED.values()), ids=list(TARGETED))
def test_faults_at_the_writes_of_the_failed_operations_keep_the_original_error(
    plan: FaultPlan,
) -> None:
    run(plan)
