"""docs/invocations.md's example is executed, so the documentation cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "invocations.md"


def test_invocations_doc_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "docs/invocations.md shows one invocation budget"
    namespace: dict[str, object] = {"__name__": "invocations_doc"}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)
    assert "summarizer" in namespace
