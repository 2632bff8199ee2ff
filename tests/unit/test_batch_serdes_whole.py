"""``serdes=`` and ``item_serdes=`` of ``ctx.map`` / ``ctx.parallel``: the AWS SDK's meanings.

``item_serdes`` serializes each branch's value, in its branch's record (flat: in the batch's);
``serdes`` serializes the ``BatchResult`` as a whole, recorded in the batch's record under
``batch`` (the marker: a record without it refers to its branches), and given alone it is the
per-item serializer too. Batches recorded before (``serdes=`` meaning each branch's value) have
no marker and replay as recorded. Each case runs on the in-memory journal and on DynamoDB (moto).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from durable_agents import (
    NO_RETRY,
    AgentRegistry,
    BatchFailedError,
    BatchResult,
    DurableContext,
    SkipClock,
    agent,
)
from durable_agents.core.models import OpKind, RunStatus
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.export import snapshot_from_dict
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, TestResult
from tests.replay.golden_cases import CASES, GOLDEN_DIR

ITEMS = ["tea", "jam", "bread"]
VALUES = [{"item": item, "boxes": len(item) + index} for index, item in enumerate(ITEMS)]


@pytest.fixture(params=["memory", "dynamodb"])
def journal(request: pytest.FixtureRequest) -> Iterator[JournalStore]:
    """The in-memory journal, and DynamoDB on moto (with S3 spill)."""
    if request.param == "memory":
        yield InMemoryJournal()
    else:
        yield request.getfixturevalue("dynamodb_journal")


class Texts:
    """A serializer that writes ``<prefix>`` + JSON, and a whole batch as ``<prefix>batch:``.

    It keeps what it was given and what it read; ``values`` / ``batches`` say which of the two
    it accepts (the other raises, which the batch turns into a ``PayloadError``).
    """

    def __init__(self, prefix: str, *, values: bool = True, batches: bool = True) -> None:
        self.prefix = prefix
        self.values = values
        self.batches = batches
        self.given: list[Any] = []
        self.read: list[str] = []
        self._lock = threading.Lock()

    def serialize(self, value: Any) -> str:
        with self._lock:
            self.given.append(value)
        if isinstance(value, BatchResult):
            if not self.batches:
                raise TypeError("given a whole batch")
            return f"{self.prefix}batch:{value.model_dump_json()}"
        if not self.values:
            raise TypeError("given a branch's value")
        return self.prefix + json.dumps(value, sort_keys=True)

    def deserialize(self, text: str) -> Any:
        with self._lock:
            self.read.append(text)
        body = text.removeprefix(self.prefix)
        if body.startswith("batch:"):
            return BatchResult[Any].model_validate_json(body.removeprefix("batch:"))
        return json.loads(body)

    def batches_given(self) -> int:
        return sum(isinstance(v, BatchResult) for v in self.given)


def line(c: DurableContext, item: str, index: int) -> dict[str, Any]:
    def count() -> int:
        if item == "jam" and c.run_id.endswith("-failing"):
            raise ValueError(f"no boxes for {item}")
        return len(item) + index

    return {"item": item, "boxes": c.step(count, name="count", retry=NO_RETRY)}


def run_batch(ctx: DurableContext, kind: str, nesting: str, **options: Any) -> BatchResult[Any]:
    """The batch under test: ``ctx.map`` of ``ITEMS``, or ``ctx.parallel`` of one per item."""
    if kind == "map":
        return ctx.map(ITEMS, line, name="lines", nesting=nesting, **options)  # type: ignore[arg-type]
    branches = [
        (lambda c, item=item, index=index: line(c, item, index)) for index, item in enumerate(ITEMS)
    ]
    return ctx.parallel(branches, name="lines", nesting=nesting, **options)  # type: ignore[arg-type]


def snapshot(batch: BatchResult[Any]) -> tuple[Any, ...]:
    return (
        batch.completion_reason,
        [
            (
                i.index,
                i.status,
                i.result,
                (i.error or {}).get("type"),
                (i.error or {}).get("message"),
            )
            for i in batch.items
        ],
    )


def batch_agent(kind: str, nesting: str, seen: list[Any], **options: Any) -> Callable[..., Any]:
    """An agent running the batch, then a step (so later invocations replay the batch)."""

    @agent(name="packer", version="1", registry=AgentRegistry())
    def packer(ctx: DurableContext, _: Any) -> Any:
        try:
            batch = run_batch(ctx, kind, nesting, **options)
        except BatchFailedError as exc:
            assert exc.result is not None
            seen.append(("raised", exc.failed_branches, snapshot(exc.result)))
            ctx.step(lambda: None, name="after")
            return "raised"
        seen.append(snapshot(batch))
        ctx.step(lambda: None, name="after")
        return batch.all_results()

    return packer  # type: ignore[no-any-return]


def batch_outcome(result: TestResult) -> tuple[str, dict[str, Any]]:
    """The batch record's type and decoded outcome."""
    (entry,) = [e for e in result.operation("lines").entries if e.type.is_result]
    return entry.type.value, json.loads(entry.value or "null")


