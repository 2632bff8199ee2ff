"""The store an earlier local mode left running on its port, and how a restart takes it over.

``durable-agents local`` runs its store in a process of its own, in its own session, so that
the journal survives a crash of the worker. A SIGKILL to local mode (or ``--crash-at``) leaves
that store running on its port, and the documented restart — the same command — would find the
port taken. So every store records who it is next to its key file (``owner_file``: its pid and
state directory, 0600 in the developer's own runtime directory), and a restart that finds its
port taken asks ``find`` whether the store there is one of ours, serving what it was asked to
serve:

* with a state directory, it is stopped (SIGTERM: it compacts and releases the directory) and
  started again by the new local mode, which then owns it (and revives it if it dies);
* ephemeral, it is taken over as it is (stopping it would lose its journal) and stopped when
  the new local mode stops.

A store serving another state directory, or a port held by anything else, is left alone and
reported.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from durable_agents_local import store_key as keys


@dataclass(frozen=True, slots=True)
class Leftover:
    """A store local mode left running.

    Attributes:
        pid: Its process id.
        state_dir: Its state directory (resolved); None when ephemeral.
        key: Its session key (from its key file).
    """

    pid: int
    state_dir: Path | None
    key: str


def owner_file(port: int) -> Path:
    """Where the store on ``port`` records its pid and state directory."""
    return keys.runtime_dir() / f"store-{port}.owner"


def record(port: int, state_dir: Path | None) -> None:
    """Records this process as the store on ``port`` (called by the store as it starts).

    Raises:
        StoreKeyError: If the runtime directory is not this user's own.
        OSError: If the file cannot be written.
    """
    owner = {
        "pid": os.getpid(),
        "state_dir": None if state_dir is None else str(state_dir.resolve()),
    }
    keys.write_private(owner_file(port), json.dumps(owner))


def forget(port: int) -> None:
    """Removes the record of the store on ``port`` if it is this process's."""
    path = owner_file(port)
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError):
        return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process: not a store of ours
    try:
        # An exited store nobody has reaped yet (its parent was killed) is not running.
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): kill(pid, 0) is all there is


def find(port: int) -> Leftover | None:
    """The store of ours running on ``port``, if its record, its key and its process exist."""
    try:
        owner = json.loads(owner_file(port).read_text())
        pid = int(owner["pid"])
        state_dir = None if owner.get("state_dir") is None else Path(owner["state_dir"])
        key = keys.read_key(port)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if key is None or not _alive(pid):
        return None
    return Leftover(pid, state_dir, key)


def same_store(leftover: Leftover, state_dir: Path | None) -> bool:
    """Whether the leftover serves what local mode was asked to serve."""
    wanted = None if state_dir is None else state_dir.resolve()
    return leftover.state_dir == wanted


def stop(leftover: Leftover, timeout: float = 15.0) -> None:
    """Stops a leftover store: SIGTERM, then SIGKILL if it has not exited after ``timeout`` s.

    On SIGTERM a store compacts its state and releases its directory.

    Raises:
        TimeoutError: If it is still running even after SIGKILL.
    """
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(leftover.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(leftover.pid):
                return
            time.sleep(0.05)
    raise TimeoutError(f"the store left running (pid {leftover.pid}) did not exit")
