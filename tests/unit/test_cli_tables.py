"""The CLI's tables fit 80 columns; ``runs timeline`` reads operations out of a history."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

import pytest

from durable_agents_local.cli.remote import since
from durable_agents_local.cli.tables import (
    approvals_table,
    clip,
    duration,
    fit_table,
    history_table,
    operations,
    reviews_table,
    run_details,
    runs_table,
    timeline_table,
)
from durable_agents_local.console import history_table as console_history_table

RUN = "run-0123456789abcdef"
LONG = "x" * 300


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _fits(text: str, width: int = 80) -> None:
    assert all(len(line) <= width for line in _lines(text)), text


def test_clip_ellipsizes_and_flattens() -> None:
    assert clip("short", 10) == "short"
    assert clip("a\nb", 10) == "a\\nb"  # shown escaped, as every control character is
    assert clip("abcdefghij", 5) == "abcd…"


def test_a_wide_table_shrinks_its_widest_columns_first() -> None:
    table = fit_table(["A", "WIDE", "NARROW"], [["1", LONG, "abc"]], width=40)
    header, row = _lines(table)
    _fits(table, 40)
    assert row.startswith("1  x") and row.endswith("…  abc")
    assert header.split() == ["A", "WIDE", "NARROW"]
    assert fit_table(["A", "B"], [["1", "2"]]) == "A  B\n1  2"


def _run(agent: str, status: str) -> dict[str, Any]:
    return {
        "run_id": RUN,
        "agent": agent,
        "status": status,
        "versions": {"workflow_version": "12"},
        "created_at": "2026-12-01T20:33:30.123+00:00",
        "updated_at": "2026-12-01T20:34:01.456+00:00",
    }


def test_runs_fit_80_columns_with_long_agents_and_statuses() -> None:
    table = runs_table([_run("a-very-long-agent-name-for-research", "VERSION_UNAVAILABLE"),
                        _run("short", "SUCCEEDED")])  # fmt: skip
    _fits(table)
    header, first, second = _lines(table)
    assert header.split() == ["RUN", "ID", "AGENT", "VERSION", "STATUS", "CREATED", "UPDATED"]
    assert first.startswith(RUN) and "…" in first and first.endswith("12-01 20:33  12-01 20:34")
    assert second.split()[1:4] == ["short", "12", "SUCCEEDED"]
    assert runs_table([]) == "no runs"


def test_details_history_approvals_reviews_fit_80_columns() -> None:
    run = {**_run("agent", "FAILED"), "input": {"text": LONG},
           "error": {"type": "ValueError", "message": LONG}}  # fmt: skip
    _fits(run_details(run))
    assert "error:" in run_details(run)
    events = [
        {"event": "run_started", "run_id": RUN, "at": "2026-12-01T20:33:30.000+00:00"},
        {"event": "step_succeeded", "op_id": f"{RUN}:{'fetch' * 10}:1", "kind": "step",
         "name": "fetch", "attempt": 1, "result": {"text": LONG},
         "at": "2026-12-01T20:33:31.500+00:00"},
    ]  # fmt: skip
    history = history_table(events)
    # The operation id is never cut (issue 33): one this long makes the table wider than 80.
    assert f"{'fetch' * 10}:1  1" in _lines(history)[2]
    history = history_table([events[0], {**events[1], "op_id": f"{RUN}:fetch:1"}])
    _fits(history)
    assert _lines(history)[2].startswith("+1.50s  step_succeeded")
    approval = {"approval_id": "apr-" + "9" * 30, "status": "pending", "run_id": RUN,
                "name": "approve-refund", "deadline": "2026-12-02T20:33:30.000+00:00",
                "summary": LONG}  # fmt: skip
    # Its id and its run's are never cut (issue 33): with these two the row is wider than 80,
    # and the columns that shrink are the others.
    row = approvals_table([approval]).splitlines()[1]
    assert row.startswith(approval["approval_id"]) and f"  {RUN}  " in row
    assert "…" in row and LONG not in row
    _fits(approvals_table([{**approval, "approval_id": "apr-9"}]))
    review = {
        "operation_id": f"{RUN}:gather:2/charge-card:1",
        "tool": "charge-card",
        "attempt": 2,
        "updated_at": "2026-12-01T20:33:30.000+00:00",
        "note": LONG,
    }
    reviews = reviews_table([review])
    _fits(reviews)
    row = reviews.splitlines()[1]
    assert row.startswith(f"{RUN}:gather:2/charge-card:1  charge") and "12-01 20:33" in row
    narrow = reviews_table([review], 70)  # the operation id whole, the rest at its narrowest
    assert narrow.splitlines()[1].startswith(f"{RUN}:gather:2/charge-card:1  ")
    _fits(narrow, 73)  # 43 + TOOL, ATT, WHY at 4, 3, 4 + SINCE (kept) + the gaps


STORY = (
    'Traceback (most recent call last):\n  File "agent.py", line 7, in fetch\n'
    "    raise ValueError(text)\nValueError: \x1b]0;pwned\x07 bad\n"
)


def test_runs_show_and_history_print_a_failure_s_traceback_escaped() -> None:
    error = {"type": "ValueError", "message": "bad", "module": "builtins", "traceback": STORY}
    details = run_details({**_run("agent", "FAILED"), "error": error})
    lines = _lines(details)
    # The error line stays one line (type, message), the story under it, line by line.
    assert any(line.startswith("error:") and "traceback" not in line for line in lines)
    at = lines.index("traceback:")
    assert lines[at + 1 :] == [
        "  Traceback (most recent call last):",
        '    File "agent.py", line 7, in fetch',
        "      raise ValueError(text)",
        "  ValueError: \\x1b]0;pwned\\x07 bad",
    ]
    assert "\x1b" not in details and "\x07" not in details
    events = [
        {"event": "run_started", "run_id": RUN, "at": "2026-12-01T20:33:30.000+00:00"},
        {"event": "step_attempt_failed", "op_id": f"{RUN}:fetch:1", "kind": "step",
         "name": "fetch", "attempt": 1, "error": error, "at": "2026-12-01T20:33:31.000+00:00"},
        {"event": "run_failed", "error": {**error, "traceback": "Traceback: the run\n"},
         "at": "2026-12-01T20:33:32.000+00:00"},
    ]  # fmt: skip
    history = history_table(events)
    table, step, run = history.split("\n\n")
    _fits(table)
    assert "ValueError: bad" in table and "Traceback" not in table
    assert step.splitlines()[0] == "traceback of fetch:1 (step_attempt_failed, attempt 1):"
    assert step.splitlines()[-1] == "  ValueError: \\x1b]0;pwned\\x07 bad"
    assert run.splitlines() == ["traceback of the run (run_failed):", "  Traceback: the run"]
    # Without a recorded traceback (an older journal), nothing is added.
    assert "traceback" not in history_table([events[0], {**events[1], "error": {"type": "E"}}])


def _event(event: str, op: str, at: str, **extra: Any) -> dict[str, Any]:
    kind = event.split("_", 1)[0]
    return {"event": event, "op_id": f"{RUN}:{op}", "kind": kind, "name": op.split(":")[0],
            "at": f"2026-12-01T20:{at}+00:00", **extra}  # fmt: skip


def test_the_timeline_has_each_operations_attempts_duration_status_and_deadline() -> None:
    events = [
        {"event": "run_started", "run_id": RUN, "at": "2026-12-01T20:00:00.000+00:00"},
        _event("step_started", "fetch:1", "00:00.000", attempt=1,
               lease_expires_at="2026-12-01T20:05:00.000+00:00"),
        _event("step_attempt_failed", "fetch:1", "00:01.000", attempt=1,
               due_at="2026-12-01T20:00:03.000+00:00"),
        _event("step_started", "fetch:1", "00:03.000", attempt=2),
        _event("step_succeeded", "fetch:1", "00:04.250", attempt=2, result=1),
        _event("timer_scheduled", "sleep:1", "00:05.000", due_at="2026-12-01T21:00:00.000+00:00"),
        _event("tool_started", "charge-card:1", "00:06.000", attempt=1,
               lease_expires_at="2026-12-01T20:10:00.000+00:00"),
        {"event": "side_effect_committed", "operation_id": f"{RUN}:charge-card:1"},
        {"event": "run_succeeded", "at": "2026-12-01T20:00:07.000+00:00"},
    ]  # fmt: skip
    ops = operations(events)
    assert [(o["name"], o["kind"], o["attempts"], o["status"]) for o in ops] == [
        ("fetch", "step", 2, "SUCCEEDED"),
        ("sleep", "timer", 0, "WAITING"),
        ("charge-card", "tool", 1, "RUNNING"),
    ]
    assert ops[0]["duration_seconds"] == 4.25 and ops[0]["deadline"] is None
    assert ops[1]["deadline"] == "2026-12-01T21:00:00.000+00:00"
    assert ops[2]["deadline"] == "2026-12-01T20:10:00.000+00:00"
    table = timeline_table(RUN, ops)
    _fits(table)
    header, fetch, sleep, _ = _lines(table)
    assert header.split() == ["OPERATION", "KIND", "NAME", "ATT", "TOOK", "STATUS", "DEADLINE"]
    assert fetch.split() == ["fetch:1", "step", "fetch", "2", "4.25s", "SUCCEEDED"]
    assert sleep.split()[-3:] == ["WAITING", "12-01", "21:00:00"]
    assert timeline_table(RUN, []) == "no operations"


def test_durations_read_at_a_glance() -> None:
    assert [duration(s) for s in (0.421, 12.34, 245, 7980)] == ["0.42s", "12.3s", "4m05s", "2h13m"]
    assert duration(None) == ""


def test_since_takes_iso_times_and_spans_back_from_now() -> None:
    now = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)
    assert since("2h", now) == "2026-12-01T18:00:00.000+00:00"
    assert since("3d", now) == "2026-11-28T20:00:00.000+00:00"
    assert since("90s", now) == "2026-12-01T19:58:30.000+00:00"
    assert since("2026-11-30") == "2026-11-30T00:00:00.000+00:00"
    assert since("2026-11-30T10:00:00Z") == "2026-11-30T10:00:00.000+00:00"
    assert since("2026-11-30T12:00:00+02:00") == "2026-11-30T10:00:00.000+00:00"
    with pytest.raises(argparse.ArgumentTypeError, match="ISO date/time or a span"):
        since("yesterday")


def test_the_timeline_prints_the_traceback_of_each_operation_that_failed_for_good() -> None:
    error = {"type": "ValueError", "message": "bad", "module": "builtins", "traceback": STORY}
    events = [
        {"event": "run_started", "run_id": RUN, "at": "2026-12-01T20:33:30.000+00:00"},
        _event("step_started", "fetch:1", "33:30.100", attempt=1),
        _event("step_attempt_failed", "fetch:1", "33:30.200", attempt=1,
               error={**error, "traceback": "Traceback: the first attempt\n"}),
        _event("step_started", "fetch:1", "33:31.000", attempt=2),
        _event("step_failed", "fetch:1", "33:31.100", attempt=2, error=error),
        _event("step_started", "other:2", "33:31.200", attempt=1),
        _event("step_attempt_failed", "other:2", "33:31.300", attempt=1, error=error),
        _event("step_succeeded", "other:2", "33:32.000", attempt=2),
    ]  # fmt: skip
    text = timeline_table(RUN, operations(events))
    table, story = text.split("\n\n")  # one story: other:2 recovered, so none for it
    _fits(table)
    assert "Traceback" not in table
    assert story.splitlines()[0] == "traceback of fetch:1 (step_failed):"
    assert story.splitlines()[-1] == "  ValueError: \\x1b]0;pwned\\x07 bad"  # the last, escaped
    assert "first attempt" not in text
    # Without a recorded traceback (an older journal), nothing is added.
    older = [{**e, "error": {"type": "E"}} if e.get("error") else e for e in events]
    assert "\n\n" not in timeline_table(RUN, operations(older))


def test_the_local_history_table_prints_recorded_tracebacks_too() -> None:
    error = {"type": "ValueError", "message": "bad", "traceback": STORY}
    events = [
        {"event": "run_started", "run_id": RUN, "at": "2026-12-01T20:33:30.000+00:00"},
        _event("step_failed", "fetch:1", "33:31.000", attempt=1, error=error),
    ]
    table, story = console_history_table(events).split("\n\n")
    assert "ValueError: bad" in table and "Traceback" not in table
    assert story.splitlines()[0] == "traceback of fetch:1 (step_failed, attempt 1):"
    assert "\x1b" not in story


def test_reviews_say_why_in_words_and_print_the_unclear_outcomes_traceback() -> None:
    review = {
        "operation_id": f"{RUN}:wire:1",
        "tool": "transfer",
        "attempt": 2,
        "updated_at": "2026-12-01T20:33:30.000+00:00",
        "note": {"reason": "outcome unknown", "unclear": "TimeoutError: slow", "failures": 1},
        "unclear": {"reason": "TimeoutError: slow", "traceback": STORY},
    }
    text = reviews_table([review], 200)
    table, story = text.split("\n\n")
    assert table.splitlines()[0].split()[-1] == "WHY"
    assert table.splitlines()[1].endswith("outcome unknown") and "{" not in table
    assert story.splitlines()[0] == f"traceback of {RUN}:wire:1 (unclear outcome, attempt 2):"
    assert story.splitlines()[-1] == "  ValueError: \\x1b]0;pwned\\x07 bad"
    # In a run's history, the call's event carries the same story.
    events = [
        {"event": "run_started", "run_id": RUN, "at": "2026-12-01T20:33:30.000+00:00"},
        {"event": "side_effect_needs_review", **review, "run_id": RUN,
         "at": "2026-12-01T20:33:31.000+00:00"},
    ]  # fmt: skip
    _, told = history_table(events).split("\n\n")
    assert told.splitlines()[0] == "traceback of wire:1 (unclear outcome, attempt 2):"


def test_runs_show_names_the_run_a_rerun_re_runs_never_cut() -> None:
    original = "run-" + "7" * 100
    details = run_details(
        {**_run("agent", "RUNNING"), "rerun_of": original, "rerun_from": "ship:3"}
    )
    lines = _lines(details)
    assert f"rerun_of:           {original}" in lines
    assert "rerun_from:         ship:3" in lines
