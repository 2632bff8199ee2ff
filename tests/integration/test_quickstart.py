"""The README's quickstart runs as written: five commands, from an empty directory.

The commands between ``<!-- quickstart:begin -->`` and ``<!-- quickstart:end -->`` are run in
a temporary directory with the virtualenv's ``bin`` first on ``PATH`` (an active virtualenv);
only the ports are changed, to free ones, so the test never collides with a local mode
someone is running on 3000/5010.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from durable_agents_local.moto_server import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- quickstart:begin -->\n```bash\n(.*?)```\n<!-- quickstart:end -->", re.S)


def quickstart() -> str:
    found = BLOCK.search(README.read_text())
    assert found, "README.md has no quickstart block between the markers"
    return found.group(1)


def commands(script: str) -> list[str]:
    """The script's commands: its lines outside heredoc bodies."""
    out: list[str] = []
    until: str | None = None
    for line in script.splitlines():
        if until is not None:
            until = None if line.strip() == until else until
            continue
        if line.strip():
            out.append(line)
            heredoc = re.search(r"<<'?(\w+)'?", line)
            until = heredoc.group(1) if heredoc else None
    return out


def test_the_quickstart_has_at_most_five_commands() -> None:
    assert len(commands(quickstart())) <= 5, commands(quickstart())


def test_the_quickstart_runs(tmp_path: Path) -> None:
    api, moto = free_port(), free_port()
    script = quickstart()
    for command, flags in (
        ("durable-agents local ", f"--port {api} --moto-port {moto} "),
        ("durable-agents runs start ", f"--api http://127.0.0.1:{api} "),
    ):
        assert command in script
        script = script.replace(command, command + flags, 1)
    # Whatever happens, the background local mode is stopped (SIGTERM: it stops its moto).
    preamble = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", preamble + script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    report = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, report
    assert 'SUCCEEDED result: "Hello, Ada!"' in done.stdout, report
    assert "1 passed" in done.stdout, report
    assert re.search(r"agents\s+greeter 1 \(from --agents: greeter\)", done.stderr), report
    assert "ready (Ctrl-C stops)" in done.stderr, report
    # A quiet terminal: the console's URL in the banner, the routes summed up (the OpenAPI
    # document has them), no metrics JSON (EMF) and no Powertools warnings.
    assert f"console   http://127.0.0.1:{api}/console" in done.stderr, report
    assert re.search(r"api\s+http://127\.0\.0\.1:\d+  \d+ routes", done.stderr), report
    assert '"_aws"' not in done.stderr and "Warning" not in done.stderr, report
    assert max(len(line) for line in done.stderr.splitlines()) <= 200, report
    # One line per step at a glance: the agent, the run, the operation executed, the outcome.
    step = r"StepRunnerFunction\s+greeter run-\S+ greet:1 -> (continue|succeeded) \(\d+\.\d\ds\)"
    assert re.search(step, done.stderr), report
