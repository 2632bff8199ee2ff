"""A recorded ``wait_for_callback`` is recognisable (issue 32, item 4).

Its scope is recorded as it always was, kind ``child``, with ``meta["sub_kind"]`` =
``wait_for_callback`` on the scope's result entry (``Entry.sub_kind``, the SDK's
``OperationSubType.WAIT_FOR_CALLBACK``). Replay never compares the marker: scopes recorded
before it (tests/replay/golden/golden-courier-v1-unmarked-completed.json) replay unchanged.
The harness's operation views, the history events, the CLI timeline, the console and the
plugin hooks show it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.console_timeline import _operation_row
from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.views import entry_event, history
from durable_agents.core.models import (
    SUB_KIND_KEY,
    Entry,
    EntryType,
    OpKind,
    RunHeader,
    RunStatus,
    SubKind,
)
from durable_agents.engine.operations.callback import CallbackFailedError
from durable_agents.engine.replay_index import group_entries
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.dynamodb_items import ItemCodec
from durable_agents.journal.export import snapshot_from_dict, snapshot_to_dict
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.sqlite_records import ENTRIES
from durable_agents.journal.store import JournalStore
from durable_agents_local.cli.tables import operations, timeline_table
from durable_agents_local.testing import AgentTestRunner
from tests.contract.test_plugins_contract import Recorder
from tests.replay.golden_cases import CASES, GOLDEN_DIR
from tests.replay.test_golden import install

UNMARKED = "golden-courier-v1-unmarked-completed.json"
MARKED = "golden-courier-v1-completed.json"


def _courier(registry: AgentRegistry, sent: list[str]) -> Any:
    @agent(name="courier", version="1", registry=registry)
    def courier(ctx: DurableContext, order: str) -> dict[str, Any]:
        parcel = ctx.step(lambda: f"parcel-{order}", name="pack")
        pickup = ctx.wait_for_callback(sent.append, name="pickup", timeout=3600)
        return {"parcel": parcel, "pickup": pickup}

    return courier


def _scope_results(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.kind is OpKind.CHILD and e.type.is_result]


def _golden(file: str) -> dict[str, Any]:
    return json.loads((GOLDEN_DIR / file).read_text())  # type: ignore[no-any-return]


# -- new runs record the marker, in every journal backend ---------------------------------------


def test_a_new_run_marks_the_scope_and_only_the_scope(journal: JournalStore) -> None:
    sent: list[str] = []
    runner = AgentTestRunner(_courier(AgentRegistry(), sent), journal=journal)
    waiting = runner.run("o-1")
    assert waiting.status == "SUSPENDED"
    done = runner.complete_callback(waiting.run_id, "pickup", result={"courier": "c-1"})
    assert done.output == {"parcel": "parcel-o-1", "pickup": {"courier": "c-1"}}
    # Loaded back from the backend: DynamoDB items, SQLite rows, or the in-memory entries.
    entries = journal.load(done.run_id).entries
    (scope,) = _scope_results(entries)
    assert scope.sub_kind == SubKind.WAIT_FOR_CALLBACK == "wait_for_callback"
    assert scope.meta[SUB_KIND_KEY] == "wait_for_callback"
    assert scope.kind is OpKind.CHILD  # the kind it always had: older code reads it as before
    assert [e.name for e in entries if e.sub_kind is not None] == ["pickup"]
    assert len(sent) == 1


def test_a_failed_wait_for_callback_is_marked_too(journal: JournalStore) -> None:
    runner = AgentTestRunner(_courier(AgentRegistry(), []), journal=journal)
    waiting = runner.run("o-2")
    failed = runner.complete_callback(
        waiting.run_id, "pickup", error_type="NoCourier", error_message="none free"
    )
    assert failed.status == "FAILED"
    (scope,) = _scope_results(journal.load(failed.run_id).entries)
    assert scope.type is EntryType.FAILED and scope.sub_kind == "wait_for_callback"
    # What the external system sent is what the record shows (issue 32); the wrapper is beside.
    assert scope.error is not None and scope.error.type == "NoCourier"
    assert (scope.error.data or {})["__durable_wrapper__"]["type"] == CallbackFailedError.__name__


def test_plain_child_scopes_and_the_earlier_form_are_not_marked() -> None:
    registry = AgentRegistry()

    @agent(name="plain", version="1", registry=registry)
    def plain(ctx: DurableContext, order: str) -> Any:
        packed = ctx.run_in_child_context(lambda c: c.step(lambda: 1, name="box"), name="pack")
        # The earlier form records a callback and a step side by side, no scope: unchanged.
        return packed, ctx.wait_for_callback("legacy", lambda cid: None)

    runner = AgentTestRunner(plain)
    waiting = runner.run("o-3")
    done = runner.complete_callback(waiting.run_id, "legacy", result="ok")
    assert done.output == [1, "ok"]
    entries = runner.journal.load(done.run_id).entries
    assert all(e.sub_kind is None for e in entries)
    assert [e.kind for e in entries if e.name == "legacy"] == [OpKind.CALLBACK] * 2


# -- persistence: every backend and the export keep the marker ----------------------------------


def _marked_entry() -> Entry:
    return Entry(
        run_id="run-1",
        position="00000002",
        op_id="run-1:pickup:2",
        kind=OpKind.CHILD,
        name="pickup",
        type=EntryType.SUCCEEDED,
        value='{"ok":true}',
        recorded_at_ms=1,
        meta={SUB_KIND_KEY: SubKind.WAIT_FOR_CALLBACK.value},
    )


def test_the_marker_round_trips_in_every_backend(journal: JournalStore) -> None:
    journal.create_run(RunHeader("run-1", "courier", {}, RunStatus.RUNNING, '"o"', 1, 1))
    journal.commit("run-1", [_marked_entry()])
    (loaded,) = journal.load("run-1").entries
    assert loaded == _marked_entry()
    assert loaded.sub_kind == "wait_for_callback"


def test_the_marker_round_trips_in_the_export_the_sqlite_codec_and_dynamodb_items() -> None:
    entry = _marked_entry()
    assert ENTRIES.decode(ENTRIES.encode(entry)) == entry
    codec = ItemCodec(None)
    assert codec.entry_from_item("run-1", codec.entry_item(entry)) == entry
    journal = InMemoryJournal()
    journal.create_run(RunHeader("run-1", "courier", {}, RunStatus.RUNNING, '"o"', 1, 1))
    journal.commit("run-1", [entry])
    exported = snapshot_to_dict(journal.load("run-1"))
    assert exported["entries"][0]["meta"] == {"sub_kind": "wait_for_callback"}
    assert snapshot_from_dict(json.loads(json.dumps(exported))).entries == [entry]


def test_an_entry_without_meta_or_with_a_foreign_value_has_no_sub_kind() -> None:
    entry = _marked_entry()
    assert Entry(**{**_fields(entry), "meta": {}}).sub_kind is None
    assert Entry(**{**_fields(entry), "meta": {SUB_KIND_KEY: 7}}).sub_kind is None


def _fields(entry: Entry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in Entry.__dataclass_fields__}


# -- old runs: recorded unmarked, they replay; in flight, they go on -----------------------------


def test_both_golden_journals_are_replayed_by_the_golden_suite() -> None:
    files = {c.file for c in CASES if c.stop_at_wait is None}
    assert {UNMARKED, MARKED} <= files
    unmarked = snapshot_from_dict(_golden(UNMARKED)).entries
    marked = snapshot_from_dict(_golden(MARKED)).entries
    # The old one holds a plain child scope; the new one the same layout, marked.
    assert [e.sub_kind for e in _scope_results(unmarked)] == [None]
    assert [e.sub_kind for e in _scope_results(marked)] == ["wait_for_callback"]
    assert [(e.position, e.kind, e.name, e.type) for e in unmarked] == [
        (e.position, e.kind, e.name, e.type) for e in marked
    ]


@pytest.mark.parametrize("file", [UNMARKED, MARKED])
def test_a_recorded_run_replays_with_nothing_executed_and_nothing_written(file: str) -> None:
    case = next(c for c in CASES if c.file == file)
    data = _golden(file)
    runtime, journal, _, _ = install(data, case.resolve_registry())
    run_id = data["header"]["run_id"]
    outcome = runtime.execute(run_id, budget=0)
    assert outcome.kind is OutcomeKind.SUCCEEDED and outcome.executed == []
    assert journal.get_run(run_id).result == data["header"]["result"]
    assert snapshot_to_dict(journal.load(run_id))["entries"] == data["entries"]


def test_an_old_run_in_flight_inside_the_scope_goes_on_and_records_it_marked() -> None:
    """Recorded unmarked up to the callback's result; today's code finishes the scope."""
    case = next(c for c in CASES if c.file == UNMARKED)
    data = _golden(UNMARKED)
    data["entries"] = [e for e in data["entries"] if e["kind"] != "child"]  # scope not done
    runtime, journal, _, _ = install(data, case.resolve_registry())
    run_id = data["header"]["run_id"]
    outcome = runtime.execute(run_id, budget=None)
    assert outcome.kind is OutcomeKind.SUCCEEDED, outcome.detail
    assert journal.get_run(run_id).result == data["header"]["result"]
    (scope,) = _scope_results(journal.load(run_id).entries)
    assert scope.sub_kind == "wait_for_callback"
    assert not set(outcome.executed) & {e["op_id"] for e in data["entries"]}


# -- where it shows: the harness, the history, the CLI, the console, the plugin hooks -----------


def _finished_runner(plugins: list[Any] | None = None) -> tuple[AgentTestRunner, Any]:
    runner = AgentTestRunner(_courier(AgentRegistry(), []), plugins=plugins or [])
    waiting = runner.run("o-4")
    assert [(op.name, op.sub_kind) for op in waiting.operations] == [
        ("pack", None),
        ("pickup", None),  # the callback; the scope has no record until it is done
        ("submit", None),
    ]
    return runner, runner.complete_callback(waiting.run_id, "pickup", result="picked")


def test_the_harness_reports_the_scope_with_its_sub_kind() -> None:
    _, done = _finished_runner()
    scope = next(op for op in done.operations if op.kind == "child")
    assert (scope.name, scope.sub_kind, scope.status, scope.result) == (
        "pickup",
        "wait_for_callback",
        "succeeded",
        "picked",
    )
    assert [op.sub_kind for op in done.operations if op.kind != "child"] == [None] * 3


def test_the_history_the_cli_timeline_and_the_console_show_it() -> None:
    runner, done = _finished_runner()
    snapshot = runner.journal.load(done.run_id)
    events = history(snapshot)
    marked = [e for e in events if e.get("sub_kind")]
    assert [(e["event"], e["kind"], e["sub_kind"]) for e in marked] == [
        ("child_succeeded", "child", "wait_for_callback")
    ]
    assert "sub_kind" not in entry_event(snapshot.entries[0])
    ops = operations(events)
    scope = next(op for op in ops if op["kind"] == "child")
    assert scope["sub_kind"] == "wait_for_callback"
    assert "child/wait_for_callback" in timeline_table(done.run_id, ops, width=200)
    records = group_entries(snapshot.entries, snapshot.effects)
    position = next(p for p, r in records.items() if r.kind is OpKind.CHILD)
    row = _operation_row(records[position], position, done.run_id, {}, "/console")
    assert '<small class="sub-kind">wait_for_callback</small>' in row
    pack = next(p for p, r in records.items() if r.name == "pack")
    assert "sub-kind" not in _operation_row(records[pack], pack, done.run_id, {}, "/console")


def test_plugin_hooks_report_the_scope_as_a_wait_for_callback() -> None:
    recorder = Recorder()
    _finished_runner([recorder])
    starts = [
        (s.kind, s.sub_kind, s.name) for s in recorder.of("on_operation_start") if not s.replayed
    ]
    assert ("child", "wait_for_callback", "pickup") in starts
    assert ("callback", None, "pickup") in starts  # the callback inside is not marked
    ends = [
        (e.kind, e.sub_kind, e.outcome)
        for e in recorder.of("on_operation_end")
        if e.name == "pickup"
    ]
    assert ("child", "wait_for_callback", "succeeded") in ends
    assert ("callback", None, "succeeded") in ends


def test_plugin_hooks_report_an_old_unmarked_scope_as_a_wait_for_callback_too() -> None:
    """The hooks' sub-kind is what the code called, so a run recorded before the marker is
    reported the same way when it is replayed."""
    case = next(c for c in CASES if c.file == UNMARKED)
    data = _golden(UNMARKED)
    plain, _, _, _ = install(data, case.resolve_registry())
    recorder = Recorder()
    runtime = Runtime(plain.store, registry=plain.registry, clock=plain.clock, plugins=[recorder])
    outcome = runtime.execute(data["header"]["run_id"], budget=0)
    assert outcome.kind is OutcomeKind.SUCCEEDED
    ends = [(e.kind, e.sub_kind, e.name, e.replayed) for e in recorder.of("on_operation_end")]
    assert ("child", "wait_for_callback", "pickup", True) in ends
