"""The fault suite's report (schedules and faults per class, printed after the run) and the
gate on its heavy tests: ``reliability_full`` tests run only with ``RELIABILITY_FULL=1``
(``make reliability`` sets it), so the normal ``pytest`` run keeps the fast subset."""

from __future__ import annotations

import os

import pytest

from tests.reliability import report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("RELIABILITY_FULL") == "1":
        return
    skip = pytest.mark.skip(reason="heavy fault-suite test: run `make reliability`")
    for item in items:
        if item.get_closest_marker("reliability_full"):
            item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller prints the report
        workeroutput["reliability"] = report.export()


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if not config.pluginmanager.hasplugin("dsession"):  # under xdist: tests/conftest.py prints
        report.write(terminalreporter)
