"""The examples in durable_agents.engine.time_limits run."""

from __future__ import annotations

import doctest

from durable_agents.engine import time_limits


def test_time_limits_examples() -> None:
    results = doctest.testmod(time_limits)
    assert results.attempted > 0 and results.failed == 0
