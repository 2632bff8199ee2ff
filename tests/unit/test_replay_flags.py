"""``ReplayFlags``: replay's one-attribute answer follows every fact it is derived from."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from durable_agents import SkipClock
from durable_agents.core.models import RunHeader, RunSnapshot, RunStatus
from durable_agents.engine.invocation import Invocation, InvocationHooks
from durable_agents.engine.replay_flags import ReplayFlags
from durable_agents.journal.memory import InMemoryJournal

FACTS: dict[str, tuple[Any, Any]] = {  # each fact: its value that allows replay, one that stops it
    "live": (False, True),
    "in_step": (False, True),
    "fault": (None, RuntimeError("diverged")),
    "stop": (None, object()),
}


@pytest.mark.parametrize("quiet", [True, False])
@pytest.mark.parametrize("stopped", list(itertools.product([False, True], repeat=len(FACTS))))
def test_replaying_is_true_exactly_when_no_fact_stops_it(
    quiet: bool, stopped: tuple[bool, ...]
) -> None:
    flags = ReplayFlags(quiet=quiet)
    assert flags.replaying and flags.replaying_quietly is quiet
    for (fact, (allows, stops)), stop_it in zip(FACTS.items(), stopped, strict=True):
        setattr(flags, fact, stops if stop_it else allows)
        assert getattr(flags, fact) is (stops if stop_it else allows)
    assert flags.replaying is not any(stopped)
    assert flags.replaying_quietly is (not any(stopped) and quiet)
    for fact, (allows, _) in FACTS.items():  # and back: every fact cleared again
        setattr(flags, fact, allows)
    assert flags.replaying and flags.replaying_quietly is quiet


def _header(revision: int = 0) -> RunHeader:
    return RunHeader(
        run_id="r-1",
        agent="a",
        versions={},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=0,
        updated_at_ms=0,
        input_hash="",
        revision=revision,
    )


def _invocation() -> Invocation:
    return Invocation(
        InMemoryJournal(), RunSnapshot(_header(), [], []), clock=SkipClock(), budget=1, lease_ms=1
    )


def test_a_new_invocation_without_records_is_live_so_it_does_not_replay() -> None:
    inv = _invocation()
    assert inv.live and not inv.replaying and not inv.replaying_quietly


def test_a_renewed_invocation_holds_what_a_new_one_would_but_its_records() -> None:
    """``renew`` (a parked agent going on) against ``Invocation(...)``: every attribute.

    A new attribute of ``Invocation`` that ``renew`` does not set fails this test.
    """
    clock, store, hooks = SkipClock(), InMemoryJournal(), InvocationHooks()
    services: dict[str, Any] = {
        "clock": clock,
        "credentials": object(),
        "providers": {"p": object()},
        "stream_sink": object(),
        "registry": object(),
        "wait_scheduler": object(),
        "memory": object(),
    }
    new = Invocation(
        store,
        RunSnapshot(_header(revision=3), [], []),
        budget=2,
        lease_ms=500,
        hooks=hooks,
        deadline_ms=9_000,
        **services,
    )
    parked = _invocation()
    parked.in_step, parked.branches, parked.executed = True, ["00000001"], ["op"]
    parked.budget, parked.park, parked.budget_ends_at_ms = 0, print, 5
    parked.pending_events, parked.notifications = [object()], [(object(), object())]  # type: ignore[list-item]
    parked.target, parked.lease_ms = "00000002", 1
    parked.records = {"00000001": object()}  # type: ignore[dict-item]
    kept = parked.records
    parked.renew(
        store,
        _header(revision=3),
        budget=2,
        lease_ms=500,
        hooks=hooks,
        observer=None,
        deadline_ms=9_000,
        services=services,
    )
    assert parked.records is kept  # the agent's own, as it left them
    renewed, fresh = vars(parked), vars(new)
    assert set(renewed) == set(fresh)
    differing = {key for key in fresh if key != "records" and renewed[key] != fresh[key]}
    assert differing == set()
    assert parked.live and not parked.in_step and not parked.replaying
