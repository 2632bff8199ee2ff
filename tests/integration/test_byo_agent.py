"""Bringing your own agent to local mode: a bad module stops the start, loudly and at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from durable_agents_local.moto_server import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_local_start_fails_before_ready_on_a_bad_agent_module() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_agents_local.cli.main",
            "local",
            "--agents",
            "agents.example,agents.no_such_agents",
            "--port",
            str(free_port()),
            "--moto-port",
            str(free_port()),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "ready" not in done.stderr
    assert "cannot import agent module 'agents.no_such_agents' (from --agents)" in done.stderr
    assert "ModuleNotFoundError: No module named 'agents.no_such_agents'" in done.stderr
