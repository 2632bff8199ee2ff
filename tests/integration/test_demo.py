"""``make demo``, the README's first command, passes every check of its five parts.

It runs the script as a user does (its own processes: the moto server, the workers, the fake
providers), so a change anywhere that breaks what the demo shows fails the build here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(420)
def test_the_demo_passes_every_check() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "scripts/demo.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    failed = [line for line in done.stdout.splitlines() if "✗" in line or "FAILED" in line]
    assert done.returncode == 0, "\n".join([*failed, done.stderr[-2000:]])
    assert "demo passed" in done.stdout
