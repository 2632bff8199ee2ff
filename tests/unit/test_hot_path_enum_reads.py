"""An operation reads no attribute of an enum class, executed or replayed, in every mode.

On Python 3.11 (what these machines run) ``EnumType`` defines ``__getattr__``, so every read
of ``RunStatus.RUNNING``-style names goes through the type's attribute hook: about 900
instructions, where a module name costs a few. The hot paths keep the members they read in
module names; these tests count the reads (exactly, whatever the machine) so that a new
``OutcomeKind.X`` on a path that runs once per operation, or once per replayed operation,
is caught.
"""

from __future__ import annotations

import enum
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from bench_kinds import kind_operation  # the cost bench's operation of each kind

from durable_agents import AgentRegistry, agent
from durable_agents_local.testing import AgentTestRunner

Mode = Literal["continuous", "faithful", "sticky"]


def _operation(kind: str, ctx: Any, i: int) -> None:
    if kind == "values":
        ctx.now(), ctx.uuid(), ctx.random()
    elif kind == "child":
        ctx.run_in_child_context(lambda c: c.step(lambda: i, name="s"), name=f"c{i}")
    elif kind == "parallel branch":
        ctx.parallel([lambda c, i=i: c.step(lambda: i, name="s")], name=f"p{i}").throw_if_error()
    else:  # step, llm, tool, wait, emit
        kind_operation(kind, ctx, i, child=None)


def _enum_reads(kind: str, mode: Mode, count: int) -> Counter[str]:
    """``Class.MEMBER`` reads of enum classes during one run of ``count`` operations."""

    @agent(name="hot", version="1", registry=AgentRegistry())
    def hot(ctx: Any, _: int) -> int:
        for i in range(count):
            _operation(kind, ctx, i)
        return count

    harness: Literal["continuous", "faithful"] = (
        "continuous" if mode == "continuous" else "faithful"
    )
    script = [{"text": "ok"}] * count if kind == "llm" else None
    runner = AgentTestRunner(hot, mode=harness, sticky=mode == "sticky", model_script=script)
    reads: Counter[str] = Counter()

    def counting(cls: type, name: str) -> Any:
        # Only the runtime's own enums (a library's first use of a model reads its own).
        if not name.startswith("_") and cls.__module__.startswith("durable_agents."):
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


KINDS = ["step", "llm", "tool", "wait", "emit", "values", "child", "parallel branch"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["continuous", "faithful", "sticky"])
def test_an_operation_reads_no_enum_member_through_its_class(kind: str, mode: Mode) -> None:
    shorter, longer = _enum_reads(kind, mode, 4), _enum_reads(kind, mode, 12)
    # The run's start and end read a few; the 8 operations more (and, faithful, the ~100
    # operations more that are replayed) read none.
    grown = {name: longer[name] - shorter[name] for name in longer if longer[name] > shorter[name]}
    assert grown == {}
