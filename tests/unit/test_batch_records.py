"""What a batch record refers to: replays read the branch records, and nothing else changes them.

The format itself, and that the format recorded before it still replays, are pinned by the
golden journals (tests/replay/test_golden_batches.py) and the contract suite
(tests/contract/test_batch_values_once_contract.py).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from durable_agents import (
    NO_RETRY,
    AgentRegistry,
    CompletionPolicy,
    DurableContext,
    RunStatus,
    SkipClock,
    agent,
)
from durable_agents.core.models import EntryType, OpKind, RunSnapshot
from durable_agents.core.observability import ReplayAwareLogger
from durable_agents.engine.invocation import Invocation
from durable_agents.engine.operations.parallel import BatchResult
from durable_agents.errors import PayloadError
from durable_agents.journal.memory import InMemoryJournal
from durable_agents_local.testing import AgentTestRunner

registry = AgentRegistry()


def shelve(ctx: DurableContext, item: str, index: int) -> dict[str, Any]:
    def count() -> int:
        if item == "jam":
            raise LookupError(f"no {item} left")
        return index

    return {"item": item, "left": ctx.step(count, name="count", retry=NO_RETRY)}


@agent(name="shelves", version="1", registry=registry)
def shelves(ctx: DurableContext, items: list[str]) -> int:
    batch = ctx.map(
        items, shelve, name="shelves", completion=CompletionPolicy(tolerated_failure_count=1)
    )
    return batch.success_count


ITEMS = ["tea", "jam", "bread"]


def recorded_run() -> tuple[InMemoryJournal, RunSnapshot]:
    journal = InMemoryJournal()
    result = AgentTestRunner(shelves, journal=journal, mode="faithful").run(ITEMS)
    assert journal.get_run(result.run_id).status is RunStatus.SUCCEEDED
    return journal, journal.load(result.run_id)


def replay_batch(journal: InMemoryJournal, snapshot: RunSnapshot) -> BatchResult[Any]:
    """The recorded batch as a replay of the agent's code over ``snapshot`` returns it."""
    inv = Invocation(journal, snapshot, clock=SkipClock(), budget=0, lease_ms=60_000)
    run_id = snapshot.header.run_id
    ctx = DurableContext(
        inv,
        id_prefix=f"{run_id}:",
        pos_prefix="",
        logger=ReplayAwareLogger(inv, logging.getLogger("test"), run_id),
    )
    return ctx.map(
        ITEMS, shelve, name="shelves", completion=CompletionPolicy(tolerated_failure_count=1)
    )


def test_a_replay_reads_each_value_and_error_from_its_branch_record() -> None:
    journal, snapshot = recorded_run()
    batch = replay_batch(journal, snapshot)
    assert [i.status for i in batch.items] == ["succeeded", "failed", "succeeded"]
    assert batch.results() == [{"item": "tea", "left": 0}, {"item": "bread", "left": 2}]
    error = batch.all_errors()[1]
    assert error is not None and error["message"] == "no jam left"


def test_an_error_given_to_agent_code_is_its_own_copy() -> None:
    """Records are shared by the replays of a warm container: a change agent code makes to
    an error it was given must not reach the next replay."""
    journal, snapshot = recorded_run()
    first = replay_batch(journal, snapshot)
    error = first.all_errors()[1]
    assert error is not None
    error["message"] = "changed by the agent"
    again = replay_batch(journal, snapshot)
    assert again.all_errors()[1] == {**error, "message": "no jam left"}


def test_a_batch_record_whose_branch_result_is_missing_is_refused() -> None:
    journal, snapshot = recorded_run()
    (branch,) = [
        e
        for e in snapshot.entries
        if e.kind is OpKind.CHILD and e.name == "branch-2" and e.type is EntryType.SUCCEEDED
    ]
    entries = [e for e in snapshot.entries if e is not branch]
    tampered = dataclasses.replace(snapshot, entries=entries)
    with pytest.raises(PayloadError, match="branch 2 as 's'"):
        replay_batch(journal, tampered)
