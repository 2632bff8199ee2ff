"""What the tests of `sam local` share: whether Docker is usable, and what a session leaves.

A session (`scripts/sam_local.py`) creates a network labelled ``NETWORK_LABEL``, containers of
the built image on it, the moto store and the services bound to its gateway, and SAM's servers;
these list what of it is still there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from sam_image import engine_answers, image_exists, image_name  # noqa: E402
from sam_local import NETWORK_LABEL  # noqa: E402

SAM = ROOT / ".venv-sam" / "bin" / "sam"


def on_ci_as_root() -> bool:
    # .ci/run makes Docker usable there: a skip on CI would hide a broken `sam local`.
    return bool(os.environ.get("CI")) and hasattr(os, "geteuid") and os.geteuid() == 0


def why_not_usable() -> str | None:
    if not SAM.exists():
        return "no .venv-sam (make venv-sam)"
    if not engine_answers():
        return "Docker's engine does not answer (`make sam-image` brings it up where run as root)"
    if not image_exists(image_name()) and not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return "no Lambda image and not root to build it (`sudo make sam-image`)"
    return None


def skip_unless_usable() -> None:
    """Skips the test (fails it on CI as root, where .ci/run makes Docker usable) unless usable."""
    reason = why_not_usable()
    if reason is not None:
        if on_ci_as_root():
            pytest.fail(f"CI makes Docker usable for this test (.ci/run), yet: {reason}")
        pytest.skip(reason)


def left_behind() -> tuple[list[str], list[str]]:
    """The sessions' networks and the containers of the built image that exist now."""
    label = f"label={NETWORK_LABEL}"
    networks = subprocess.run(
        ["docker", "network", "ls", "-q", "--filter", label],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    containers = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "ancestor=" + image_name()],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return networks, containers


def session_processes() -> list[str]:
    """The processes a session starts that are running now (``ps`` lines)."""
    listed = subprocess.run(["ps", "-eo", "pid,args"], check=True, capture_output=True, text=True)
    return [
        line
        for line in listed.stdout.splitlines()
        if ("durable_agents_local.moto_server --host" in line)
        or ("durable_agents_local.services --host" in line)
        or ("sam local" in line and "durable-agents-sam-" in line)
    ]
