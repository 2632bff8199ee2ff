"""Checks on a run's history after a crash: nothing recorded ran twice (demo and tests)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any


def _ms(at: str) -> int:
    return int(datetime.fromisoformat(at).timestamp() * 1000)


def op_events(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The history events that belong to an operation (not ``run_started`` etc.)."""
    return [e for e in events if e.get("op_id")]


def is_result(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is an operation's final result (succeeded or failed)."""
    return event["event"] in (f"{event.get('kind')}_succeeded", f"{event.get('kind')}_failed")


def step_starts(events: Sequence[Mapping[str, Any]]) -> Counter[str]:
    """How many ``step_started`` events each step (by name) has."""
    return Counter(str(e["name"]) for e in events if e["event"] == "step_started")


def crash_recovery_failures(
    events: Sequence[Mapping[str, Any]], *, killed_step: str, killed_at_ms: int
) -> list[str]:
    """What is wrong with a history in which the worker was killed during ``killed_step``.

    Expected: the run succeeded; every operation has exactly one result; every step has one
    ``step_started`` except ``killed_step``, which has two (attempt 1 interrupted before the
    kill, attempt 2 after it and completed); no operation recorded before the kill has any
    event after it.

    Args:
        events: The run's history (``views.history``).
        killed_step: The name of the step that was running when the worker was killed.
        killed_at_ms: When it was killed (epoch ms, the journal's clock).

    Returns:
        Human-readable failures; empty when every check holds.
    """
    failures: list[str] = []
    if not events or events[-1]["event"] != "run_succeeded":
        failures.append(
            f"the run did not succeed (last event: {events[-1]['event'] if events else 'none'})"
        )
    ops = op_events(events)
    results = Counter(str(e["op_id"]) for e in ops if is_result(e))
    for op_id in dict.fromkeys(str(e["op_id"]) for e in ops):
        if results[op_id] != 1:
            failures.append(f"{op_id} has {results[op_id]} results, expected 1")
    for name, count in step_starts(events).items():
        expected = 2 if name == killed_step else 1
        if count != expected:
            failures.append(f"step {name} started {count} times, expected {expected}")
    killed = [e for e in ops if e.get("name") == killed_step]
    starts = [e for e in killed if e["event"] == "step_started"]
    if len(starts) == 2:
        first, second = starts
        if first.get("attempt") != 1 or _ms(first["at"]) > killed_at_ms:
            failures.append(f"{killed_step}: attempt 1 was not started before the kill")
        if second.get("attempt") != 2 or _ms(second["at"]) < killed_at_ms:
            failures.append(f"{killed_step}: attempt 2 was not started after the kill")
        finals = [e for e in killed if is_result(e)]
        if not finals or finals[0].get("attempt") != 2:
            failures.append(f"{killed_step}: the result was not recorded by attempt 2")
    recorded_before = {str(e["op_id"]) for e in ops if is_result(e) and _ms(e["at"]) < killed_at_ms}
    for event in ops:
        if event["op_id"] in recorded_before and _ms(event["at"]) > killed_at_ms:
            failures.append(
                f"{event['op_id']} was recorded before the kill but has {event['event']} after it"
            )
    return failures
