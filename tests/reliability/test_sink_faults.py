"""Broken observability sinks under faults: logs, metrics, traces and the stream cache all raise.

The reference agent's schedules run once as they are and once with every sink broken at every
boundary it is called from: ``ctx.logger``'s logger and a handler on the runtime's loggers raise
in ``emit``, the StepRunner's plugin has a logger, metrics, tracer and metric writer that raise,
and the stream cache raises on every write. Under the same fault plan the run must end exactly
as without them — same status, output, journal, effects, invocations — and every invariant
must hold (LESSONS: failure of logs, traces, metrics or the stream store never fails a step).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import asdict
from typing import Any

import pytest

from durable_agents.aws.telemetry import PowertoolsPlugin
from durable_agents.engine.runtime import Runtime
from tests.reliability import sim
from tests.reliability.faults import FAULT_CLASSES, FaultPlan
from tests.reliability.invariants import check

pytestmark = pytest.mark.reliability

PLANS = [
    pytest.param(FaultPlan(seed=seed, rates={cls: 0.15}), id=f"{cls}-{seed}")
    for cls in FAULT_CLASSES
    for seed in (4,)
] + [pytest.param(FaultPlan(seed=5, rates=dict.fromkeys(FAULT_CLASSES, 0.05)), id="all-5")]


class SinkDownError(Exception):
    """What every broken sink raises."""


class Broken:
    """Any sink: every method raises, and each call is counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        def fail(*_: Any, **__: Any) -> None:
            self.calls += 1
            raise SinkDownError(f"{name}: the sink is down")

        return fail


class RaisingHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.calls = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.calls += 1
        raise SinkDownError("the log shipper is down")


@pytest.mark.parametrize("plan", PLANS)
def test_broken_sinks_change_nothing_under_faults(plan: FaultPlan) -> None:
    without = sim.simulate(plan)
    sinks = {name: Broken() for name in ("agent_logger", "logger", "metrics", "tracer", "stream")}
    emitted = Broken()
    handler = RaisingHandler()
    runtime_logs = logging.getLogger("durable_agents")
    level = runtime_logs.level
    plugin = PowertoolsPlugin(
        logger=sinks["logger"],
        metrics=sinks["metrics"],
        tracer=sinks["tracer"],
        emit=emitted.emit,
    )
    with pytest.MonkeyPatch.context() as patch:
        broken = functools.partial(
            Runtime, plugins=[plugin], logger=sinks["agent_logger"], stream_sink=sinks["stream"]
        )
        patch.setattr(sim, "Runtime", broken)
        runtime_logs.addHandler(handler)
        runtime_logs.setLevel(logging.DEBUG)
        try:
            with_broken_sinks = sim.simulate(plan)
        finally:
            runtime_logs.removeHandler(handler)
            runtime_logs.setLevel(level)
    assert asdict(with_broken_sinks) == asdict(without)  # to the simulated millisecond
    assert check(with_broken_sinks) == check(without)
    # The sinks were really called (and raised): the test exercises what it claims to.
    assert sinks["tracer"].calls > 0 and sinks["metrics"].calls > 0
