"""docs/migrating-from-aws-durable-functions.md: its ported handler runs as the page says.

The page's tables are checked for broken links by tests/unit/test_docs_links.py; this runs its
example, and checks that every SDK operation the guide promises to cover has a row.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-aws-durable-functions.md"

SDK_SURFACE = (
    "context.step",
    "context.wait(",
    "context.create_callback",
    "context.wait_for_callback",
    "context.wait_for_condition",
    "context.parallel",
    "context.map",
    "context.invoke",
    "context.run_in_child_context",
    "context.logger",
    "RetryPresets",
    "JitterStrategy",
    "SerDes",
    "CompletionConfig",
    "StepContext",
    "DurableInstrumentationPlugin",
    "DurableFunctionTestRunner",
)


def test_migration_guide_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "migrating_doc"})


def test_migration_guide_covers_the_sdk_surface() -> None:
    text = DOC.read_text()
    missing = [name for name in SDK_SURFACE if name not in text]
    assert missing == []
