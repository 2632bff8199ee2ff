"""A stop request (``POST /runs/{id}/cancel`` / ``terminate``) under faults, on both journals.

The request is one conditional header write, then a ``Step Ready``. The write fails before it
lands, lands but the caller sees a failure, or the ``Step Ready`` after it is lost (the bus
refuses it, or the process dies before sending it). Whatever happens:

* the request is recorded at most once (the first one stands: a retry changes nothing);
* a caller that retries after an error gets the run stopped — CANCELLED or TERMINATED;
* a request recorded but never announced (nobody retries) is found by the reconciler's sweep
  of due timers (the write made the suspended run due at once), and the run stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from durable_agents.admin.reconciler import sweep
from durable_agents.core.models import RunChange, RunStatus
from durable_agents.engine.cancellation import request_stop
from durable_agents.engine.events import CollectingPublisher, EventPublishError, OutgoingEvent
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import InfrastructureError
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner
from tests.contract.test_cancel_contract import approval_agent

pytestmark = pytest.mark.reliability


class _FailingWrites:
    """Wraps a journal: the first stop-request write fails before or after it lands."""

    def __init__(self, inner: JournalStore, mode: str):
        self._inner = inner
        self.mode = mode
        self.fired = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, run_id: str, entries: Sequence[Any], change: RunChange | None = None,
               **kw: Any) -> None:  # fmt: skip
        stop = change is not None and change.cancel_requested not in (None,) and not self.fired
        if stop and change is not None and isinstance(change.cancel_requested, dict):
            self.fired += 1
            if self.mode == "infra_before":
                raise InfrastructureError("UpdateItem", "ServiceUnavailable", "never landed")
            self._inner.commit(run_id, entries, change, **kw)
            raise InfrastructureError("UpdateItem", "RequestTimeout", "landed, answer lost")
        self._inner.commit(run_id, entries, change, **kw)


class _LosingBus(CollectingPublisher):
    """Refuses the first ``Step Ready`` of a stop request (``lose`` of them)."""

    def __init__(self, lose: int):
        super().__init__()
        self.lose = lose

    def publish(self, events: Sequence[OutgoingEvent]) -> None:
        reasons = {e.detail.get("reason") for e in events}
        if self.lose and reasons & {"cancel", "terminate"}:
            self.lose -= 1
            raise EventPublishError("the bus refused the events")
        super().publish(events)


def _suspended(journal: JournalStore) -> tuple[AgentTestRunner, str]:
    runner = AgentTestRunner(approval_agent(__import__("collections").Counter()), journal=journal)
    run_id = runner.run(500).run_id
    assert journal.get_run(run_id).status is RunStatus.SUSPENDED
    return runner, run_id


def _drive(runtime: Runtime, run_id: str) -> RunStatus:
    for _ in range(20):
        if runtime.store.get_run(run_id).status.terminal:
            break
        runtime.execute(run_id, budget=1)
    return runtime.store.get_run(run_id).status


@pytest.mark.parametrize("mode", ["infra_before", "infra_after"])
@pytest.mark.parametrize("action", ["cancel", "terminate"])
def test_a_failed_write_is_retried_and_recorded_once(
    journal: JournalStore, mode: str, action: str
) -> None:
    runner, run_id = _suspended(journal)
    store = _FailingWrites(journal, mode)
    with pytest.raises(InfrastructureError):
        request_stop(store, runner.clock, runner.publisher, run_id, mode=action,  # type: ignore[arg-type]
                     reason="first", by="user:ops")  # fmt: skip
    landed = journal.get_run(run_id).cancel_requested
    assert (landed is not None) == (mode == "infra_after")
    runner.clock.advance(1_000)
    header = request_stop(  # the caller's retry
        store,
        runner.clock,
        runner.publisher,
        run_id,
        mode=action,
        reason="retry",
        by="u:2",  # type: ignore[arg-type]
    )
    recorded = header.cancel_requested or {}
    # The first request stands if it landed; the retry's otherwise. Never two.
    assert recorded["reason"] == ("first" if mode == "infra_after" else "retry")
    assert journal.get_run(run_id).cancel_requested == recorded
    stopped = RunStatus.CANCELLED if action == "cancel" else RunStatus.TERMINATED
    assert _drive(runner.runtime, run_id) is stopped


@pytest.mark.parametrize("action", ["cancel", "terminate"])
def test_a_lost_step_ready_is_made_up_for_by_the_reconciler(
    journal: JournalStore, action: str
) -> None:
    runner, run_id = _suspended(journal)
    bus = _LosingBus(lose=1)
    with pytest.raises(EventPublishError):
        request_stop(journal, runner.clock, bus, run_id, mode=action, reason="r", by="u")
    assert journal.get_run(run_id).cancel_requested is not None  # recorded, never announced
    runtime = Runtime(journal, registry=runner.registry, publisher=bus, clock=runner.clock)
    runner.clock.advance(1_000)
    report = sweep(runtime, stall_after_ms=10**12)  # only due timers: nothing else is stale
    assert report.timers_fired == 1
    stopped = RunStatus.CANCELLED if action == "cancel" else RunStatus.TERMINATED
    assert _drive(runtime, run_id) is stopped