def branch_values(journal: JournalStore, run_id: str) -> list[str]:
    """What the branches' own records hold (none for flat branches)."""
    return [
        e.value or ""
        for e in journal.load(run_id).entries
        if e.kind is OpKind.CHILD and e.name.startswith("branch-") and e.type.is_result
    ]


def drive(packer: Any, journal: JournalStore, run_id: str = "run-1") -> TestResult:
    runner = AgentTestRunner(packer, journal=journal, mode="faithful")
    result = runner.run(None, run_id=run_id)
    assert result.status == "SUCCEEDED", result.error
    assert runner.check_replays(result.run_id) == []
    return result


KINDS = ["map", "parallel"]
NESTINGS = ["nested", "flat"]


@pytest.mark.parametrize("nesting", NESTINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_item_serdes_serializes_each_branch_value_and_the_record_refers_to_branches(
    journal: JournalStore, kind: str, nesting: str
) -> None:
    items = Texts("item:", batches=False)
    seen: list[Any] = []
    result = drive(batch_agent(kind, nesting, seen, item_serdes=items), journal)
    assert result.output == VALUES
    assert len(seen) >= 2 and all(s == seen[0] for s in seen)
    assert items.batches_given() == 0
    given = sorted(json.dumps(v, sort_keys=True) for v in items.given)
    expected = sorted(json.dumps(v, sort_keys=True) for v in VALUES)
    if nesting == "nested":
        assert given == expected  # each value once
    else:  # a finished flat branch is replayed, and serialized, until the batch is recorded
        assert sorted(set(given)) == expected
    kind_of, outcome = batch_outcome(result)
    assert kind_of == "succeeded" and "batch" not in outcome
    assert outcome["branches"] == "sss"
    held = branch_values(journal, result.run_id)
    if nesting == "flat":
        assert held == [] and set(outcome["values"]) == {"0", "1", "2"}
    else:
        assert sorted(held) == sorted("item:" + json.dumps(v, sort_keys=True) for v in VALUES)
        assert "values" not in outcome


@pytest.mark.parametrize("nesting", NESTINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_serdes_with_item_serdes_records_the_whole_batch_once_in_the_batch_record(
    journal: JournalStore, kind: str, nesting: str
) -> None:
    items = Texts("item:", batches=False)
    whole = Texts("whole:", values=False)
    seen: list[Any] = []
    packer = batch_agent(kind, nesting, seen, serdes=whole, item_serdes=items)
    result = drive(packer, journal)
    assert result.output == VALUES
    assert len(seen) >= 2 and all(s == seen[0] for s in seen)
    # The whole serializer saw one thing, once: the BatchResult, with the values as read back.
    assert len(whole.given) == 1 and whole.batches_given() == 1
    assert whole.given[0].results() == VALUES
    assert items.batches_given() == 0
    kind_of, outcome = batch_outcome(result)
    assert kind_of == "succeeded"
    assert set(outcome) == {"branches", "completion_reason", "batch"}  # no values, no errors
    assert outcome["branches"] == "sss" and outcome["completion_reason"] == "all_completed"
    assert outcome["batch"].startswith("whole:batch:{")
    held = branch_values(journal, result.run_id)
    assert len(held) == (0 if nesting == "flat" else 3)
    assert all(v.startswith("item:") for v in held)
    # A replay of the recorded batch decodes the whole text and reads no branch record.
    items.read.clear()
    whole.read.clear()
    assert AgentTestRunner(packer, journal=journal).check_replays(result.run_id) == []
    assert items.read == [] and whole.read != []
    assert all(text == outcome["batch"] for text in whole.read)


@pytest.mark.parametrize("nesting", NESTINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_serdes_alone_serializes_each_value_and_the_whole_batch(
    journal: JournalStore, kind: str, nesting: str
) -> None:
    both = Texts("both:")
    seen: list[Any] = []
    result = drive(batch_agent(kind, nesting, seen, serdes=both), journal)
    assert result.output == VALUES
    assert len(seen) >= 2 and all(s == seen[0] for s in seen)
    assert both.batches_given() == 1
    if nesting == "nested":
        assert len(both.given) == len(VALUES) + 1  # each value once, and the batch once
    _, outcome = batch_outcome(result)
    assert outcome["batch"].startswith("both:batch:") and "values" not in outcome
    held = branch_values(journal, result.run_id)
    if nesting == "nested":
        assert sorted(held) == sorted("both:" + json.dumps(v, sort_keys=True) for v in VALUES)


@pytest.mark.parametrize("kind", KINDS)
def test_serdes_alone_written_for_values_only_keeps_its_old_meaning_and_says_so(
    journal: JournalStore, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Code from before serdes= also meant the whole batch (a run in flight at the deploy,
    # whose batch completes now): its run must not fail for it. The batch is recorded in the
    # per-item form, which replays as it always did, and a warning says what to change.
    seen: list[Any] = []
    packer = batch_agent(kind, "nested", seen, serdes=(json.dumps, json.loads))
    with caplog.at_level(logging.WARNING, logger="durable_agents.batches"):
        result = drive(packer, journal)
    assert result.output == VALUES
    assert len(seen) >= 2 and all(s == seen[0] for s in seen)
    _, outcome = batch_outcome(result)
    assert "batch" not in outcome
    assert any("Pass item_serdes= for that" in r.getMessage() for r in caplog.records)
    # Said explicitly, the same serializer records the same form, without a warning.
    caplog.clear()
    seen.clear()
    fixed = batch_agent(kind, "nested", seen, item_serdes=(json.dumps, json.loads))
    with caplog.at_level(logging.WARNING, logger="durable_agents.batches"):
        assert drive(fixed, journal, "run-2").output == VALUES
    assert not any("item_serdes" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_serializer_given_as_such_that_fails_fails_the_batch(
    journal: JournalStore, kind: str
) -> None:
    # With item_serdes= beside it, serdes= is meant for the batch: no fallback hides a bug.
    values_only = (json.dumps, json.loads)
    seen: list[Any] = []
    packer = batch_agent(
        kind, "nested", seen, serdes=values_only, item_serdes=(json.dumps, json.loads)
    )
    result = AgentTestRunner(packer, journal=journal).run(None)
    assert result.status == "FAILED"
    assert result.error is not None and result.error.type == "PayloadError"


@pytest.mark.parametrize("nesting", NESTINGS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("form", ["item", "whole"])
def test_failed_branches_returned_are_in_either_form(
    journal: JournalStore, kind: str, nesting: str, form: str
) -> None:
    items = Texts("item:", batches=False)
    whole = Texts("whole:", values=False)
    options: dict[str, Any] = {"item_serdes": items, "on_failure": "return"}
    if form == "whole":
        options["serdes"] = whole
    seen: list[Any] = []
    result = drive(batch_agent(kind, nesting, seen, **options), journal, "run-failing")
    assert len(seen) >= 2 and all(s == seen[0] for s in seen)
    reason, statuses = seen[0]
    assert reason == "failure_tolerance_exceeded"
    assert statuses[0][:3] == (0, "succeeded", VALUES[0])
    assert statuses[1][1:] == ("failed", None, "ValueError", "no boxes for jam")
    assert statuses[2][1] in ("succeeded", "not_started")
    kind_of, outcome = batch_outcome(result)
    assert kind_of == "succeeded" and outcome["branches"].startswith("sf")
    if form == "whole":
        assert "errors" not in outcome and "batch" in outcome
        assert whole.batches_given() == 1
    else:
        assert "batch" not in outcome
        assert ("errors" in outcome) == (nesting == "flat")


@pytest.mark.parametrize("nesting", NESTINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_beyond_its_policy_raises_with_the_whole_batch_as_its_result(
    journal: JournalStore, kind: str, nesting: str
) -> None:
    whole = Texts("whole:", values=False)
    seen: list[Any] = []
    packer = batch_agent(kind, nesting, seen, serdes=whole, item_serdes=Texts("item:"))
    result = drive(packer, journal, "run-failing")
    assert result.output == "raised"
    assert len(seen) >= 2 and all(s == seen[0] for s in seen)
    raised, failed, (reason, statuses) = seen[0]
    assert raised == "raised" and failed == ["branch-1"]
    assert reason == "failure_tolerance_exceeded" and statuses[1][3] == "ValueError"
    kind_of, outcome = batch_outcome(result)
    assert kind_of == "failed" and outcome["batch"].startswith("whole:batch:")


def test_whole_serdes_may_give_back_a_dict_but_nothing_else(journal: JournalStore) -> None:
    as_dict = (lambda b: b.model_dump_json(), json.loads)
    seen: list[Any] = []
    ok = batch_agent("map", "nested", seen, serdes=as_dict, item_serdes=(json.dumps, json.loads))
    assert drive(ok, journal).output == VALUES
    bad = (lambda b: b.model_dump_json(), lambda text: "a batch")
    wrong = batch_agent("map", "nested", [], serdes=bad, item_serdes=(json.dumps, json.loads))
    result = AgentTestRunner(wrong, journal=journal).run(None, run_id="run-2")
    assert result.status == "FAILED" and result.error is not None
    assert result.error.type == "PayloadError" and "not a BatchResult" in result.error.message


def waiting_agent(seen: list[Any], **options: Any) -> Any:
    """A map whose branch 1 waits for the ``go`` event, then a wait for ``done``."""

    def waiting_line(c: DurableContext, item: str, index: int) -> dict[str, Any]:
        if index == 1:
            c.wait_for_event("go")
        return line(c, item, index)

    @agent(name="waiter", version="1", registry=AgentRegistry())
    def waiter(ctx: DurableContext, _: Any) -> Any:
        batch = ctx.map(ITEMS, waiting_line, name="lines", **options)
        seen.append(snapshot(batch))
        ctx.wait_for_event("done")
        return batch.results()

    return waiter


def test_a_batch_recorded_per_item_replays_under_serdes_on_new_code(
    journal: JournalStore,
) -> None:
    """Code from before passed ``serdes=X`` meaning ``item_serdes=X`` (the records are the
    same): the batch recorded so replays on code passing ``serdes=X`` without encoding the
    batch, and returns the same values."""
    before = Texts("pack:")
    seen: list[Any] = []
    old = AgentTestRunner(waiting_agent(seen, item_serdes=before), journal=journal)
    result = old.run(None)
    assert result.status == "SUSPENDED"
    result = old.send_event(result.run_id, "go")  # the batch is recorded, the run waits on
    _, outcome = batch_outcome(result)
    assert "batch" not in outcome
    after = Texts("pack:")
    new = AgentTestRunner(waiting_agent(seen, serdes=after), journal=journal, clock=old.clock)
    result = new.send_event(result.run_id, "done")
    assert result.status == "SUCCEEDED", result.error
    assert result.output == VALUES
    assert all(s == seen[0] for s in seen)
    assert after.given == []  # nothing encoded again: the batch was recorded
    assert after.read != []  # its values decoded from the branch records
    assert "batch" not in batch_outcome(result)[1]


def test_branches_recorded_before_complete_a_batch_recorded_whole_on_new_code(
    journal: JournalStore,
) -> None:
    """In flight across the deployment: two branches recorded by code passing ``serdes=X``
    per item, the third finishes on code where ``serdes=X`` also means the whole batch."""
    before = Texts("pack:")
    seen: list[Any] = []
    old = AgentTestRunner(waiting_agent(seen, item_serdes=before), journal=journal)
    result = old.run(None)
    assert result.status == "SUSPENDED"
    after = Texts("pack:")
    new = AgentTestRunner(waiting_agent(seen, serdes=after), journal=journal, clock=old.clock)
    result = new.send_event(result.run_id, "go")
    _, outcome = batch_outcome(result)
    assert outcome["batch"].startswith("pack:batch:")
    assert after.batches_given() == 1
    result = new.send_event(result.run_id, "done")
    assert result.status == "SUCCEEDED", result.error
    assert result.output == VALUES
    assert all(s == seen[0] for s in seen)


def test_a_batch_recorded_whole_needs_its_serdes_to_replay(journal: JournalStore) -> None:
    seen: list[Any] = []
    old = AgentTestRunner(waiting_agent(seen, serdes=Texts("pack:")), journal=journal)
    result = old.run(None)
    result = old.send_event(result.run_id, "go")
    assert "batch" in batch_outcome(result)[1]
    without = waiting_agent(seen, item_serdes=Texts("pack:"))
    new = AgentTestRunner(without, journal=journal, clock=old.clock)
    result = new.send_event(result.run_id, "done")
    assert result.status == "FAILED" and result.error is not None
    assert result.error.type == "PayloadError"
    assert "needs that serializer" in result.error.message


OLD_FORM = "golden-packing-v1-item-form-completed.json"


def test_the_golden_journal_of_the_old_form_holds_no_marker() -> None:
    """Recorded by the code from before: ``serdes=`` per item, batch records referring to
    branches (flat values and errors in the record). A re-recording would add the marker."""
    data = json.loads((GOLDEN_DIR / OLD_FORM).read_text())
    outcomes = {
        e["name"]: json.loads(e["value"])
        for e in data["entries"]
        if e["kind"] in ("map", "parallel") and e["type"] in ("succeeded", "failed")
    }
    assert set(outcomes) == {"lines", "crates", "ratios"}
    assert all("batch" not in o for o in outcomes.values())
    assert outcomes["crates"]["values"] == {"0": 'line:{"kg": 7}'}
    new = json.loads((GOLDEN_DIR / "golden-packing-v1-completed.json").read_text())
    assert all(
        "batch" in json.loads(e["value"])
        for e in new["entries"]
        if e["kind"] in ("map", "parallel") and e["type"] in ("succeeded", "failed")
    )


def test_the_golden_journal_of_the_old_form_replays_on_both_journals(
    journal: JournalStore,
) -> None:
    (case,) = [c for c in CASES if c.file == OLD_FORM]
    snapshot_ = snapshot_from_dict(json.loads((GOLDEN_DIR / OLD_FORM).read_text()))
    recorded = snapshot_.header
    journal.create_run(
        recorded.replace(
            status=RunStatus.RUNNING, result=None, error=None, wake_at_ms=None, waiting_on=None
        )
    )
    journal.commit(recorded.run_id, snapshot_.entries)
    runtime = Runtime(
        journal, registry=case.resolve_registry(), clock=SkipClock(recorded.updated_at_ms)
    )
    outcome = runtime.execute(recorded.run_id, budget=0)
    assert outcome.kind is OutcomeKind.SUCCEEDED, outcome.detail
    assert outcome.executed == []
    replayed = json.loads(journal.get_run(recorded.run_id).result or "null")
    assert replayed == json.loads(recorded.result or "null")
    assert replayed["crates"]["results"] == [{"kg": 7}, None]
