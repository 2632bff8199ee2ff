"""docs/retries.md's Python examples are executed, so the documentation cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "retries.md"


def test_retries_doc_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 3, "docs/retries.md shows filters, a decision function and polling"
    namespace: dict[str, object] = {"__name__": "retries_doc"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert {"THROTTLED", "quota_bound", "waiter"} <= set(namespace)
