"""docs/memory.md's Python example is executed, so the documentation cannot drift from the API."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "memory.md"


def test_memory_doc_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert blocks, "docs/memory.md should show ctx.memory in use"
    namespace: dict[str, object] = {"__name__": "memory_doc"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert "concierge" in namespace and "lister" in namespace
