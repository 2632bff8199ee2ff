"""Local-mode throughput: runs per minute of ``durable-agents local``, ephemeral against durable.

Run ``python scripts/bench_local.py`` (``make bench-local``). Each round starts
``durable-agents local`` with its own store, ``--ephemeral`` (the journal in moto's memory)
or on a fresh ``--state-dir`` (every accepted write fsync'ed to the write-ahead log before it
is acknowledged), waits for two warm-up runs, then starts ``--runs`` runs of
``example-research`` at once (3 sections, no pause, no simulated work: 6 steps, a child
context and a timer each; the local Api, StepRunner, reconciler and relay all at work) and
measures the time until all of them SUCCEEDED. Rounds alternate between the modes so that
both see the same background load.

Each round also measures the store alone: ``--writes`` sequential conditional ``PutItem``s
from one client, ephemeral against durable (the fsync per acknowledged write, isolated).

Options: ``--runs N`` (default 30), ``--rounds N`` per mode (default 2), ``--writes N``
(default 500), ``--markdown PATH`` (replace the text between ``<!-- bench:local:start -->``
and ``<!-- bench:local:end -->``).

``--concurrency 1,10,50`` measures instead, on one durable worker per round, runs/minute with
that many runs started at once (one level after the other, in an order that rotates each
round), and each step's latency from the run's history (``GET /runs/{id}/history``): from
the record before it in program order (the previous operation's result, or the run's start)
to the step's result — the Step Ready delivery, the StepRunner's journal read, the claim, the
step and its commit — and, inside that, from the step's claim to its result. Percentiles
p50/p95/p99 over every step of every run of the level. ``--markdown`` then fills
``<!-- bench:concurrency:start -->`` / ``<!-- bench:concurrency:end -->``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "layers" / "runtime"))

import boto3  # noqa: E402
from bench_markers import write_section  # noqa: E402

from durable_agents_local.moto_server import MotoProcess, free_port  # noqa: E402
from durable_agents_local.processes import WorkerProcess, http_json  # noqa: E402

AGENT = "example-research"
START, END = "<!-- bench:local:start -->", "<!-- bench:local:end -->"
C_START, C_END = "<!-- bench:concurrency:start -->", "<!-- bench:concurrency:end -->"
# The moto store (``--store moto``): what these figures were measured on, and what the fsync
# comparison is about; the default embedded store is measured by scripts/bench_loop.py.
WORKER_ARGS = ["--store", "moto", "--quiet", "--log-level", "ERROR", "--schedule-interval", "1"]


def _start_runs(worker: WorkerProcess, count: int, tag: str) -> set[str]:
    ids = set()
    for index in range(count):
        body = {"agent": AGENT, "input": {"topic": f"{tag}-{index}", "pause_seconds": 0}}
        status, started = http_json("POST", f"{worker.base_url}/runs", body)
        if status != 201:
            raise RuntimeError(f"POST /runs answered {status}: {started}")
        ids.add(str(started["run"]["run_id"]))
    return ids


def _succeeded(worker: WorkerProcess) -> set[str]:
    done: set[str] = set()
    cursor = ""
    while True:
        query = f"/runs?status=SUCCEEDED&limit=100{'&cursor=' + cursor if cursor else ''}"
        status, page = http_json("GET", worker.base_url + query, timeout=30)
        if status != 200:
            raise RuntimeError(f"GET /runs answered {status}: {page}")
        done.update(r["run_id"] for r in page["runs"])
        cursor = page.get("cursor") or ""
        if not cursor:
            return done


def _wait(worker: WorkerProcess, ids: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ids <= _succeeded(worker):
        if time.monotonic() > deadline:
            raise RuntimeError(f"runs unfinished after {timeout} s")
        time.sleep(0.5)


def one_round(mode: str, runs: int) -> float:
    """Runs per minute of one round of ``mode`` (``ephemeral`` or ``durable``)."""
    with tempfile.TemporaryDirectory(prefix="bench-local-") as tmp:
        store = ["--ephemeral"] if mode == "ephemeral" else ["--state-dir", f"{tmp}/state"]
        worker = WorkerProcess(
            api_port=free_port(),
            moto_endpoint=None,
            args=[*WORKER_ARGS, "--moto-port", str(free_port()), *store],
            cwd=ROOT,
            env={"EXAMPLE_WORK_SECONDS": "0"},
        )
        worker.start()
        try:
            _wait(worker, _start_runs(worker, 2, "warm-up"), 120)
            began = time.monotonic()
            _wait(worker, _start_runs(worker, runs, mode), 600)
            elapsed = time.monotonic() - began
        finally:
            worker.stop()
    return runs / elapsed * 60


def store_writes(mode: str, writes: int) -> float:
    """Sequential conditional PutItems per second against the store alone (``mode``)."""
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        store = MotoProcess(free_port(), None if mode == "ephemeral" else Path(tmp))
        store.start()
        try:
            client = boto3.client(
                "dynamodb",
                endpoint_url=store.endpoint,
                region_name="us-east-1",
                aws_access_key_id=store.store_key,  # the store answers only its session key
                aws_secret_access_key="bench",
            )
            client.create_table(
                TableName="bench",
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                BillingMode="PAY_PER_REQUEST",
            )
            began = time.monotonic()
            for index in range(writes):
                client.put_item(
                    TableName="bench",
                    Item={"pk": {"S": f"item-{index}"}, "value": {"S": "x" * 300}},
                    ConditionExpression="attribute_not_exists(pk)",
                )
            return writes / (time.monotonic() - began)
        finally:
            store.stop()


def _markdown(
    results: dict[str, list[float]], runs: int, writes: dict[str, list[float]], count: int
) -> str:
    rows = [
        "| store | rounds (runs/minute) | median runs/minute |",
        "|---|---|---|",
    ]
    for mode, values in results.items():
        cells = ", ".join(f"{v:.0f}" for v in values)
        rows.append(f"| {mode} | {cells} | {statistics.median(values):.0f} |")
    ephemeral, durable = (statistics.median(results[m]) for m in ("ephemeral", "durable"))
    store_rows = ["| store | rounds (writes/s) | median writes/s |", "|---|---|---|"]
    for mode, values in writes.items():
        cells = ", ".join(f"{v:.0f}" for v in values)
        store_rows.append(f"| {mode} | {cells} | {statistics.median(values):.0f} |")
    slow, fast = (statistics.median(writes[m]) for m in ("durable", "ephemeral"))
    return "\n".join(
        [
            f"{runs} `{AGENT}` runs started at once, until all SUCCEEDED; "
            f"python {platform.python_version()}, {os.cpu_count()} CPUs, "
            f"{platform.platform()}.",
            "",
            *rows,
            "",
            f"Durable / ephemeral: {durable / ephemeral:.0%} of the ephemeral throughput.",
            "",
            f"The store alone, {count} sequential conditional `PutItem`s (300-byte items) from "
            "one client, each acknowledged only once it is in the log (fdatasync):",
            "",
            *store_rows,
            "",
            f"Durable / ephemeral: {slow / fast:.0%} of the ephemeral write rate.",
        ]
    )


def _at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["at"])).timestamp() * 1000


def step_latencies(worker: WorkerProcess, run_id: str) -> tuple[list[float], list[float]]:
    """(interval, claim-to-result) in ms of each step of a run, from its history."""
    status, body = http_json("GET", f"{worker.base_url}/runs/{run_id}/history", timeout=30)
    if status != 200:
        raise RuntimeError(f"GET /runs/{run_id}/history answered {status}: {body}")
    events = [e for e in body["events"] if e.get("at")]
    intervals, executions = [], []
    claimed: dict[str, tuple[float, float]] = {}  # op id -> (claim, the record before it)
    for before, event in itertools.pairwise(events):
        if event["event"] == "step_started":
            claimed[event["op_id"]] = (_at(event), _at(before))
        if event["event"] == "step_succeeded":
            claim, previous = claimed.get(event["op_id"], (_at(before), _at(before)))
            intervals.append(_at(event) - previous)
            executions.append(_at(event) - claim)
    return intervals, executions


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def concurrency_round(levels: list[int], tag: str) -> dict[int, dict[str, Any]]:
    """Runs/minute and step latencies at each level, on one durable worker."""
    out: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-local-") as tmp:
        worker = WorkerProcess(
            api_port=free_port(),
            moto_endpoint=None,
            args=[*WORKER_ARGS, "--moto-port", str(free_port()), "--state-dir", f"{tmp}/state"],
            cwd=ROOT,
            env={"EXAMPLE_WORK_SECONDS": "0"},
        )
        worker.start()
        try:
            _wait(worker, _start_runs(worker, 2, "warm-up"), 120)
            for level in levels:
                began = time.monotonic()
                ids = _start_runs(worker, level, f"{tag}-{level}")
                _wait(worker, ids, 900)
                elapsed = time.monotonic() - began
                intervals: list[float] = []
                executions: list[float] = []
                for run_id in ids:
                    i, e = step_latencies(worker, run_id)
                    intervals += i
                    executions += e
                out[level] = {
                    "rate": level / elapsed * 60,
                    "intervals": intervals,
                    "executions": executions,
                }
                p50, p99 = (percentile(intervals, q) for q in (0.5, 0.99))
                rate = level / elapsed * 60
                print(f"{level} at once: {rate:.1f} runs/min, step p50 {p50:.0f} p99 {p99:.0f} ms")
        finally:
            worker.stop()
    return out


def concurrency_markdown(rounds: list[dict[int, dict[str, Any]]], levels: list[int]) -> str:
    """The concurrency table: runs/minute and step latency percentiles per level."""
    rows = [
        "| runs at once | rounds (runs/minute) | median runs/minute | steps | step interval "
        "p50 / p95 / p99 (ms) | claim to result p50 / p95 / p99 (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for level in levels:
        rates = [r[level]["rate"] for r in rounds]
        intervals = [v for r in rounds for v in r[level]["intervals"]]
        executions = [v for r in rounds for v in r[level]["executions"]]
        ps = " / ".join(f"{percentile(intervals, q):.0f}" for q in (0.5, 0.95, 0.99))
        pe = " / ".join(f"{percentile(executions, q):.0f}" for q in (0.5, 0.95, 0.99))
        cells = ", ".join(f"{v:.0f}" for v in rates)
        rows.append(
            f"| {level} | {cells} | {statistics.median(rates):.0f} | {len(intervals)} | {ps} | "
            f"{pe} |"
        )
    return "\n".join(
        [
            f"`{AGENT}` runs started at once on one durable local worker per round "
            f"({len(rounds)} rounds, levels in rotating order); python "
            f"{platform.python_version()}, {os.cpu_count()} CPUs, {platform.platform()}.",
            "",
            *rows,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--concurrency", help="levels, e.g. 1,10,50 (see the docstring)")
    args = parser.parse_args(argv)
    if args.concurrency:
        levels = [int(n) for n in args.concurrency.split(",")]
        rounds = []
        for index in range(args.rounds):
            order = levels[index % len(levels) :] + levels[: index % len(levels)]
            rounds.append(concurrency_round(order, f"round{index}"))
        text = concurrency_markdown(rounds, levels)
        print(text)
        if args.markdown:
            write_section(args.markdown, C_START, C_END, text)
        return 0
    results: dict[str, list[float]] = {"ephemeral": [], "durable": []}
    writes: dict[str, list[float]] = {"ephemeral": [], "durable": []}
    for _ in range(args.rounds):
        for mode in results:
            rate = store_writes(mode, args.writes)
            writes[mode].append(rate)
            print(f"{mode:9} {rate:7.1f} writes/s (store alone)", flush=True)
        for mode in results:
            rate = one_round(mode, args.runs)
            results[mode].append(rate)
            print(f"{mode:9} {rate:7.1f} runs/minute", flush=True)
    text = _markdown(results, args.runs, writes, args.writes)
    print(text)
    if args.markdown:
        write_section(args.markdown, START, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
