"""The embedded store's bus: rules matched at publish, redelivery, giving up, no shared objects."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from durable_agents.core.scrub import remember
from durable_agents.engine.events import SOURCE, OutgoingEvent, step_ready
from durable_agents_local.embedded.bus import LocalBus, Rule
from durable_agents_local.invoke import LocalFunction

PATTERN = {"source": [SOURCE], "detail-type": ["Step Ready"]}


class Target:
    """Stands in for a LocalFunction: records events, fails as told."""

    def __init__(self, fail: Callable[[int], bool] = lambda n: False):
        self.events: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self._fail = fail
        self._lock = threading.Lock()
        self.arrived = threading.Event()

    def invoke(self, event: dict[str, Any], *, note: str = "") -> Any:
        with self._lock:
            self.events.append(event)
            self.notes.append(note)
            count = len(self.events)
        self.arrived.set()
        if self._fail(count):
            raise RuntimeError(f"delivery {count} fails")
        return None


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def make_bus(
    target: Target, stop: threading.Event, *, max_receives: int = 3, redelivery: float = 0.05
) -> LocalBus:
    rule = Rule("StepRunnerStepReady", "bus", PATTERN, cast(LocalFunction, target), max_receives)
    bus = LocalBus(
        "bus",
        region="us-east-1",
        rules=[rule],
        concurrency=2,
        redelivery_seconds=redelivery,
        stop=stop,
    )
    bus.start()
    return bus


def test_a_matching_event_reaches_its_target_in_the_eventbridge_envelope(
    stop: threading.Event,
) -> None:
    target = Target()
    bus = make_bus(target, stop)
    bus.publish([step_ready("run-1", "start")])
    wait_for(lambda: len(target.events) == 1)
    event = target.events[0]
    assert event["source"] == SOURCE
    assert event["detail-type"] == "Step Ready"
    assert event["detail"] == {"run_id": "run-1", "reason": "start"}
    assert {"id", "time", "account", "region", "resources", "version"} <= set(event)


def test_an_event_no_rule_matches_goes_nowhere(stop: threading.Event) -> None:
    target = Target()
    bus = make_bus(target, stop)
    assert bus.put(SOURCE, "Run Finished", {"run_id": "run-1"}) == 0
    assert bus.put(SOURCE, "Step Ready", {"run_id": "run-1"}, bus_name="other") == 0
    assert bus.put(SOURCE, "Step Ready", {"run_id": "run-1"}) == 1
    wait_for(lambda: len(target.events) == 1)
    time.sleep(0.05)
    assert [e["detail-type"] for e in target.events] == ["Step Ready"]


def test_a_failed_delivery_comes_again_then_succeeds(stop: threading.Event) -> None:
    target = Target(fail=lambda n: n == 1)
    bus = make_bus(target, stop)
    bus.publish([step_ready("run-1")])
    wait_for(lambda: len(target.events) == 2)
    assert target.notes == ["", "delivery 2"]
    assert bus.dead_letters == {"StepRunnerStepReady": []}


def test_an_event_is_given_up_after_max_receives(stop: threading.Event) -> None:
    target = Target(fail=lambda n: True)
    bus = make_bus(target, stop, max_receives=3)
    bus.publish([step_ready("run-1")])
    wait_for(lambda: bus.dead_letters["StepRunnerStepReady"] != [])
    time.sleep(0.2)  # no fourth delivery
    assert len(target.events) == 3
    (dead,) = bus.dead_letters["StepRunnerStepReady"]
    assert dead["detail"]["run_id"] == "run-1"


def test_the_target_never_shares_the_publishers_objects(stop: threading.Event) -> None:
    target = Target()
    bus = make_bus(target, stop)
    detail: dict[str, Any] = {"run_id": "run-1", "nested": {"a": [1]}}
    bus.put(SOURCE, "Step Ready", detail)
    detail["nested"]["a"].append(2)
    wait_for(lambda: len(target.events) == 1)
    assert target.events[0]["detail"]["nested"] == {"a": [1]}


def test_what_eventbridge_would_refuse_is_refused_at_publish(stop: threading.Event) -> None:
    bus = make_bus(Target(), stop)
    with pytest.raises(TypeError):
        bus.put(SOURCE, "Step Ready", {"run_id": object()})


def test_a_revealed_secret_is_masked_in_what_the_runtime_publishes(
    stop: threading.Event,
) -> None:
    target = Target()
    bus = make_bus(target, stop)
    token = "sk-live-embedded-bus-0123456789"
    remember(token)
    bus.publish([OutgoingEvent("Step Ready", {"run_id": "run-1", "reason": f"saw {token}"})])
    wait_for(lambda: len(target.events) == 1)
    assert token not in str(target.events[0])


def test_duplicates_are_delivered_concurrently(stop: threading.Event) -> None:
    release = threading.Event()
    inside = threading.Semaphore(0)

    class Slow(Target):
        def invoke(self, event: dict[str, Any], *, note: str = "") -> Any:
            inside.release()
            release.wait(5)
            return super().invoke(event, note=note)

    target = Slow()
    bus = make_bus(target, stop)
    bus.publish([step_ready("run-1"), step_ready("run-1")])
    # Both deliveries are inside the handler at once (two consumer threads).
    assert inside.acquire(timeout=5)
    assert inside.acquire(timeout=5)
    release.set()
    wait_for(lambda: len(target.events) == 2)


def test_stop_drops_queued_events_and_pending_redeliveries(stop: threading.Event) -> None:
    target = Target(fail=lambda n: True)
    bus = make_bus(target, stop, redelivery=30)
    bus.publish([step_ready("run-1")])
    wait_for(lambda: len(target.events) == 1)
    stop.set()
    started = time.monotonic()
    bus.join(timeout=5)
    assert time.monotonic() - started < 2  # the 30 s redelivery timer does not hold it
    assert len(target.events) == 1
