"""``ReplayFlags``: replay's one-attribute answer follows every fact it is derived from."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from durable_agents import InMemoryJournal, SkipClock
from durable_agents.invocation import Invocation
from durable_agents.models import RunHeader, RunSnapshot, RunStatus
from durable_agents.replay_flags import ReplayFlags

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


def _invocation() -> Invocation:
    header = RunHeader(
        run_id="r-1",
        agent="a",
        versions={},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=0,
        updated_at_ms=0,
        input_hash="",
    )
    return Invocation(
        InMemoryJournal(), RunSnapshot(header, [], []), clock=SkipClock(), budget=1, lease_ms=1
    )


def test_a_new_invocation_without_records_is_live_so_it_does_not_replay() -> None:
    inv = _invocation()
    assert inv.live and not inv.replaying and not inv.replaying_quietly


def test_a_parked_invocation_taken_over_is_live_and_out_of_any_step() -> None:
    parked, fresh = _invocation(), _invocation()
    parked.in_step = True
    fresh.live = False  # as a fresh invocation of a run with records would be
    assert fresh.replaying
    parked.take_over(fresh)
    assert parked.live and not parked.in_step and not parked.replaying
