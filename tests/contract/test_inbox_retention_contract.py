"""Retention of a run's event inbox (ADR 0012, ADR 0014), on both journal backends.

A run's events are wait records whose ids (``evs-…`` slots, ``evk-…`` keys) cannot be derived
from its partition: an event never waited for leaves no journal entry. The run header lists the
event names it received (``RunHeader.event_names``); the DynamoDB stamping pass walks each
name's slots by key and stamps slot and key, so they expire with the run as on the in-memory
journal.
"""

from __future__ import annotations

import boto3
import pytest

from durable_agents.core.ids import key_id, slot_id
from durable_agents.core.models import RunStatus
from durable_agents.engine import inbox as run_inbox
from durable_agents.engine.inbox import (
    MAX_EVENT_NAMES,
    RunNotAcceptingEventsError,
    TooManyEventNamesError,
    send_event,
)
from durable_agents.errors import WaitNotFoundError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.dynamodb_items import ItemCodec
from durable_agents.journal.item_size import HEADER_REST_BUDGET_BYTES, attribute_size
from durable_agents.journal.retention import LATE_WRITE_GRACE_MS
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner
from tests.contract.test_retention_contract import _items, expire, header, stamp_all
from tests.contract.test_run_events_contract import chat_agent


def a_finished_run_with_events(journal: JournalStore) -> tuple[AgentTestRunner, str, list[str]]:
    """A chat run: three ``message`` events taken, two ``aside`` events never waited for."""
    runner = AgentTestRunner(chat_agent(), journal=journal, mode="faithful")
    started, _ = runner.runtime.start_run("chatter", "hello")
    run_id = started.run_id
    waits: list[str] = []
    for n, text in enumerate(("one", "two", "bye"), start=1):
        send_event(journal, runner.clock, run_id, "message", text, f"m-{n}")
        waits += [slot_id(run_id, "message", n), key_id(run_id, "message", f"m-{n}")]
    for n in (1, 2):
        send_event(journal, runner.clock, run_id, "aside", {"n": n}, f"a-{n}")
        waits += [slot_id(run_id, "aside", n), key_id(run_id, "aside", f"a-{n}")]
    send_event(journal, runner.clock, run_id, "aside", {"n": 1}, "a-1")  # a retry: nothing new
    done = runner.resume(run_id)
    assert done.status == "SUCCEEDED", done.error
    assert journal.get_run(run_id).event_names == frozenset({"message", "aside"})
    for each in waits:
        journal.get_wait(each)  # all there while the run is kept
    return runner, run_id, waits


def test_a_finished_runs_event_records_expire_with_it(journal: JournalStore) -> None:
    runner, run_id, waits = a_finished_run_with_events(journal)
    now = runner.clock.now_ms()
    stamp_all(journal, now)
    stamp_all(journal, now + LATE_WRITE_GRACE_MS)
    assert journal.expiring_runs_page(10**13 - 1).items == []
    expires = journal.get_run(run_id).expires_at_ms
    assert expires is not None
    if isinstance(journal, DynamoDBJournal):
        client = boto3.client("dynamodb", region_name="us-east-1")
        owned = [i for i in _items(client) if run_id in str(i)]
        inbox = sorted(i["pk"]["S"] for i in owned if i["pk"]["S"].startswith("WAIT#ev"))
        assert inbox == sorted(f"WAIT#{each}" for each in waits)
        assert [i["pk"]["S"] + i["sk"]["S"] for i in owned if "ttl" not in i] == []
        assert {i["ttl"]["N"] for i in owned} == {str(expires // 1000)}
    expire(journal, expires)
    for each in waits:
        with pytest.raises(WaitNotFoundError):
            journal.get_wait(each)
    if isinstance(journal, DynamoDBJournal):
        assert [i for i in _items(client) if run_id in str(i)] == []


def test_on_dynamodb_a_second_pass_writes_nothing_new(dynamodb_journal: DynamoDBJournal) -> None:
    runner, run_id, waits = a_finished_run_with_events(dynamodb_journal)
    now = runner.clock.now_ms()
    first = dynamodb_journal.stamp_expiry(run_id, now)
    assert first >= len(waits)
    assert dynamodb_journal.stamp_expiry(run_id, now + LATE_WRITE_GRACE_MS) == 0


def test_an_event_sent_after_the_finish_is_refused(journal: JournalStore) -> None:
    runner, run_id, _ = a_finished_run_with_events(journal)
    with pytest.raises(RunNotAcceptingEventsError):
        send_event(journal, runner.clock, run_id, "late", 1)
    with pytest.raises(WaitNotFoundError):
        journal.get_wait(slot_id(run_id, "late", 1))
    assert "late" not in journal.get_run(run_id).event_names


def test_a_run_takes_events_of_a_bounded_number_of_names(
    journal: JournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_inbox, "MAX_EVENT_NAMES", 3)  # the rule, without 64 sends
    journal.create_run(header("run-1", key=None))
    clock = AgentTestRunner(chat_agent(), journal=journal).clock
    names = [f"{n:02d}".ljust(80, "x") for n in range(3)]  # the longest names there can be
    for name in names:
        send_event(journal, clock, "run-1", name, None)
    send_event(journal, clock, "run-1", names[0], "again")  # a known name: still taken
    with pytest.raises(TooManyEventNamesError) as refused:
        send_event(journal, clock, "run-1", "one-too-many", None)
    assert refused.value.limit == 3 and refused.value.name == "one-too-many"
    run = journal.get_run("run-1")
    assert run.event_names == frozenset(names) and run.status is RunStatus.RUNNING
    with pytest.raises(WaitNotFoundError):
        journal.get_wait(slot_id("run-1", "one-too-many", 1))


def test_the_most_names_a_header_can_hold_stay_small() -> None:
    """``MAX_EVENT_NAMES`` names of the longest kind fit well inside the header's budget."""
    names = {f"{n:02d}".ljust(80, "x") for n in range(MAX_EVENT_NAMES)}
    full = header("run-1").replace(event_names=frozenset(names))
    item = ItemCodec(None).header_item(full)
    assert attribute_size("event_names", item["event_names"]) < HEADER_REST_BUDGET_BYTES // 8
