"""Records ``durable-agents runs watch`` on a terminal into ``docs/runs-watch.txt``.

Starts local mode (its own ephemeral moto server), starts a research run, and runs the watch
command on a pseudo-terminal, as a person would see it. The terminal rewrites one line in
place (a carriage return before each frame); the transcript lists every frame with the time
it was drawn, then the screen as it was left. Run: ``python scripts/record_runs_watch.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from durable_agents_local.moto_server import free_port
from durable_agents_local.processes import WorkerProcess, http_json

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "runs-watch.txt"
RUN_INPUT = {"topic": "durable agents", "sections": 3, "pause_seconds": 2}


def _record(command: list[str]) -> tuple[list[tuple[float, str]], str, int]:
    """Runs ``command`` on an 80x24 pseudo-terminal.

    Returns:
        Its frames (time, text), the screen it left, and its exit status.
    """
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "80", "LINES": "24", "TERM": "xterm"}
    started = time.monotonic()
    process = subprocess.Popen(
        command, stdin=follower, stdout=follower, stderr=follower, env=env, cwd=ROOT
    )
    os.close(follower)
    raw: list[tuple[float, bytes]] = []
    while True:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the follower closed: the command ended
                break
            if not chunk:
                break
            raw.append((time.monotonic() - started, chunk))
        elif process.poll() is not None:
            break
    os.close(leader)
    frames: list[tuple[float, str]] = []
    for at, chunk in raw:
        for piece in chunk.decode("utf-8", "replace").replace("\r\n", "\n").split("\r"):
            frames += [(at, line.rstrip()) for line in piece.split("\n") if line.strip()]
    # What a terminal shows: of each line, what the last carriage return left.
    text = b"".join(chunk for _, chunk in raw).decode("utf-8", "replace").replace("\r\n", "\n")
    screen = "\n".join(line.rsplit("\r", 1)[-1].rstrip() for line in text.rstrip().split("\n"))
    return frames, screen, process.wait()


def _transcript(command: str, frames: list[tuple[float, str]], screen: str, code: int) -> str:
    lines = [
        "# `durable-agents runs watch` on an 80-column terminal, recorded by",
        "# scripts/record_runs_watch.py against local mode. Each frame below was drawn over the",
        "# one before it (a carriage return, no new line); [+s] is when.",
        "",
        f"$ {command}",
    ]
    lines += [f"[+{at:5.1f}s] {text}" for at, text in frames]
    lines += ["", "# The screen when it returned:", f"$ {command}", screen, "$ echo $?", str(code)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Records the transcript; returns the watch command's exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    worker = WorkerProcess(
        api_port=free_port(),
        moto_endpoint=None,
        args=["--moto-port", str(free_port()), "--ephemeral", "--log-level", "ERROR"],
        cwd=ROOT,
        env={"EXAMPLE_WORK_SECONDS": "0.7"},
    )
    worker.start()
    try:
        status, body = http_json(
            "POST", f"{worker.base_url}/runs", {"agent": "example-research", "input": RUN_INPUT}
        )
        if status != 201:
            print(f"error: POST /runs answered {status}: {json.dumps(body)}", file=sys.stderr)
            return 1
        run_id = body["run"]["run_id"]
        command = [sys.executable, "-m", "durable_agents_local.cli.main", "runs", "watch", run_id]
        frames, screen, code = _record([*command, "--api-url", worker.base_url])
    finally:
        worker.stop()
    watched = f"durable-agents runs watch {run_id}"
    args.out.write_text(_transcript(watched, frames, screen, code))
    print(f"wrote {args.out} ({len(frames)} frames, exit status {code})")
    return code


if __name__ == "__main__":
    sys.exit(main())
