"""docs/context.md shows every ``ctx`` operation; its examples are executed here.

Each block runs in order in one namespace (the first holds the shared imports), as a reader
would paste them; a ``ctx`` operation added to ``DurableContext`` without an example on the
page fails ``test_every_ctx_operation_has_an_example``.
"""

from __future__ import annotations

import re
from pathlib import Path

from durable_agents import DurableContext

DOC = Path(__file__).resolve().parents[2] / "docs" / "context.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_context_doc_examples_run() -> None:
    namespace: dict[str, object] = {"__name__": "context_doc"}
    blocks = _blocks()
    assert len(blocks) >= 14
    for number, block in enumerate(blocks):
        exec(compile(block, f"{DOC}:block{number}", "exec"), namespace)


def test_every_ctx_operation_has_an_example() -> None:
    public = {
        name
        for cls in DurableContext.__mro__
        if cls.__module__.startswith("durable_agents")
        for name in vars(cls)
        if not name.startswith("_")
    }
    public |= {"run_id", "logger"}  # set per context, documented as attributes
    code = "\n".join(_blocks())
    missing = sorted(
        name for name in public if f"ctx.{name}" not in code and f"c.{name}" not in code
    )
    # The scope's own plumbing is not an operation agents call.
    plumbing = {"invocation", "next_operation", "replayed_record", "child", "check_scope_end"}
    assert set(missing) <= plumbing, missing
