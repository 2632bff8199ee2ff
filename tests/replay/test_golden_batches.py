"""Golden journals of batches (``ctx.map`` / ``ctx.parallel``): both record formats replay.

``test_golden.py`` replays every golden journal; this module pins what the batch records in
them hold, so a re-recording by mistake (which would quietly drop the old format from CI) fails
here. ``golden-fanout-v1-completed`` / ``-waiting`` were recorded before batch records referred
to their branches: each batch record holds every branch's value (``items``) a second time.
``golden-fanout-v1-branch-refs-*`` were recorded since: the branch records alone hold values.
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


BRANCH_REFS = (
    "golden-fanout-v1-branch-refs-completed.json",
    "golden-fanout-v1-branch-refs-waiting.json",
)


@pytest.mark.parametrize("file", BRANCH_REFS)
def test_journals_of_the_branch_refs_format_store_each_branch_value_once(file: str) -> None:
    records = batch_records(file)
    assert records["prices"] == {"branches": "sss", "completion_reason": "all_completed"}
    assert records["checks"] == {"branches": "sf", "completion_reason": "all_completed"}
    assert records["first"] == {"branches": "snn", "completion_reason": "min_successful_reached"}
    # Flat branches have no record of their own: the batch record holds their values.
    assert set(records["labels"]["values"]) == {"0", "1"}
    values = [e.get("value") or "" for e in json.loads((GOLDEN_DIR / file).read_text())["entries"]]
    for text in ("price:0.75", "price:0.76", "price:1.27"):
        assert sum(v.count(text) for v in values) == 1, text


def test_both_formats_replay_to_the_same_result() -> None:
    """What test_golden.py replays them to (the recorded results) is the same in both."""
    old, new = (
        json.loads(json.loads((GOLDEN_DIR / f).read_text())["header"]["result"])
        for f in (VALUE_FORMAT[0], BRANCH_REFS[0])
    )
    assert old.pop("order") == "order-3001" and new.pop("order") == "order-3003"
    assert old == new
