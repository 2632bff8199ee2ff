"""Flow control's acceptance (issue 36, ADR 0030) in local mode, over HTTP on 127.0.0.1.

One ``durable-agents local`` (embedded store, its own state directory and ports) runs the
examples of ``functions/agents/flow.py`` on the scripted model (``agents:scripts/flow.json``):

* ``batch-worker`` (``Concurrency(limit=3, key="input.customer")``): twenty runs, fourteen of
  customer a then six of b. Never more than three RUNNING (the listing, ``GET /flow`` and the
  times the runs recorded agree), QUEUED runs are visible, b is not served after all of a, all
  twenty succeed.
* ``summarizer`` (``requests_per_minute=3``): a burst of five. None fails; the ones over the
  limit are seen SUSPENDED with ``waiting_on.kind == "rate_limit"``, and the model calls fall
  in two minutes. Local mode runs on the wall clock, so this test waits for the next minute.
* ``research-lead`` (``Budget(tokens=250, on_exceeded="pause")``) and its three
  ``research-helper`` sub-agents: the tree stops with members BUDGET_EXCEEDED and the budget
  used; ``POST /runs/{root}/budget`` extends it with a reason, the whole tree succeeds, every
  call was charged once and the extension's who and why are in ``GET /runs/{root}``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from durable_agents.core.clock import SystemClock
from durable_agents_local.moto_server import free_port
from durable_agents_local.processes import WorkerProcess, http_json
from tests.integration.local_stack import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 3  # batch-worker's Concurrency.limit
RPM = 3  # flow-summarizer's requests_per_minute
BUDGET_TOKENS = 250  # research-lead's Budget.tokens
TOKENS_PER_CALL = 100  # every research answer of agents:scripts/flow.json
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT", "TERMINATED", "PAUSED"}


@pytest.fixture(scope="module")
def local(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[WorkerProcess]:
    """Local mode on its own embedded store, running only the flow-control examples."""
    worker = WorkerProcess(
        api_port=free_port(),
        moto_endpoint=None,
        args=[
            "--store",
            "embedded",
            "--state-dir",
            str(tmp_path_factory.mktemp("flow") / "state"),
            "--moto-port",
            str(free_port()),
            "--model-script",
            "agents:scripts/flow.json",
            "--stall-after",
            "1",
            "--log-level",
            "ERROR",
        ],
        cwd=ROOT,
        # The environment wins over template.yaml's AGENT_MODULES (agents_loading).
        env={"AGENT_MODULES": "agents.flow"},
    )
    failed_before = request.session.testsfailed
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        if request.session.testsfailed > failed_before:
            print("--- local mode log ---", *worker.lines, sep="\n")


def get(worker: WorkerProcess, path: str) -> Any:
    status, body = http_json("GET", f"{worker.base_url}{path}")
    assert status == 200, (path, body)
    return body


def start(worker: WorkerProcess, agent: str, input_value: Any) -> dict[str, Any]:
    status, body = http_json(
        "POST", f"{worker.base_url}/runs", {"agent": agent, "input": input_value}
    )
    assert status == 201, body
    return dict(body["run"])


def runs_of(worker: WorkerProcess, agent: str) -> list[dict[str, Any]]:
    return list(get(worker, f"/runs?agent={agent}&limit=100")["runs"])


def epoch_ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def peak_overlap(intervals: list[tuple[int, int]]) -> int:
    """The most intervals open at one instant (an end before a start at the same time)."""
    edges = sorted([(end, -1) for _, end in intervals] + [(begin, 1) for begin, _ in intervals])
    open_now = peak = 0
    for _, change in edges:
        open_now += change
        peak = max(peak, open_now)
    return peak


def test_twenty_batch_runs_never_run_more_than_three_at_once_and_share_fairly(
    local: WorkerProcess,
) -> None:
    customers = ["a"] * 14 + ["b"] * 6
    # Each half works 1 s holding its slot: all twenty are queued well before a slot frees.
    began_ms = SystemClock().now_ms()
    started = [
        start(local, "batch-worker", {"customer": c, "job": n, "work_seconds": 1.0})
        for n, c in enumerate(customers)
    ]
    submitted_ms = SystemClock().now_ms() - began_ms
    ids = {run["run_id"]: customers[n] for n, run in enumerate(started)}
    # A limited agent's run starts QUEUED unless a slot is free: not twenty RUNNING at once.
    assert sum(run["status"] == "RUNNING" for run in started) <= LIMIT, started

    most_running = 0
    queued_seen = {run["run_id"] for run in started if run["status"] == "QUEUED"}
    queue_views: list[dict[str, Any]] = []

    def all_ended() -> bool:
        nonlocal most_running
        listing = {r["run_id"]: r for r in runs_of(local, "batch-worker")}
        assert set(ids) <= set(listing), "a started run is missing from the listing"
        statuses = Counter(listing[i]["status"] for i in ids)
        most_running = max(most_running, statuses["RUNNING"])
        assert statuses["RUNNING"] <= LIMIT, statuses
        (flow,) = [a for a in get(local, "/flow")["agents"] if a["agent"] == "batch-worker"]
        assert flow["limit"] == LIMIT and flow["running"] <= LIMIT, flow
        queued = [i for i in ids if listing[i]["status"] == "QUEUED"]
        queued_seen.update(queued)
        if queued and len(queue_views) < 3:
            run = get(local, f"/runs/{queued[0]}")
            if run["status"] == "QUEUED":
                queue_views.append(run)
        return all(listing[i]["status"] in TERMINAL for i in ids)

    wait_until(all_ended, 120, "the twenty batch runs to end")

    results = {i: get(local, f"/runs/{i}") for i in ids}
    assert {i: r["status"] for i, r in results.items()} == dict.fromkeys(ids, "SUCCEEDED")
    assert queued_seen, "no run was ever seen QUEUED"
    for view in queue_views:  # a queued run says where it waits
        assert view["flow"]["queue"]["key"] == ids[view["run_id"]], view["flow"]
        assert view["flow"]["queue"]["waited_ms"] >= 0, view["flow"]

    # What the runs recorded: each half of each run executed inside its slot.
    halves = [(int(b), int(e)) for r in results.values() for b, e in r["result"]["executed"]]
    assert len(halves) == 40
    assert 2 <= peak_overlap(halves) <= LIMIT, halves
    # Fairness: b's six were queued behind a's fourteen, yet the round-robin of keys serves b
    # in turn with a: among the first eight runs to begin, at least two are b's.
    by_start = sorted(ids, key=lambda i: results[i]["result"]["executed"][0][0])
    first_eight = [ids[i] for i in by_start[:8]]
    assert first_eight.count("b") >= 2, first_eight
    print(
        f"batch: 20 started in {submitted_ms} ms, most RUNNING at a poll {most_running}, "
        f"peak overlap {peak_overlap(halves)}, first eight {''.join(first_eight)}"
    )


def test_a_burst_over_requests_per_minute_waits_durably_and_none_fails(
    local: WorkerProcess,
) -> None:
    burst = RPM + 2
    # Fixed one-minute periods: start the burst early in one, so every call falls in it and
    # exactly the ones over the limit must wait for the next.
    second = SystemClock().now_ms() / 1000 % 60
    if second > 40:
        time.sleep(61 - second)
    ids = [start(local, "summarizer", {"text": f"report {n}"})["run_id"] for n in range(burst)]

    waited: set[str] = set()

    def all_ended() -> bool:
        statuses = {}
        for run_id in ids:
            run = get(local, f"/runs/{run_id}")
            statuses[run_id] = run["status"]
            if (
                run["status"] == "SUSPENDED"
                and (run["waiting_on"] or {}).get("kind") == "rate_limit"
            ):
                assert run["waiting_on"]["limiter"] == "model#flow-summarizer", run["waiting_on"]
                waited.add(run_id)
        (rate,) = [
            r for r in get(local, "/flow")["rate_limits"] if r["limiter"] == "model#flow-summarizer"
        ]
        assert rate["requests"] == RPM and rate["used_requests"] <= RPM, rate
        assert "FAILED" not in statuses.values(), statuses
        return all(s in TERMINAL for s in statuses.values())

    wait_until(all_ended, 150, "the summarizer burst to end")

    runs = [get(local, f"/runs/{run_id}") for run_id in ids]
    assert [r["status"] for r in runs] == ["SUCCEEDED"] * burst, runs
    assert len(waited) >= 1, "no run was seen waiting for the rate limit"
    # When each model call was claimed (after the limit let it through): over two periods.
    calls = []
    for run_id in ids:
        events = get(local, f"/runs/{run_id}/history")["events"]
        claims = [e for e in events if e.get("kind") == "llm" and e["event"] == "llm_started"]
        assert len(claims) == 1, events  # asked once: a wait is not a retry
        calls.append(epoch_ms(claims[0]["at"]))
    periods = Counter(at // 60_000 for at in calls)
    assert len(periods) >= 2, periods
    (rate,) = [
        r for r in get(local, "/flow")["rate_limits"] if r["limiter"] == "model#flow-summarizer"
    ]
    assert rate["waits_today"] >= burst - RPM, rate
    print(f"rates: calls per minute {sorted(periods.values())}, seen waiting {len(waited)}")


def test_a_run_tree_over_budget_pauses_then_an_extension_finishes_it(
    local: WorkerProcess,
) -> None:
    root_id = start(local, "research-lead", {"topic": "tides", "helpers": 3})["run_id"]

    def stopped() -> dict[str, dict[str, Any]] | None:
        root = get(local, f"/runs/{root_id}")
        helpers = get(local, f"/runs?parent={root_id}&limit=100")["runs"]
        members = {root_id: root, **{h["run_id"]: h for h in helpers}}
        statuses = [m["status"] for m in members.values()]
        assert not {"FAILED", "SUCCEEDED"} & {root["status"]}, root
        if len(helpers) < 3 or {"RUNNING", "QUEUED"} & set(statuses):
            return None
        return members if "BUDGET_EXCEEDED" in statuses else None

    members = wait_until(stopped, 60, "the research tree to stop on its budget")
    paused = [m for m in members.values() if m["status"] == "BUDGET_EXCEEDED"]
    for member in paused:
        assert member["waiting_on"]["kind"] == "budget", member["waiting_on"]
        assert member["waiting_on"]["root"] == root_id, member["waiting_on"]
    budget = get(local, f"/runs/{root_id}")["flow"]["budget"]
    assert budget["root_run_id"] == root_id
    assert budget["limit"]["tokens"] == BUDGET_TOKENS
    assert budget["exceeded"] is True
    assert budget["used"]["tokens"] >= BUDGET_TOKENS, budget
    assert budget["extensions"] == []
    used_before = budget["used"]["tokens"]

    reason = "the tides report is worth 1000 more tokens"
    status, body = http_json(
        "POST",
        f"{local.base_url}/runs/{root_id}/budget",
        {"add_tokens": 1000, "reason": reason},
    )
    assert status == 200, body
    assert body["budget"]["limit"]["tokens"] == BUDGET_TOKENS + 1000, body
    assert body["budget"]["exceeded"] is False, body

    def tree_succeeded() -> bool:
        root = get(local, f"/runs/{root_id}")
        assert root["status"] not in TERMINAL - {"SUCCEEDED"}, root
        helpers = get(local, f"/runs?parent={root_id}&limit=100")["runs"]
        return root["status"] == "SUCCEEDED" and all(h["status"] == "SUCCEEDED" for h in helpers)

    wait_until(tree_succeeded, 60, "the research tree to succeed after the extension")

    root = get(local, f"/runs/{root_id}")
    assert len(root["result"]["findings"]) == 3
    budget = root["flow"]["budget"]
    # Plan, 3 helpers x 2 calls, combine: each call charged once, whatever paused and resumed.
    assert budget["used"]["calls"] == 8, budget
    assert budget["used"]["tokens"] == 8 * TOKENS_PER_CALL > used_before, budget
    assert budget["exceeded"] is False
    (extension,) = budget["extensions"]
    assert extension["reason"] == reason
    assert extension["add_tokens"] == 1000
    assert extension["by"].startswith("arn:aws:iam::"), extension  # local mode's IAM caller
    assert extension["at_ms"] > 0
    print(f"budget: paused {len(paused)} member(s) at {used_before} tokens")
