"""Part 5 of the demo: flow control (issue 36, ADR 0030) in local mode, over HTTP.

``durable-agents local`` runs the flow-control examples of ``functions/agents/flow.py`` on the
scripted model (``agents:scripts/flow.json``), on its own state directory:

* ``batch-worker`` (``Concurrency(limit=3, key="input.customer")``): nine runs, six of acme
  then three of globex. A compact live view (the runs' statuses and ``GET /flow``'s per-key
  slots) is printed while they run. Checked: never more than three RUNNING in any view (nor
  in the times the runs recorded), all nine SUCCEEDED, globex was not served after all of acme.
* ``research-lead`` (``Budget(tokens=250, on_exceeded="pause")``) and its three
  ``research-helper`` sub-agents: the tree stops with members BUDGET_EXCEEDED; the budget is
  extended over HTTP with a reason (printed as the equivalent curl); the tree succeeds, the
  extension says who and why, and each of the eight model calls was counted exactly once.
* ``summarizer`` (``requests_per_minute=3``): its periods are real minutes, so the whole scene
  (a burst waiting for the next minute, then finishing) takes up to a minute: too slow for
  the demo. Only its first seconds are shown: a burst of five, three calls let through, two
  runs SUSPENDED on a durable timer (``waiting_on.kind == "rate_limit"``), none failed. When
  the burst would straddle a minute boundary that is not what one would see, so the scene is
  skipped then (it says so). ``tests/integration/test_local_flow_control.py`` waits for the
  next minute and checks the rest.
"""

from __future__ import annotations

import json
import shlex
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from durable_agents.core.clock import SystemClock
from durable_agents_local.moto_server import free_port
from durable_agents_local.processes import WorkerProcess, http_json

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 3  # batch-worker's Concurrency.limit (functions/agents/flow.py)
BUDGET_TOKENS = 250  # research-lead's Budget.tokens
TOKENS_PER_CALL = 100  # every research answer of agents:scripts/flow.json
MODEL_CALLS = 1 + 3 * 2 + 1  # plan, three helpers x two calls, combine
RPM = 3  # flow-summarizer's requests_per_minute
BURST = RPM + 2
CUSTOMERS = ["acme"] * 6 + ["globex"] * 3
TIMEOUT = 60.0
ARGS = ["--model-script", "agents:scripts/flow.json", "--stall-after", "1", "--log-level", "ERROR"]
ENDED = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT", "TERMINATED", "PAUSED"}


def _say(text: str) -> None:
    print(f"      {text}", flush=True)


def _get(api: str, path: str) -> Any:
    status, body = http_json("GET", f"{api}{path}")
    if status != 200:
        raise RuntimeError(f"GET {path} answered {status}: {body}")
    return body


def _start(api: str, agent: str, value: Any) -> dict[str, Any]:
    status, body = http_json("POST", f"{api}/runs", {"agent": agent, "input": value})
    if status != 201:
        raise RuntimeError(f"POST /runs ({agent}) answered {status}: {body}")
    return dict(body["run"])


def _until(check: Callable[[], Any], what: str, pause: float = 0.1) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(pause)
    raise RuntimeError(f"timed out after {TIMEOUT} s waiting for {what}")


def _peak_overlap(intervals: list[tuple[int, int]]) -> int:
    """The most intervals open at one instant (an end before a start at the same time)."""
    edges = sorted([(end, -1) for _, end in intervals] + [(begin, 1) for begin, _ in intervals])
    open_now = peak = 0
    for _, change in edges:
        open_now += change
        peak = max(peak, open_now)
    return peak


