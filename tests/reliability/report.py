"""The fault suite's end-of-session report: schedules per fault class, the soak, the fuzzer.

The counts live in module globals of the process that ran the tests. Under pytest-xdist that
is a worker, whose terminal output nobody sees: each worker hands its counts to the controller
(``export``, through ``workeroutput``), which adds them up (``merge``) and prints the one report.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.reliability import api_fuzz, soak_stack, tally


def export() -> dict[str, Any]:
    """This process's counts, as plain data (what xdist can carry to the controller)."""
    return {
        "tally": [dict(tally.schedules), dict(tally.injected), dict(tally.violations)],
        "fuzz": [
            dict(api_fuzz.requests),
            dict(api_fuzz.rejected),
            dict(api_fuzz.statuses),
            dict(api_fuzz.seconds),
        ],
        "fuzz_elapsed": list(api_fuzz.elapsed),
        "soak": list(soak_stack.SUMMARY),
    }


def merge(state: dict[str, Any]) -> None:
    """Adds one worker's ``export`` to this process's counts."""
    for counter, counts in zip(
        (tally.schedules, tally.injected, tally.violations), state["tally"], strict=True
    ):
        counter.update(counts)
    for counter, counts in zip(
        (api_fuzz.requests, api_fuzz.rejected, api_fuzz.statuses, api_fuzz.seconds),
        state["fuzz"],
        strict=True,
    ):
        counter.update(counts)
    api_fuzz.elapsed.extend(state["fuzz_elapsed"])
    soak_stack.SUMMARY.extend(state["soak"])


def write(terminalreporter: pytest.TerminalReporter) -> None:
    """Prints the report's sections (none for a part that did not run)."""
    for title, lines in (
        ("reliability: schedules per fault class", tally.summary()),
        ("reliability: local-mode SIGKILL soak", soak_stack.SUMMARY),
        ("reliability: Api fuzzing (schemathesis)", api_fuzz.summary()),
    ):
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)
