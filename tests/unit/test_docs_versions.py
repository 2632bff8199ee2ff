"""docs/versions.md's Python examples are executed, so the guide cannot drift from the API."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "versions.md"


def test_versions_doc_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 5, "docs/versions.md should show pins, side by side, migrations"
    namespace: dict[str, object] = {"__name__": "versions_doc"}
    for block in blocks:  # in order, in one namespace: each example builds on the last
        exec(compile(block, str(DOC), "exec"), namespace)
    assert {"deploy_reply", "deployment", "with_migration", "record"} <= set(namespace)