def _batch(api: str) -> dict[str, bool]:
    """Nine batch-worker runs under a limit of three, shared fairly between two customers."""
    began = time.monotonic()
    started = [
        _start(api, "batch-worker", {"customer": c, "job": n, "work_seconds": 0.4})
        for n, c in enumerate(CUSTOMERS)
    ]
    ids = {run["run_id"]: CUSTOMERS[n] for n, run in enumerate(started)}
    answered = Counter(run["status"] for run in started)
    _say(
        f"POST /runs x9 in {time.monotonic() - began:.2f} s, answered "
        + ", ".join(f"{n} {status}" for status, n in sorted(answered.items()))
        + " (a limited agent's run is written QUEUED, then takes a free slot if there is one)"
    )
    most_running, flow_most, views, last_print = 0, 0, 0, -1.0

    def ended() -> bool:
        nonlocal most_running, flow_most, views, last_print
        listing = {r["run_id"]: r for r in _get(api, "/runs?agent=batch-worker&limit=100")["runs"]}
        counts = Counter(listing[i]["status"] if i in listing else "MISSING" for i in ids)
        (flow,) = [a for a in _get(api, "/flow")["agents"] if a["agent"] == "batch-worker"]
        most_running = max(most_running, counts["RUNNING"])
        flow_most = max(flow_most, flow["running"])
        views += 1
        done = all(listing.get(i, {}).get("status") in ENDED for i in ids)
        now = time.monotonic() - began
        if done or now - last_print >= 0.8:
            last_print = now
            keys = ", ".join(
                f"{k['key']} {k['running']}/{k['queued']}" for k in flow["keys"]
            )  # running/queued per key
            _say(
                f"t+{now:4.1f} s  RUNNING {counts['RUNNING']}  QUEUED {counts['QUEUED']}  "
                f"SUSPENDED {counts['SUSPENDED']}  SUCCEEDED {counts['SUCCEEDED']}  │ GET /flow: "
                f"running {flow['running']}/{flow['limit']}, queued {flow['queued']}"
                + (f"; per key (running/queued) {keys}" if keys else "")
            )
        return done

    _until(ended, "the nine batch runs to end")
    results = {i: _get(api, f"/runs/{i}") for i in ids}
    statuses = Counter(r["status"] for r in results.values())
    halves = [
        (int(b), int(e))
        for r in results.values()
        if r["status"] == "SUCCEEDED"
        for b, e in r["result"]["executed"]
    ]
    order = sorted(
        (i for i in ids if results[i]["status"] == "SUCCEEDED"),
        key=lambda i: results[i]["result"]["executed"][0][0],
    )
    served = "".join(ids[i][0] for i in order)
    first_globex = served.find("g")
    _say(
        f"all ended in {time.monotonic() - began:.1f} s ({views} views); the order the runs "
        f"began in (a = acme, g = globex): {served}"
    )
    _say(
        f"most RUNNING seen: {most_running} in the listing, {flow_most} in GET /flow, "
        f"{_peak_overlap(halves)} at once in the times the runs recorded"
    )
    _say(
        "→ a run over the limit waits QUEUED, holding no compute; a durable wait frees its "
        "slot; the queue round-robins across customers, so globex did not wait for all of acme."
    )
    return {
        f"never more than {LIMIT} RUNNING (listing, GET /flow, the runs' own times)": max(
            most_running, flow_most, _peak_overlap(halves)
        )
        <= LIMIT,
        "all 9 batch runs SUCCEEDED": statuses == Counter({"SUCCEEDED": 9}),
        "fair: globex was not served after all of acme (first-come-first-served would have)": 0
        <= first_globex
        < served.rfind("a"),
    }


def _tree(api: str, root_id: str) -> dict[str, dict[str, Any]]:
    helpers = _get(api, f"/runs?parent={root_id}&limit=100")["runs"]
    return {root_id: _get(api, f"/runs/{root_id}"), **{h["run_id"]: h for h in helpers}}


