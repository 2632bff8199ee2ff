"""docs/flow-control.md's examples are executed, so what the guide says cannot drift.

Each block runs in order in one namespace, as a reader would paste them: the agents, the
in-memory runtime on a skip-clock and the small loop that plays the platform are defined once
and used by the later sections.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "flow-control.md"


def test_flow_control_doc_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 9, "the guide shows each declaration, a budget's extension, the views"
    namespace: dict[str, object] = {"__name__": "flow_control_doc"}
    for number, block in enumerate(blocks):
        exec(compile(block, f"{DOC}:block{number}", "exec"), namespace)
    assert {"report", "notify", "writer", "deliver", "overview"} <= set(namespace)
