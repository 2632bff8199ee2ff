"""Golden journals of batches (``ctx.map`` / ``ctx.parallel``): both record formats replay.

``test_golden.py`` replays every golden journal; this module pins what the batch records in
them hold, so a re-recording by mistake (which would quietly drop the old format from CI) fails
here. The ``golden-fanout-v1-*`` journals were recorded before batch records referred to their
branches: each holds every branch's value (``items``), a second time.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.replay.golden_cases import GOLDEN_DIR

BATCH_KINDS = ("map", "parallel")
VALUE_FORMAT = ("golden-fanout-v1-completed.json", "golden-fanout-v1-waiting.json")


def batch_records(file: str) -> dict[str, Any]:
    """The decoded result of every batch recorded in a golden journal, by batch name."""
    data = json.loads((GOLDEN_DIR / file).read_text())
    return {
        e["name"]: json.loads(e["value"])
        for e in data["entries"]
        if e["kind"] in BATCH_KINDS and e["type"] == "succeeded"
    }


@pytest.mark.parametrize("file", VALUE_FORMAT)
def test_journals_of_the_value_format_hold_every_branch_value_in_the_batch_record(
    file: str,
) -> None:
    records = batch_records(file)
    assert set(records) == {"prices", "checks", "labels", "first"}
    prices = records["prices"]["items"]
    assert [i["result"] for i in prices] == ["price:0.75", "price:0.76", "price:1.27"]
    checks = records["checks"]["items"]
    assert checks[0]["result"]["__durable__"] == "dataclass"
    assert checks[1]["error"]["type"] == "FraudSuspectedError"