def _budget(api: str) -> dict[str, bool]:
    """A research-lead tree stops on its token budget; an extension with a reason finishes it."""
    began = time.monotonic()
    root_id = _start(api, "research-lead", {"topic": "tides", "helpers": 3})["run_id"]
    _say(f"POST /runs research-lead → {root_id} (plan, 3 research-helper sub-agents, combine)")

    def stopped() -> dict[str, dict[str, Any]] | None:
        members = _tree(api, root_id)
        statuses = {m["status"] for m in members.values()}
        if "FAILED" in statuses or members[root_id]["status"] in ENDED:
            raise RuntimeError(f"the tree did not stop on its budget: {statuses}")
        if len(members) < 4 or statuses & {"RUNNING", "QUEUED"}:
            return None
        return members if "BUDGET_EXCEEDED" in statuses else None

    members = _until(stopped, "the research tree to stop on its budget")
    paused = [m for m in members.values() if m["status"] == "BUDGET_EXCEEDED"]
    helpers = Counter(m["status"] for i, m in members.items() if i != root_id)
    _say(
        f"the tree stopped after {time.monotonic() - began:.1f} s: the lead "
        f"{members[root_id]['status']} (waiting for its helpers), helpers "
        + ", ".join(f"{n} {status}" for status, n in sorted(helpers.items()))
        + f" (waiting_on.kind {paused[0]['waiting_on']['kind'] if paused else None})"
    )
    budget = _get(api, f"/runs/{root_id}")["flow"]["budget"]
    used_before = budget["used"]["tokens"]
    _say(
        f"GET /runs/{root_id} → flow.budget: used {used_before} / {budget['limit']['tokens']} "
        f"tokens in {budget['used']['calls']} calls, exceeded {budget['exceeded']}"
    )
    reason = "the tides report is worth 1000 more tokens"
    body = {"add_tokens": 1000, "reason": reason}
    print(
        f"\n  curl -sS -X POST {api}/runs/{root_id}/budget \\\n"
        "    -H 'Content-Type: application/json' \\\n"
        f"    -d {shlex.quote(json.dumps(body))}\n",
        flush=True,
    )
    status, answer = http_json("POST", f"{api}/runs/{root_id}/budget", body)
    if status != 200:
        raise RuntimeError(f"POST /runs/{root_id}/budget answered {status}: {answer}")
    _say(
        f"→ {status}: limit now {answer['budget']['limit']['tokens']} tokens, "
        f"exceeded {answer['budget']['exceeded']}; the paused members are woken"
    )

    def succeeded() -> bool:
        statuses = {m["status"] for m in _tree(api, root_id).values()}
        if statuses & (ENDED - {"SUCCEEDED"}):
            raise RuntimeError(f"the tree ended badly: {statuses}")
        return statuses == {"SUCCEEDED"}

    _until(succeeded, "the research tree to succeed after the extension")
    root = _get(api, f"/runs/{root_id}")
    budget = root["flow"]["budget"]
    extensions = budget["extensions"]
    for extension in extensions:
        _say(
            f"extension: +{extension['add_tokens']} tokens by {extension['by']}, "
            f"why: {extension['reason']!r}"
        )
    # Each model call claimed once in the journal, whatever paused and resumed.
    claims = sum(
        1
        for run_id in members
        for e in _get(api, f"/runs/{run_id}/history")["events"]
        if e.get("kind") == "llm" and e["event"] == "llm_started"
    )
    _say(
        f"the tree SUCCEEDED {time.monotonic() - began:.1f} s after it started; the budget "
        f"counted {budget['used']['calls']} calls, {budget['used']['tokens']} tokens; the "
        f"journal holds {claims} model calls"
    )
    _say(
        "→ the budget covers the run and every sub-agent; when spent, the next model call of any "
        "member pauses its run (no compute held) until someone extends it, with a reason."
    )
    return {
        f"the tree stopped with {len(paused)} member(s) BUDGET_EXCEEDED at {used_before} >= "
        f"{BUDGET_TOKENS} tokens": bool(paused)
        and all(m["waiting_on"]["kind"] == "budget" for m in paused)
        and used_before >= BUDGET_TOKENS,
        "after the extension the whole tree SUCCEEDED": root["status"] == "SUCCEEDED",
        "the extension says who and why": len(extensions) == 1
        and extensions[0]["reason"] == reason
        and bool(extensions[0]["by"]),
        f"each of the {MODEL_CALLS} model calls counted exactly once (budget and journal)": (
            budget["used"]["calls"],
            budget["used"]["tokens"],
            claims,
        )
        == (MODEL_CALLS, MODEL_CALLS * TOKENS_PER_CALL, MODEL_CALLS),
    }


