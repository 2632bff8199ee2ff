"""`make test`'s short form of `make sam-local`: each function once in a Lambda container.

Runs `scripts/sam_local.py --short` as `make sam-local SAM_LOCAL_ARGS=--short` does: the image,
a Docker network of its own, the moto store on its gateway, `sam build`, then one documented
`sam local invoke` per function with its answer checked. Skipped, with the reason, where
Docker's engine does not answer (`.ci/run` brings it up on CI, so it always runs there). The
whole run through start-api/start-lambda is `make sam-local`'s (ADR 0028).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.containers.sessions import left_behind, session_processes, skip_unless_usable

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.slow


@pytest.mark.timeout(1500)
def test_each_function_answers_in_a_lambda_container_against_moto() -> None:
    skip_unless_usable()
    before = left_behind()
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sam_local.py"), "--short"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    checked = [line for line in done.stdout.splitlines() if ": ok in " in line]
    functions = {line.split()[1] for line in checked}
    assert functions == {
        "StepRunnerFunction",
        "ApiFunction",
        "ReconcilerFunction",
        "RelayFunction",
    }, done.stdout
    assert left_behind() == before, "a network or container of the session was left behind"


@pytest.mark.timeout(900)
def test_ctrl_c_in_the_middle_leaves_no_container_network_or_process() -> None:
    skip_unless_usable()
    before = left_behind()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "sam_local.py"), "--short"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if ": ok in " in line:  # one function answered; the next `sam local invoke` is starting
            break
    time.sleep(3)  # inside the second invoke: SAM is starting its container
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole group
    rest, _ = process.communicate(timeout=300)
    output = "".join(seen) + rest
    assert process.returncode == 130, output
    assert "interrupted: everything this started was stopped and removed" in output
    assert left_behind() == before, output
    assert session_processes() == [], output
