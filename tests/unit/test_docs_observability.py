"""docs/observability.md's Python examples are executed: the page cannot drift from the API."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_observability_doc_examples_run(caplog: pytest.LogCaptureFixture) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 2, "docs/observability.md shows a step context and a plugin"
    namespace: dict[str, object] = {"__name__": "observability_doc"}
    with caplog.at_level(logging.ERROR, logger="durable_agents.plugins"):
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)
    assert "reporter" in namespace and "timings" in namespace
    # The broken plugin of the example raised, and was logged rather than raised.
    assert any("Broken" in r.getMessage() for r in caplog.records)
