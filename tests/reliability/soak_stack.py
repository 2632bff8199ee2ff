"""Pieces of the local-mode SIGKILL soak (``test_soak.py``): its template, a worker that owns
its process group, and what the worker logs when ``--crash-at`` fires."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

from durable_agents_local.processes import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]
SOAK_MODULE = "tests.reliability.soak_agent"

# ``python -c`` trampoline: become the leader of a new session (so of a new process group),
# then exec the worker in place (same pid). Killing that group is killing everything the
# worker is, as a host dying would, without touching the test's own process group.
_SETSID_EXEC = "import os, sys; os.setsid(); os.execv(sys.argv[1], sys.argv[1:])"

# ``local/crash.py`` logs this line just before it SIGKILLs its own process.
CRASH_LINE = re.compile(r"--crash-at (\S+): SIGKILL to myself \(pid \d+\) at (\w+) of (\S+)")

SUMMARY: list[str] = []
"""The soak's one-line report, printed at the end of the session by the suite's conftest."""


def soak_template(directory: Path) -> Path:
    """Writes the project's ``template.yaml`` with the soak's agent module registered.

    The copy lives in ``directory``, so its relative ``CodeUri``/``ContentUri`` become
    absolute paths into the project.

    Returns:
        The path of the copy.

    Raises:
        AssertionError: If the template no longer has the lines this rewrites.
    """
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    modules = re.search(r"^(\s+AGENT_MODULES: )(\S+)$", text, flags=re.MULTILINE)
    assert modules is not None, "template.yaml has no AGENT_MODULES line"
    text = text.replace(modules.group(0), f"{modules.group(1)}{modules.group(2)},{SOAK_MODULE}")
    for key in ("CodeUri", "ContentUri"):
        text, count = re.subn(
            rf"^(\s+{key}: )(?!/)(\S+)$",
            lambda m: f"{m.group(1)}{(ROOT / m.group(2)).as_posix()}",
            text,
            flags=re.MULTILINE,
        )
        assert count, f"template.yaml has no relative {key}"
    path = directory / "template.yaml"
    path.write_text(text, encoding="utf-8")
    return path


class GroupWorker(WorkerProcess):
    """A ``durable-agents local`` worker in its own process group, killed as a group."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._command = [sys.executable, "-c", _SETSID_EXEC, *self._command]

    def kill_group(self) -> int:
        """SIGKILLs the worker's whole process group and reaps the worker.

        Returns:
            The worker's exit code (``-9``; something else if it had already died).
        """
        if self.returncode is None:
            # ProcessLookupError: it died on its own a moment ago.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        return self.wait(15)


def crash_lines(lines: Any) -> list[tuple[str, str, str]]:
    """``(spec, point, operation id)`` of every ``--crash-at`` self-kill in a worker's log."""
    found = (CRASH_LINE.search(line) for line in lines)
    return [(m.group(1), m.group(2), m.group(3)) for m in found if m]
