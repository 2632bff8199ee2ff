"""A batch's failed branches show in the timelines, even when its policy tolerated them.

ADR 0024: a batch beyond its policy fails (its error is on the timeline like any other); one
within it succeeds with failures that nobody sees unless the timeline says so. The history
events of a batch result carry ``failed_branches`` / ``total_branches``; ``runs timeline``
(CLI) and the console's timeline page mark the batch with them.
"""

from __future__ import annotations

import contextlib
from typing import Any

from api.console_timeline import render_timeline_page
from durable_agents import NO_RETRY, AgentRegistry, CompletionPolicy, DurableContext, agent
from durable_agents.admin.views import entry_event, history
from durable_agents.core.models import Entry, EntryType, OpKind
from durable_agents.engine.operations.batch_result import BatchFailedError, branch_counts
from durable_agents_local.cli.tables import operations, timeline_table
from durable_agents_local.testing import AgentTestRunner


def _fail(child: DurableContext) -> int:
    def boom() -> int:
        raise ValueError("card declined")

    return child.step(boom, name="charge", retry=NO_RETRY)


@agent(name="visible", version="1", registry=AgentRegistry())
def visible(ctx: DurableContext, _: Any) -> str:
    ctx.parallel(
        [lambda c: c.step(lambda: 1, name="one"), _fail, lambda c: c.step(lambda: 3, name="three")],
        name="tolerated",
        completion=CompletionPolicy(tolerated_failure_count=1),
    )
    ctx.map([1, 2], lambda c, x, i: c.step(lambda: x, name="fine"), name="clean")
    with contextlib.suppress(BatchFailedError):  # it fails: the timeline shows how
        ctx.parallel([_fail, lambda c: 2], name="beyond")
    return "done"


def _run() -> tuple[AgentTestRunner, str]:
    runner = AgentTestRunner(visible)
    result = runner.run(None)
    assert result.status == "SUCCEEDED", result.error
    return runner, result.run_id


def test_history_events_of_batch_results_count_their_failed_branches() -> None:
    runner, run_id = _run()
    events = history(runner.journal.load(run_id))
    batches = {e["name"]: e for e in events if e.get("kind") in ("map", "parallel")}
    assert batches["tolerated"]["event"] == "parallel_succeeded"
    assert (batches["tolerated"]["failed_branches"], batches["tolerated"]["total_branches"]) == (
        1,
        3,
    )
    assert batches["clean"]["failed_branches"] == 0
    beyond = batches["beyond"]
    assert beyond["event"] == "parallel_failed"
    assert (beyond["failed_branches"], beyond["total_branches"]) == (1, 2)
    assert beyond["error"]["type"] == "BatchFailedError"
    assert "result" not in beyond  # a failed batch's value is counted, not shown


def test_runs_timeline_marks_a_batch_with_its_failed_branches() -> None:
    runner, run_id = _run()
    ops = operations(history(runner.journal.load(run_id)))
    table = timeline_table(run_id, ops, width=200)
    lines = {line.split()[2]: line for line in table.splitlines()[1:] if len(line.split()) > 2}
    assert "SUCCEEDED (1/3 failed)" in lines["tolerated"]
    assert "FAILED (1/2 failed)" in lines["beyond"]
    assert "failed)" not in lines["clean"]


def test_the_console_timeline_marks_a_batch_with_its_failed_branches() -> None:
    runner, run_id = _run()
    html = render_timeline_page(runner.journal.load(run_id), [], root="../../")
    assert html.count('<p class="err">1 of 3 branch(es) failed</p>') == 1
    assert html.count('<p class="err">1 of 2 branch(es) failed</p>') == 1
    assert "0 of 2" not in html
    assert "BatchFailedError" in html


def test_branch_counts_read_both_record_formats() -> None:
    assert branch_counts({"branches": "sfn", "completion_reason": "x"}) == (1, 3)
    old = {"items": [{"status": "failed"}, {"status": "succeeded"}], "completion_reason": "x"}
    assert branch_counts(old) == (1, 2)
    assert branch_counts("text") is None and branch_counts({"other": 1}) is None
    entry = Entry(
        run_id="r",
        position="00000001",
        op_id="r:m:1",
        kind=OpKind.MAP,
        name="m",
        type=EntryType.FAILED,
        value="not json",
    )
    assert "failed_branches" not in entry_event(entry)
