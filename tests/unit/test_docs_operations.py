"""docs/operations.md's Python examples are executed, so the documentation cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_operations_doc_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 4, "docs/operations.md: a cancel, its test, a time limit, a rerun"
    namespace: dict[str, object] = {"__name__": "operations_doc"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert {"refunder", "stopped", "timed", "rerun", "charges"} <= set(namespace)
