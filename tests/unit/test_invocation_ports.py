"""The journal store port of an invocation (``engine.ports.InvocationStore``) and its wrappers.

Each wrapper of a store names every method of the port (no ``__getattr__`` forwarding): the
plugins' observed store, the sticky tally, the store an abandoned parked agent sees, and a
migration's dry run. A method added to the port, or dropped from a wrapper, fails here (and in
mypy, which checks the wrappers against the port they subclass).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from durable_agents.admin.migration_commit import _DryRunStore
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import (
    EffectChange,
    Entry,
    EntryType,
    OpKind,
    RunHeader,
    RunSnapshot,
    RunStatus,
    WaitChange,
)
from durable_agents.engine.invocation import Invocation, Reason
from durable_agents.engine.plugin_calls import InvocationObserver, PluginSet, _ObservedStore
from durable_agents.engine.ports import InvocationStore
from durable_agents.engine.sticky.parking import REFUSING_STORE, ParkedRunAbandonedError, WriteTally
from durable_agents.engine.wait_records import pending_wait
from durable_agents.errors import SuspendExecution, WaitNotFoundError
from durable_agents.journal.memory import InMemoryJournal

RUN = "r-ports"
PORT = sorted(
    name for name, value in vars(InvocationStore).items() if callable(value) and name[0] != "_"
)


def _header(run_id: str = RUN) -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent="a",
        versions={},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=0,
        updated_at_ms=0,
        input_hash="",
    )


def _entry(op_id: str = "op-1") -> Entry:
    return Entry(
        run_id=RUN,
        position="00000001",
        op_id=op_id,
        kind=OpKind.STEP,
        name="s",
        type=EntryType.SUCCEEDED,
        recorded_at_ms=1,
        value="1",
    )


def _journal() -> InMemoryJournal:
    journal = InMemoryJournal()
    journal.create_run(_header())
    wait = pending_wait(
        RUN, "callback", "cb-1", "00000002", "op-2", "cb", created_at_ms=1, timeout_ms=None,
        details={},
    )  # fmt: skip
    journal.commit(RUN, [], None, wait=WaitChange(wait))
    return journal


# Arguments of a call of each method of the port (a method added to the port needs a line).
CALLS: dict[str, tuple[Any, ...]] = {
    "commit": (RUN, [_entry()]),
    "create_run": (_header("r-child"),),
    "flow_items": (),  # concurrency slots, rate limits and budgets (engine.flow, ADR 0030)
    "get_run": (RUN,),
    "get_wait": ("cb-1",),
    "load": (RUN,),  # a rerun reads its chain's ledger (engine.reruns)
}


class _Heard:
    """An observer that notes what ``_ObservedStore`` reports."""

    def __init__(self) -> None:
        self.heard: list[tuple[list[Entry], EffectChange | None]] = []

    def recorded(self, entries: Sequence[Entry], effect: EffectChange | None) -> None:
        self.heard.append((list(entries), effect))


def _observed(store: InvocationStore) -> InvocationStore:
    return InvocationObserver(PluginSet(), RUN, SkipClock()).watch(store)


def _tally(store: InvocationStore) -> WriteTally:
    return WriteTally(store, RunSnapshot(store.get_run(RUN), [], []))


WRAPPERS: dict[str, Callable[[InvocationStore], InvocationStore]] = {
    "observed": _observed,
    "tally": _tally,
    "refusing": lambda store: REFUSING_STORE,
    "dry run": _DryRunStore,
}


def test_the_port_is_what_the_calls_cover() -> None:
    expected = ["commit", "create_run", "flow_items", "get_run", "get_wait", "load"]
    assert sorted(CALLS) == PORT == expected


def test_a_journal_store_is_the_port() -> None:
    assert isinstance(InMemoryJournal(), InvocationStore)


@pytest.mark.parametrize("kind", sorted(WRAPPERS))
def test_every_wrapper_implements_every_method_of_the_port_itself(kind: str) -> None:
    wrapper = WRAPPERS[kind](_journal())
    assert isinstance(wrapper, InvocationStore)
    for name in PORT:
        # Its own method (not the port's empty body it inherits, not forwarded by lookup).
        owner = next(c for c in type(wrapper).__mro__ if name in vars(c))
        assert owner is type(wrapper), (kind, name, owner)
    assert all("__getattr__" not in vars(c) for c in type(wrapper).__mro__), kind


@pytest.mark.parametrize("kind", sorted(WRAPPERS))
def test_no_wrapper_forwards_what_is_not_in_the_port(kind: str) -> None:
    wrapper = WRAPPERS[kind](_journal())
    with pytest.raises(AttributeError):
        wrapper.list_runs  # type: ignore[attr-defined]  # noqa: B018


@pytest.mark.parametrize("name", PORT)
def test_an_abandoned_agents_store_refuses_every_method(name: str) -> None:
    with pytest.raises(ParkedRunAbandonedError, match=f"store.{name} refused"):
        getattr(REFUSING_STORE, name)(*CALLS[name])


def test_an_invocation_made_to_see_the_refusing_store_writes_nothing() -> None:
    journal = _journal()
    snapshot = RunSnapshot(journal.get_run(RUN), [], [])
    inv = Invocation(journal, snapshot, clock=SkipClock(), budget=None, lease_ms=1)
    inv.store = REFUSING_STORE
    with pytest.raises(ParkedRunAbandonedError):
        inv.commit([_entry()])
    assert journal.load(RUN).entries == []


@pytest.mark.parametrize("name", ["commit", "create_run"])
def test_a_dry_run_stops_at_its_first_write(name: str) -> None:
    journal = _journal()
    with pytest.raises(SuspendExecution) as stop:
        getattr(_DryRunStore(journal), name)(*CALLS[name])
    assert stop.value.reason == Reason.CONTINUE
    assert "would write" in (stop.value.detail or "")
    assert journal.load(RUN).entries == []
    assert [h.run_id for h in journal.list_runs(include_children=True).runs] == [RUN]


def test_a_dry_run_reads_the_journal() -> None:
    dry = _DryRunStore(_journal())
    assert dry.get_run(RUN).run_id == RUN
    assert dry.load(RUN).header.run_id == RUN
    assert dry.get_wait("cb-1").wait_id == "cb-1"
    with pytest.raises(WaitNotFoundError):
        dry.get_wait("cb-none")


def test_the_observed_store_passes_every_call_on_and_reports_what_landed() -> None:
    journal, heard = _journal(), _Heard()
    observed = _ObservedStore(journal, heard)  # type: ignore[arg-type]  # hears writes only
    assert observed.get_run(RUN).run_id == RUN
    assert observed.load(RUN).header.run_id == RUN
    assert observed.get_wait("cb-1").wait_id == "cb-1"
    assert observed.create_run(_header("r-child"))[1] is True
    entry = _entry()
    observed.commit(RUN, [entry])
    assert heard.heard == [([entry], None)]
    assert [e.op_id for e in journal.load(RUN).entries] == ["op-1"]
    with pytest.raises(Exception):  # refused by the journal: nothing is reported
        observed.commit(RUN, [entry])
    assert len(heard.heard) == 1


def test_the_tally_passes_every_call_on_and_counts_its_runs_writes_only() -> None:
    journal = _journal()
    tally = _tally(journal)
    assert tally.get_run(RUN).run_id == RUN
    assert tally.load(RUN).header.run_id == RUN
    assert tally.get_wait("cb-1").wait_id == "cb-1"
    assert tally.create_run(_header("r-child"))[1] is True
    tally.commit(RUN, [_entry()])
    assert tally.entries == 1
    assert tally.matches(journal.load(RUN))
