"""The fault suite's report (schedules and faults per class, printed after the run) and the
gate on its heavy tests: ``reliability_full`` tests run only with ``RELIABILITY_FULL=1``
(``make reliability`` sets it), so the normal ``pytest`` run keeps the fast subset."""

from __future__ import annotations

import os

import pytest

from tests.reliability import api_fuzz, soak_stack, tally


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("RELIABILITY_FULL") == "1":
        return
    skip = pytest.mark.skip(reason="heavy fault-suite test: run `make reliability`")
    for item in items:
        if item.get_closest_marker("reliability_full"):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = tally.summary()
    if lines:
        terminalreporter.section("reliability: schedules per fault class")
        for line in lines:
            terminalreporter.write_line(line)
    if soak_stack.SUMMARY:
        terminalreporter.section("reliability: local-mode SIGKILL soak")
        for line in soak_stack.SUMMARY:
            terminalreporter.write_line(line)
    if api_fuzz.summary():
        terminalreporter.section("reliability: Api fuzzing (schemathesis)")
        for line in api_fuzz.summary():
            terminalreporter.write_line(line)
