"""The docstring examples of ``StepContext`` and ``Plugin`` run: they cannot drift from the API."""

from __future__ import annotations

import doctest

from durable_agents import plugins
from durable_agents.engine import step_context


def test_step_context_example_runs() -> None:
    results = doctest.testmod(step_context)
    assert results.attempted > 0 and results.failed == 0


def test_plugin_example_runs() -> None:
    results = doctest.testmod(plugins)
    assert results.attempted > 0 and results.failed == 0
