"""The fault suite's report: schedules and faults per class, printed after the run."""

from __future__ import annotations

import pytest

from tests.reliability import tally


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = tally.summary()
    if lines:
        terminalreporter.section("reliability: schedules per fault class")
        for line in lines:
            terminalreporter.write_line(line)
