"""`make sam-local` whole, in the fault suite: Lambda containers, duplicate deliveries, approval.

The run of the support agent goes POST /runs through SAM's API Gateway emulation, its steps
through `sam local start-lambda` (warm containers), a `Step Ready` duplicated while it waits for
the approval and again after the decision, the decision through a signed link; it must end
SUCCEEDED with exactly one refund payout, and leave no container, network or process
(`scripts/sam_local.py` checks all of it; ADR 0028). Docker's engine is required: skipped
without it, as `make reliability` runs on machines that may have none.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.containers.sessions import left_behind, session_processes, skip_unless_usable

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.reliability, pytest.mark.reliability_full, pytest.mark.slow]


@pytest.mark.timeout(1800)
def test_a_whole_run_through_sams_emulators_pays_once_and_leaves_nothing() -> None:
    skip_unless_usable()
    before = left_behind()
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sam_local.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1700,
        check=False,
    )
    output = done.stdout[-6000:] + done.stderr[-6000:]
    assert done.returncode == 0, output
    assert "SUCCEEDED; one refund payout" in done.stdout, output
    assert left_behind() == before, output
    assert session_processes() == [], output
