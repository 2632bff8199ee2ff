"""The log filter masks revealed secrets in tracebacks and keeps every other traceback whole."""

from __future__ import annotations

import logging
import sys

import pytest

from durable_agents.core import scrub

SECRET = "sk-live-0123456789"


@pytest.fixture(autouse=True)
def revealed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that revealed one secret (the registry is per process: a fresh one here)."""
    monkeypatch.setattr(scrub, "_revealed", type(scrub._revealed)())
    monkeypatch.setattr(scrub, "_ordered", ())
    scrub.remember(SECRET)


def _record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except type(exc):
        info = sys.exc_info()
    return logging.LogRecord("t", logging.ERROR, __file__, 1, "failed", (), info)


def test_a_traceback_without_a_secret_keeps_its_exception() -> None:
    # Once any secret was revealed the filter used to drop exc_info from every record, so
    # Powertools' JSON lines (which read exc_info alone) lost every traceback after that.
    record = _record(RuntimeError("plugin broke"))
    assert scrub.ScrubFilter().filter(record)
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    assert "plugin broke" in logging.Formatter().format(record)


def test_a_traceback_with_a_secret_is_written_masked() -> None:
    record = _record(RuntimeError(f"provider refused key {SECRET}"))
    assert scrub.ScrubFilter().filter(record)
    assert record.exc_info is None
    line = logging.Formatter().format(record)
    assert SECRET not in line
    assert "provider refused key ***" in line and "Traceback" in line
