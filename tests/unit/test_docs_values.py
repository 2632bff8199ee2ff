"""docs/values-and-errors.md's Python examples are executed, so they cannot drift from the API."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from durable_agents.core.serde import decode_value, encode_value

DOC = Path(__file__).resolve().parents[2] / "docs" / "values-and-errors.md"


def test_values_and_errors_doc_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 2, "docs/values-and-errors.md should show values and errors in use"
    # A real module: recorded classes resolve by module and name, as an agent module's do.
    module = types.ModuleType("values_doc")
    sys.modules["values_doc"] = module
    try:
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), module.__dict__)
        parcel = module.__dict__["make_types"]()
        assert decode_value(encode_value(parcel(5))) == parcel(5)
        assert "pricing" in module.__dict__
    finally:
        del sys.modules["values_doc"]
