"""The CLI as a person runs it, a subprocess against local mode: the same commands as for a
deployed stack (``--api-url`` here is local mode's; ``--stack`` would sign for AWS).

One local stack for the module: a research run is watched until it succeeds, then listed,
shown, its history and timeline read; a support run waits for its refund approval, which the
CLI lists, may not decide (the local IAM caller is no approver: 403 → "not allowed"), cancels,
and watches end CANCELLED (exit 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_agents_local.moto_server import MotoProcess
from durable_agents_local.processes import ServicesProcess, WorkerProcess
from durable_agents_local.services import ServicesHandle
from tests.integration.local_stack import ROOT, workers
from tests.integration.local_workers import start_run
from tests.integration.test_local_approvals import suspended_on_approval

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def worker(moto: MotoProcess, services_process: ServicesProcess) -> Iterator[WorkerProcess]:
    with workers(moto, ServicesHandle(services_process.url)) as start:
        yield start()


def cli(worker: WorkerProcess, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``durable-agents ARGS --api-url <local mode>`` in a subprocess, not on a terminal."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_agents_local.cli.main",
            *args,
            "--api-url",
            worker.base_url,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "80"},
    )


def _fits(text: str) -> None:
    assert all(len(line) <= 80 for line in text.splitlines()), text


def test_a_run_watched_until_it_succeeds_then_read_back(worker: WorkerProcess) -> None:
    # A pause long enough that the watch, started after the run (a CLI process takes seconds
    # to start on a loaded machine), still sees it wait before it succeeds.
    run_id = start_run(worker, {"topic": "cli", "sections": 2, "pause_seconds": 4})
    watched = cli(worker, "runs", "watch", run_id, "--timeout", "50")
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    assert "\r" not in watched.stdout  # not a terminal: one plain line per change
    assert len(lines) >= 3 and all(line.startswith(run_id) for line in lines)
    assert lines[-1].startswith(f"{run_id} SUCCEEDED after ") and "result:" in lines[-1]
    assert any("RUNNING" in line or "SUSPENDED" in line for line in lines[:-1])

    listed = cli(worker, "runs", "list", "--agent", "example-research", "--since", "1h")
    assert listed.returncode == 0, listed.stderr
    _fits(listed.stdout)
    assert any(
        line.startswith(run_id) and "SUCCEEDED" in line for line in listed.stdout.splitlines()
    )
    as_json = cli(worker, "runs", "list", "--status", "succeeded", "--json")
    assert run_id in {r["run_id"] for r in json.loads(as_json.stdout)["runs"]}

    shown = json.loads(cli(worker, "runs", "show", run_id, "--json").stdout)
    assert shown["status"] == "SUCCEEDED" and shown["result"]["topic"] == "cli"
    history = cli(worker, "runs", "history", run_id)
    _fits(history.stdout)
    assert history.stdout.rstrip().splitlines()[-1].split()[1] == "run_succeeded"

    timeline = cli(worker, "runs", "timeline", run_id)
    _fits(timeline.stdout)
    rows = [line.split() for line in timeline.stdout.splitlines()[1:]]
    assert {(row[1], row[2], row[5]) for row in rows} >= {
        ("step", "plan", "SUCCEEDED"),
        ("step", "summarize", "SUCCEEDED"),
    }, timeline.stdout
    ops = json.loads(cli(worker, "runs", "timeline", run_id, "--json").stdout)["operations"]
    assert {op["name"] for op in ops} >= {"plan", "gather", "fetch-1", "cool-down", "summarize"}
    assert all(op["status"] == "SUCCEEDED" for op in ops), ops

    missing = cli(worker, "runs", "show", "run-0000000000000000")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: no such run run-0000000000000000")


def test_an_approval_listed_not_ours_to_decide_and_its_run_cancelled(
    worker: WorkerProcess,
) -> None:
    run_id, approval_id = suspended_on_approval(worker)
    listed = cli(worker, "approvals", "list")
    assert listed.returncode == 0, listed.stderr
    # The approval's id and its run's are never cut (issue 33): with both (48 columns) and the
    # deadline the row is wider than 80; the other columns shrink to their narrowest.
    assert any(
        line.startswith(f"{approval_id}  ") and f"  {run_id}  " in line
        for line in listed.stdout.splitlines()
    ), listed.stdout
    pending = json.loads(cli(worker, "approvals", "list", "--json").stdout)["approvals"]
    assert approval_id in {a["approval_id"] for a in pending}

    decided = cli(worker, "approvals", "decide", approval_id, "approve", "--comment", "ok")
    assert decided.returncode == 1
    assert decided.stderr.startswith("error: not allowed: "), decided.stderr
    assert "Traceback" not in decided.stderr

    cancelled = cli(worker, "runs", "cancel", run_id, "--reason", "withdrawn")
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancel requested" in cancelled.stdout
    watched = cli(worker, "runs", "watch", run_id, "--timeout", "30")
    assert watched.returncode == 1, watched.stderr
    assert watched.stdout.splitlines()[-1].startswith(f"{run_id} CANCELLED")
    assert json.loads(cli(worker, "runs", "show", run_id, "--json").stdout)["status"] == (
        "CANCELLED"
    )


def test_the_cli_works_from_anywhere(worker: WorkerProcess, tmp_path: Path) -> None:
    # Not tied to the project's directory: only the Api's URL matters.
    done = subprocess.run(
        [sys.executable, "-m", "durable_agents_local.cli.main", "--api-url", worker.base_url,
         "reviews",
         "list", "--json"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"reviews": [], "cursor": None}


def test_runs_start_refusals_read_as_a_person_would(worker: WorkerProcess) -> None:
    # Malformed JSON: refused before anything is sent, the parser's line and column, exit 2.
    malformed = cli(worker, "runs", "start", "example-research", '{"topic": }')
    assert malformed.returncode == 2 and "line 1 column 11" in malformed.stderr
    # An input the agent's type refuses: the 422's field errors, one per line.
    refused = cli(worker, "runs", "start", "example-research", '{"sections": "many"}')
    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.splitlines()
    assert lines[0].startswith("error: POST /runs answered 422: input does not match agent")
    assert any(line.startswith("  topic: ") for line in lines[1:]), refused.stderr
    assert any(line.startswith("  sections: ") for line in lines[1:]), refused.stderr
    # A finished run's conflict names its status, not a Python repr (<RunStatus.…: '…'>).
    small = '{"topic": "t", "sections": 1, "pause_seconds": 0}'
    done = cli(worker, "runs", "start", "example-research", small, "--json", "--wait", "50")
    run = json.loads(done.stdout)
    assert run["status"] == "SUCCEEDED", done.stderr
    redrive = cli(worker, "runs", "redrive", run["run_id"])
    assert redrive.returncode == 1
    assert "is SUCCEEDED, expected RUNNING, SUSPENDED or PAUSED" in redrive.stderr
    assert "<RunStatus" not in redrive.stderr