def _rate_limit(api: str) -> dict[str, bool]:
    """A burst over requests_per_minute: the first seconds only (see the module's docstring)."""
    second = SystemClock().now_ms() / 1000 % 60
    if second > 52:  # the burst would straddle a minute: what is seen would not be the point
        _say(
            f"skipped: the minute is at {second:.0f} s, a burst now would straddle two minutes "
            "(tests/integration/test_local_flow_control.py shows the whole scene)"
        )
        return {}
    began = time.monotonic()
    ids = [_start(api, "summarizer", {"text": f"report {n}"})["run_id"] for n in range(BURST)]

    def settled() -> dict[str, dict[str, Any]] | None:
        runs = {i: _get(api, f"/runs/{i}") for i in ids}
        statuses = Counter(r["status"] for r in runs.values())
        waiting = [
            r for r in runs.values() if (r.get("waiting_on") or {}).get("kind") == "rate_limit"
        ]
        return runs if statuses["SUCCEEDED"] + len(waiting) == BURST else None

    runs = _until(settled, "the burst to be served or to wait")
    waiting = [r for r in runs.values() if (r.get("waiting_on") or {}).get("kind") == "rate_limit"]
    (rate,) = [
        r for r in _get(api, "/flow")["rate_limits"] if r["limiter"] == "model#flow-summarizer"
    ]
    statuses = Counter(r["status"] for r in runs.values())
    wait = waiting[0]["waiting_on"] if waiting else {}
    _say(
        f"POST /runs summarizer x{BURST}: after {time.monotonic() - began:.1f} s "
        f"{statuses['SUCCEEDED']} SUCCEEDED, {len(waiting)} SUSPENDED waiting on "
        f"{wait.get('kind')} {wait.get('limiter')}; GET /flow: {rate['used_requests']}/"
        f"{rate['requests']} requests this minute, {rate['waits_today']} wait(s) today"
    )
    next_minute = 60 - SystemClock().now_ms() / 1000 % 60
    _say(
        "→ a call over the limit records nothing and fails nothing: its run sleeps on a durable "
        f"timer until the next minute (in about {next_minute:.0f} s; the demo does not wait)."
    )
    return {
        f"the burst of {BURST}: {RPM} calls let through, {BURST - RPM} runs waiting durably, "
        "none failed": statuses["SUCCEEDED"] == RPM
        and len(waiting) == BURST - RPM
        and rate["used_requests"] == RPM,
    }


def part_five(
    state_dir: Path, *, banner: Callable[[str, str], None], on_line: Callable[[str], None]
) -> bool:
    """Runs part 5 and prints its checks; True if they all hold."""
    print("\n" + "─" * 88)
    print("Part 5 of 5: flow control. A concurrency limit shared fairly between customers, a")
    print("token budget over a run and its sub-agents that pauses the tree until a person extends")
    print("it, and a model's requests per minute. Nothing waits inside an invocation: a run that")
    print("must wait is QUEUED or suspended, holding no compute (docs/flow-control.md).")
    quiet = (" StepRunnerFunction batch-worker ", " ReconcilerFunction ", " POST /runs -> 201 ")

    def show(line: str) -> None:
        # The batch's forty-odd invocations would drown the live view; the demo says the rest.
        if not any(noise in line for noise in quiet):
            on_line(line)

    worker = WorkerProcess(
        api_port=free_port(),
        moto_endpoint=None,
        args=[
            "--state-dir",
            str(state_dir / "flow-state"),
            "--moto-port",
            str(free_port()),
            *ARGS,
        ],
        cwd=ROOT,
        env={"AGENT_MODULES": "agents.flow"},  # the environment wins over template.yaml's list
        on_line=show,
    )
    checks: dict[str, bool] = {}
    try:
        banner("1/4", "AGENT_MODULES=agents.flow durable-agents local --model-script …/flow.json")
        worker.start()
        api = worker.base_url
        _say(f"api {api}: batch-worker, summarizer, research-lead, research-helper")
        banner("2/4", 'batch-worker, Concurrency(limit=3, key="input.customer"): 6 acme, 3 globex')
        checks.update(_batch(api))
        banner("3/4", 'research-lead, Budget(tokens=250, on_exceeded="pause"), 3 sub-agents')
        checks.update(_budget(api))
        banner("4/4", "summarizer, requests_per_minute=3: a burst of 5 (its first seconds)")
        checks.update(_rate_limit(api))
    finally:
        worker.stop()
    for text, ok in checks.items():
        print(f"  {'✓' if ok else '✗'} {text}")
    return all(checks.values())
