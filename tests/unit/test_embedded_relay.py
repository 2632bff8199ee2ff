"""The embedded store's outbox relay: ``ctx.emit`` events from the SQLite journal to the bus."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from durable_agents.aws.outbox import OUTBOX_SOURCE
from durable_agents.core.models import Entry, EntryType, OpKind, RunHeader, RunStatus
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents_local.embedded.bus import LocalBus, Rule
from durable_agents_local.embedded.relay import OutboxRelay
from durable_agents_local.invoke import LocalFunction


class Target:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def invoke(self, event: dict[str, Any], *, note: str = "") -> Any:
        with self._lock:
            self.events.append(event)


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def header(run_id: str) -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent="shop",
        versions={"workflow_version": "1"},
        status=RunStatus.RUNNING,
        input="{}",
        created_at_ms=1_000,
        updated_at_ms=1_000,
    )


def emitted(run_id: str, n: int, value: str | None = None) -> Entry:
    return Entry(
        run_id=run_id,
        position=f"{n:08d}",
        op_id=f"{run_id}:emit:{n}",
        kind=OpKind.EMIT,
        name="emit",
        type=EntryType.SUCCEEDED,
        value=value
        if value is not None
        else json.dumps({"detail_type": "Order Placed", "detail": {"n": n}}),
        recorded_at_ms=2_000,
        meta={"outbox": True, "event_id": f"{run_id}:emit:{n}"},
    )


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def parts(path: Path, stop: threading.Event) -> tuple[SqliteJournal, LocalBus, OutboxRelay, Target]:
    journal = SqliteJournal(path)
    target = Target()
    rule = Rule("ShopOrders", "bus", {"source": [OUTBOX_SOURCE]}, cast(LocalFunction, target), 3)
    bus = LocalBus(
        "bus", region="us-east-1", rules=[rule], concurrency=1, redelivery_seconds=1, stop=stop
    )
    relay = OutboxRelay(path, journal, bus, stop)
    return journal, bus, relay, target


def test_an_emitted_event_reaches_the_bus_when_the_journal_commits(
    tmp_path: Path, stop: threading.Event
) -> None:
    journal, bus, relay, target = parts(tmp_path / "local.sqlite3", stop)
    bus.start()
    relay.start()
    journal.create_run(header("run-1"))
    started = time.monotonic()
    journal.commit("run-1", [emitted("run-1", 1)])
    wait_for(lambda: len(target.events) == 1)
    # Woken by the commit, not by its one-second idle timer.
    assert time.monotonic() - started < 0.9
    event = target.events[0]
    assert event["source"] == OUTBOX_SOURCE
    assert event["detail-type"] == "Order Placed"
    assert event["detail"] == {"event_id": "run-1:emit:1", "run_id": "run-1", "data": {"n": 1}}
    stop.set()
    relay.join(5)
    bus.join(5)


def test_the_checkpoint_survives_a_restart_so_nothing_is_relayed_twice(
    tmp_path: Path, stop: threading.Event
) -> None:
    path = tmp_path / "local.sqlite3"
    journal, _, relay, target = parts(path, stop)
    journal.create_run(header("run-1"))
    journal.commit("run-1", [emitted("run-1", 1), emitted("run-1", 2)])
    assert relay.drain() == 2
    journal.close()

    journal2, _, relay2, _ = parts(path, threading.Event())
    assert relay2.checkpoint == relay.checkpoint
    assert relay2.drain() == 0
    journal2.commit("run-1", [emitted("run-1", 3)])
    assert relay2.drain() == 1
    journal2.close()
    assert len(target.events) == 0  # the bus was never started: drain only puts


def test_a_malformed_outbox_entry_is_skipped_not_retried_for_ever(
    tmp_path: Path, stop: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    journal, _, relay, _ = parts(tmp_path / "local.sqlite3", stop)
    journal.create_run(header("run-1"))
    journal.commit("run-1", [emitted("run-1", 1, value='{"no": "detail type"}')])
    journal.commit("run-1", [emitted("run-1", 2)])
    assert relay.drain() == 2
    assert relay.drain() == 0
    assert "malformed" in caplog.text
    journal.close()
