"""Errors keep their story: a failure is recorded with its traceback (issue 33).

On both journals: a step that raises records where (the agent's function and line); a replay
raises the same error carrying the identical text; a revealed secret never appears in it; a
very deep (mutual) recursion's traceback is bounded, keeping the innermost frames and the
exception line; and a run that fails keeps the traceback of its own error.
"""

from __future__ import annotations

import json
from typing import Any

from durable_agents import (
    NO_RETRY,
    AgentRegistry,
    CompletionPolicy,
    DurableContext,
    Secret,
    agent,
)
from durable_agents.core.models import EntryType, ErrorInfo
from durable_agents.core.tracebacks import MAX_CHARS
from durable_agents.journal.item_size import ITEM_LIMIT_BYTES
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash

KEY = "sk-live-7c1e-traceback-secret"


def fragile_body() -> None:
    raise ValueError("the parser gave up")


FRAGILE_LINE = fragile_body.__code__.co_firstlineno + 1


def failed_error(journal: JournalStore, run_id: str, name: str) -> ErrorInfo:
    entries = [
        e for e in journal.load(run_id).entries if e.name == name and e.type is EntryType.FAILED
    ]
    assert len(entries) == 1 and entries[0].error is not None
    return entries[0].error


def test_a_failed_step_records_its_traceback_and_a_replay_raises_it_identically(
    journal: JournalStore,
) -> None:
    seen: list[str | None] = []

    @agent(name="fragile", version="1", registry=AgentRegistry())
    def fragile(ctx: DurableContext, _: Any) -> str:
        try:
            ctx.step(fragile_body, name="parse", retry=NO_RETRY)
        except ValueError as exc:
            seen.append(getattr(exc, "recorded_traceback", None))
        ctx.step(lambda: "ok", name="after")
        return "done"

    # The first invocation sees the error as it recorded it, then crashes after the next step:
    # the second replays the failure from the journal.
    result = AgentTestRunner(fragile, journal=journal, mode="faithful").run(
        None, crash=Crash("after", "after_record")
    )
    assert result.status == "SUCCEEDED" and result.crashes == 1
    recorded = failed_error(journal, result.run_id, "parse").traceback
    assert recorded is not None
    assert f'test_error_tracebacks_contract.py", line {FRAGILE_LINE}, in fragile_body' in recorded
    assert recorded.rstrip().endswith("ValueError: the parser gave up")
    # The first run and every replay (faithful mode replays after each step too): the same text.
    assert len(seen) >= 2 and set(seen) == {recorded}


def test_a_revealed_secret_never_appears_in_a_recorded_traceback(journal: JournalStore) -> None:
    def login() -> None:
        key = Secret(KEY).reveal()
        raise PermissionError(f"login refused for key {key}")

    @agent(name="leaky", version="1", registry=AgentRegistry())
    def leaky(ctx: DurableContext, _: Any) -> None:
        ctx.step(login, name="login", retry=NO_RETRY)

    result = AgentTestRunner(leaky, journal=journal).run(None)
    assert result.status == "FAILED"
    step = failed_error(journal, result.run_id, "login")
    run = journal.get_run(result.run_id).error
    assert run is not None and run.traceback is not None and step.traceback is not None
    assert "PermissionError: login refused for key ***" in step.traceback
    assert KEY not in step.traceback and KEY not in run.traceback
    assert KEY not in repr(journal.load(result.run_id))


def test_a_traceback_holds_positions_not_source_lines(journal: JournalStore) -> None:
    # A literal in the agent's code (never revealed, so never scrubbed) stays out of the record.
    @agent(name="literal", version="1", registry=AgentRegistry())
    def literal(ctx: DurableContext, _: Any) -> None:
        ctx.step(lambda: {"token": Secret("hard-coded-token")}, name="leak", retry=NO_RETRY)

    result = AgentTestRunner(literal, journal=journal).run(None)
    assert result.status == "FAILED"
    assert result.error is not None and result.error.type == "SecretSerializationError"
    assert "hard-coded-token" not in repr(journal.load(result.run_id))


def ping(n: int) -> None:
    if n == 0:
        raise RecursionError("too deep to go on")
    pong(n - 1)


PING_RAISES = ping.__code__.co_firstlineno + 2


def pong(n: int) -> None:
    ping(n)


def test_a_very_deep_recursion_records_a_bounded_traceback(journal: JournalStore) -> None:
    @agent(name="deep", version="1", registry=AgentRegistry())
    def deep(ctx: DurableContext, _: Any) -> str:
        try:
            ctx.step(lambda: ping(400), name="descend", retry=NO_RETRY)
        except RecursionError as exc:
            return str(getattr(exc, "recorded_traceback", ""))
        return "not reached"

    result = AgentTestRunner(deep, journal=journal).run(None)
    assert result.status == "SUCCEEDED"
    text = failed_error(journal, result.run_id, "descend").traceback
    assert text is not None and len(text) <= MAX_CHARS
    assert "outer frame line(s) left out" in text  # the outermost were dropped
    assert f"line {PING_RAISES}, in ping" in text  # the innermost kept
    assert text.rstrip().endswith("RecursionError: too deep to go on")
    assert result.output == text


def test_a_failed_run_records_its_own_traceback_with_the_step_it_failed_in(
    journal: JournalStore,
) -> None:
    @agent(name="gives-up", version="1", registry=AgentRegistry())
    def gives_up(ctx: DurableContext, _: Any) -> None:
        ctx.step(fragile_body, name="parse", retry=NO_RETRY)

    result = AgentTestRunner(gives_up, journal=journal).run(None)
    assert result.status == "FAILED"
    error = journal.get_run(result.run_id).error
    assert error is not None and error.traceback is not None
    # The step's story (where it raised), then where the agent called it; runtime frames folded.
    assert f"line {FRAGILE_LINE}, in fragile_body" in error.traceback
    assert "in gives_up" in error.traceback
    assert "[durable-agents runtime frames]" in error.traceback
    assert "durable_agents/engine" not in error.traceback


def test_a_batch_of_deep_failures_stays_within_the_item_limit(journal: JournalStore) -> None:
    # The largest error record there is: a batch's own error keeps ten branch errors, each
    # with a traceback at its bound; the batch's value holds every flat branch's error too.
    @agent(name="many-deep", version="1", registry=AgentRegistry())
    def many_deep(ctx: DurableContext, _: Any) -> None:
        ctx.map(
            list(range(12)),
            lambda c, n, index: c.step(lambda: ping(300 + n), name="descend", retry=NO_RETRY),
            name="fan",
            nesting="flat",
            completion=CompletionPolicy(tolerated_failure_count=11),  # every branch runs
        )

    result = AgentTestRunner(many_deep, journal=journal).run(None)
    assert result.status == "FAILED"
    batch = failed_error(journal, result.run_id, "fan")
    branches = batch.data["errors"] if batch.data else []
    assert len(branches) == 10
    assert all(0 < len(b["traceback"]) <= MAX_CHARS for b in branches)
    assert len(json.dumps(batch.to_dict()).encode()) < ITEM_LIMIT_BYTES // 4
