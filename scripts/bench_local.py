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
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "layers" / "runtime"))

import boto3  # noqa: E402

from durable_agents.local.moto_server import MotoProcess, free_port  # noqa: E402
from durable_agents.local.processes import WorkerProcess, http_json  # noqa: E402

AGENT = "example-research"
START, END = "<!-- bench:local:start -->", "<!-- bench:local:end -->"
WORKER_ARGS = ["--quiet", "--log-level", "ERROR", "--schedule-interval", "1"]


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
                aws_access_key_id="bench",
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


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
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
        doc = args.markdown.read_text()
        head, _, rest = doc.partition(START)
        _, _, tail = rest.partition(END)
        args.markdown.write_text(f"{head}{START}\n{text}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
