"""Injected time. Runtime code never reads the wall clock directly (see ruff banned-api)."""

from __future__ import annotations

import threading
import time as _time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """A source of the current time in epoch milliseconds."""

    def now_ms(self) -> int:
        """Returns the current time in epoch milliseconds."""
        ...


class SystemClock:
    """The real wall clock."""

    def now_ms(self) -> int:
        """Returns the wall-clock time in epoch milliseconds."""
        return _time.time_ns() // 1_000_000


class SkipClock:
    """A manual clock for tests: waits and retries complete instantly by skipping ahead.

    Args:
        start_ms: The initial time in epoch milliseconds.
    """

    def __init__(self, start_ms: int = 1_767_225_600_000):  # 2026-01-01T00:00:00Z
        self._now_ms = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        """Returns the clock's current time."""
        return self._now_ms

    def advance(self, ms: int) -> None:
        """Moves the clock forward.

        Raises:
            ValueError: If ``ms`` is negative (time never goes backwards).
        """
        if ms < 0:
            raise ValueError("a SkipClock never goes backwards")
        with self._lock:
            self._now_ms += ms

    def advance_to(self, epoch_ms: int) -> None:
        """Moves the clock to ``epoch_ms`` if that is in the future; otherwise does nothing."""
        with self._lock:
            self._now_ms = max(self._now_ms, epoch_ms)


def iso(epoch_ms: int | None) -> str | None:
    """Formats epoch milliseconds as an ISO-8601 UTC timestamp."""
    if epoch_ms is None:
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
