"""The runtime's parts every invocation holds (``durable_agents.engine.runtime_parts``)."""

from __future__ import annotations

import doctest

from durable_agents.core.clock import SkipClock
from durable_agents.engine import runtime_parts
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.memory import InMemoryJournal


def test_the_module_examples_run() -> None:
    results = doctest.testmod(runtime_parts)
    assert results.attempted > 0 and results.failed == 0


def test_invocation_services_name_every_part_as_the_runtime_has_it() -> None:
    runtime = Runtime(InMemoryJournal(), clock=SkipClock())
    assert set(runtime.invocation_services) == runtime_parts.PARTS
    for name in runtime_parts.PARTS - {"providers"}:
        assert runtime.invocation_services[name] is getattr(runtime, name)
    assert runtime.invocation_services["providers"] is runtime.providers
    runtime.providers = None  # type: ignore[assignment]
    assert runtime.invocation_services["providers"] == {}
