"""Local mode's terminal reads at a glance (issue 33): what an agent says, what each step did.

A real ``durable-agents local`` (its own moto) runs an agent that logs through ``ctx.logger``
between its steps, and one that fails. At the default ``--log-level WARNING``:

* the agent's INFO line shows once, readable, although later invocations replay the code that
  wrote it;
* each StepRunner line names the agent, the run, the operation executed and the outcome, and a
  failed run's line its error, on one line;
* no JSON line (the handlers' Powertools logs, the runtime's own INFO lines) is printed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from durable_agents_local.moto_server import free_port
from durable_agents_local.processes import http_json

ROOT = Path(__file__).resolve().parents[2]
AGENTS = """
from durable_agents import DurableContext, agent


@agent(name="chatty", version="1")
def chatty(ctx: DurableContext, name: str) -> str:
    ctx.logger.info("checking %s", name, source="test")
    loud = ctx.step(lambda: name.upper(), name="shout")
    ctx.logger.info("shouted %s", loud)
    return ctx.step(lambda: loud + "!", name="bang")


@agent(name="grumpy", version="1")
def grumpy(ctx: DurableContext, name: str) -> str:
    raise ValueError(f"no\\nway, {name}")
"""


def _wait_for(path: Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = path.read_text()
        if text in found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path.name} within {timeout} s:\n{path.read_text()}")


def _finish(base: str, agent: str, wanted: str) -> str:
    status, body = http_json("POST", f"{base}/runs", {"agent": agent, "input": "ada"})
    assert status == 201, body
    run_id = str(body["run"]["run_id"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, run = http_json("GET", f"{base}/runs/{run_id}")
        if status == 200 and run["status"] == wanted:
            return run_id
        time.sleep(0.2)
    raise AssertionError(f"{run_id} not {wanted} within 60 s: {run}")


def test_the_terminal_shows_the_agents_lines_and_one_line_per_step(tmp_path: Path) -> None:
    (tmp_path / "chatty_agents.py").write_text(AGENTS)
    api = free_port()
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("AGENT_MODULES", "AGENT_LOG_LEVEL")},
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "durable_agents_local.cli.main",
        "local",
        "--agents",
        "chatty_agents",
        "--port",
        str(api),
        "--moto-port",
        str(free_port()),
        "--ephemeral",
    ]
    with out.open("w") as stdout, err.open("w") as stderr:
        worker = subprocess.Popen(
            command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr
        )
        try:
            _wait_for(err, "ready (Ctrl-C stops)", 90)
            base = f"http://127.0.0.1:{api}"
            chatty = _finish(base, "chatty", "SUCCEEDED")
            grumpy = _finish(base, "grumpy", "FAILED")
            _wait_for(err, f"grumpy {grumpy} -> failed", 10)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
    log, printed = err.read_text(), out.read_text()
    report = f"stderr:\n{log}\nstdout:\n{printed}"
    stamp = r"\d\d:\d\d:\d\d\.\d{3}"
    # The agent's lines: once each, though the invocations after the first replay them.
    checking = re.findall(
        rf"^{stamp} agent chatty {chatty} \S+: checking ada source=test$", log, re.M
    )
    assert len(checking) == 1, report
    assert len(re.findall(rf"agent chatty {chatty} \S+: shouted ADA$", log, re.M)) == 1, report
    # One line per StepRunner invocation: agent, run, what it executed, outcome, duration.
    steps = re.findall(rf"^{stamp} StepRunnerFunction\s+chatty {chatty} (.*)$", log, re.M)
    assert any(re.fullmatch(r"shout:1 -> continue \(\d+\.\d\ds\)", s) for s in steps), report
    assert any(re.fullmatch(r"bang:2 -> succeeded \(\d+\.\d\ds\)", s) for s in steps), report
    # A failed run: its error's type and message, the newline escaped, on one line.
    assert re.search(
        rf"StepRunnerFunction\s+grumpy {grumpy} -> failed: ValueError: no\\nway, ada \(", log
    ), report
    # Quiet by default: no JSON line (no Powertools logs, no runtime INFO chatter).
    assert not [line for line in (log + printed).splitlines() if line.lstrip().startswith("{")], (
        report
    )
    assert "invocation finished" not in log + printed, report
    # Two agents one after the other: no Powertools warning about the "agent" dimension.
    assert "Warning" not in log, report
