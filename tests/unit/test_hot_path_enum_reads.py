"""A plain step reads no attribute of an enum class, in every harness mode.

On Python 3.11 (what these machines run) ``EnumType`` defines ``__getattr__``, so every read
of ``RunStatus.RUNNING``-style names goes through the type's attribute hook: about 900
instructions, where a module name costs a few. The hot path keeps its members in module
names; these tests count the reads (exactly, whatever the machine) so that a new
``OutcomeKind.X`` in a loop that runs once per step or per replayed operation is caught.
"""

from __future__ import annotations

import enum
from collections import Counter
from typing import Any, Literal

import pytest

from durable_agents import AgentRegistry, agent
from durable_agents.testing import AgentTestRunner

Mode = Literal["continuous", "faithful", "sticky"]


def _enum_reads(mode: Mode, steps: int) -> Counter[str]:
    """``Class.MEMBER`` reads of enum classes during one run of ``steps`` plain steps."""

    @agent(name="plain", version="1", registry=AgentRegistry())
    def plain(ctx: Any, _: int) -> int:
        for i in range(steps):
            ctx.step(lambda i=i: i, name=f"s{i}")
        return steps

    harness_mode: Literal["continuous", "faithful"] = (
        "continuous" if mode == "continuous" else "faithful"
    )
    runner = AgentTestRunner(plain, mode=harness_mode, sticky=mode == "sticky")
    reads: Counter[str] = Counter()

    def counting(cls: type, name: str) -> Any:
        if not name.startswith("_"):
            reads[f"{cls.__name__}.{name}"] += 1
        return type.__getattribute__(cls, name)

    # Set on the metaclass for this run only, and removed again (it has none of its own).
    enum.EnumType.__getattribute__ = counting  # type: ignore[method-assign,assignment]
    try:
        result = runner.run(0)
    finally:
        del enum.EnumType.__getattribute__  # type: ignore[misc]
    assert result.status == "SUCCEEDED"
    return reads


@pytest.mark.parametrize("mode", ["continuous", "faithful", "sticky"])
def test_a_plain_step_reads_no_enum_member_through_its_class(mode: Mode) -> None:
    shorter, longer = _enum_reads(mode, 10), _enum_reads(mode, 30)
    # The run's start and end read a few; the 20 steps more (and, faithful, the ~400
    # operations more that are replayed) read none.
    grown = {name: longer[name] - shorter[name] for name in longer if longer[name] != shorter[name]}
    assert grown == {}
