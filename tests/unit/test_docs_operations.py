"""docs/operations.md's Python examples are executed, so the documentation cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_operations_doc_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 3, "docs/operations.md shows a cancel, its test and a time limit"
    namespace: dict[str, object] = {"__name__": "operations_doc"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert {"refunder", "stopped", "timed"} <= set(namespace)
