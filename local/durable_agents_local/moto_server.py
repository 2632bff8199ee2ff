"""The moto server process: local DynamoDB, S3, EventBridge and SQS on 127.0.0.1.

It runs in its own process so that the journal survives the worker: kill the worker (even
with ``kill -9``) and every recorded step is still there when it comes back. With a state
directory (the default of ``durable-agents local``: ``.durable-agents/``) the journal also
survives the server itself, a SIGKILL or a reboot (``durable_store``); ``--ephemeral`` keeps
it in memory only.

Run it with ``python -m durable_agents_local.moto_server --port 5010 --state-dir DIR`` (or
``durable-agents moto``); :class:`MotoProcess` starts and stops it from Python.

It answers only requests signed with its session key as the access key id (``store_key``):
``MotoProcess`` makes the key and hands it over in ``DURABLE_AGENTS_STORE_KEY`` (never on the
command line); started by hand, the server makes one. Either way it writes the key to its key
file (``store_key.key_file``, readable by this user only) and removes it when it stops cleanly.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from durable_agents_local import leftover_store
from durable_agents_local import store_key as keys
from durable_agents_local.aws import DEFAULT_REGION, LocalSession

HOST = "127.0.0.1"
DEFAULT_PORT = 5010
DEFAULT_STATE_DIR = Path(".durable-agents")
EXIT_PORT_IN_USE = 2
EXIT_STATE_UNUSABLE = 3


class PortInUseError(OSError):
    """The requested port is already taken by another process."""


def endpoint_url(port: int, host: str = HOST) -> str:
    """Returns the HTTP endpoint of a moto server on ``host:port``."""
    return f"http://{host}:{port}"


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether ``host:port`` can be bound right now by a server (one using ``SO_REUSEADDR``).

    Connections of a process that just died linger in TIME_WAIT for a minute; they do not stop
    a listening socket with ``SO_REUSEADDR`` (as our servers' are) from binding, so they do not
    count as "in use". Another process listening there does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST) -> int:
    """Returns a port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def is_listening(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def serve(
    port: int,
    *,
    host: str = HOST,
    stop: threading.Event | None = None,
    state_dir: Path | None = None,
    store_key: str | None = None,
) -> None:
    """Serves moto on ``host:port`` until ``stop`` is set (or SIGTERM/SIGINT arrives).

    Only requests signed with the session key as access key id are answered. The key is
    written to the port's key file (``store_key.key_file``) before the server listens and
    removed when it stops (unless another store wrote its own there since).

    Args:
        port: The TCP port.
        host: The address to bind (loopback by default).
        stop: Set it to stop the server; signal handlers are installed when it is omitted.
        state_dir: Keep the state there and rebuild it from there first; None: memory only.
        store_key: The session key; None: ``DURABLE_AGENTS_STORE_KEY`` from the environment
            (how ``MotoProcess`` hands its key over), else a new one.

    Raises:
        PortInUseError: If the port is already taken.
        StoreKeyError: If the key file's directory is not this user's own.
        StateDirLockedError: If another store uses ``state_dir``.
        CorruptStateError, SnapshotVersionError, ReplayDivergedError: If the state in
            ``state_dir`` cannot be rebuilt (see ``durable_store``).
    """
    # moto is a local-only extra; its isolated variant behaves like DynamoDB under races.
    from durable_agents_local.isolated_moto import IsolatedMotoServer  # noqa: PLC0415

    if not port_is_free(port, host):
        raise PortInUseError(f"{host}:{port} is already in use")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    if stop is None:
        stop = threading.Event()

        def _stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    key = store_key or os.environ.get(keys.KEY_VARIABLE) or keys.new_key()
    key_path = keys.write_key(port, key)
    server = IsolatedMotoServer(
        store_key=key,
        key_location=str(key_path),
        state_dir=state_dir,
        ip_address=host,
        port=port,
        verbose=False,
    )
    started = time.monotonic()
    try:
        server.start()
        # Who serves this port, so that a local mode restarted after a crash can take it over.
        leftover_store.record(port, state_dir)
    except BaseException:
        server.stop()
        keys.remove_key(port, key)
        raise
    kept = (
        f"state in {state_dir} ({server.store.replayed} logged writes replayed in "
        f"{time.monotonic() - started:.1f} s)"
        if state_dir is not None
        else "ephemeral: state in memory only"
    )
    print(
        f"moto server listening on {endpoint_url(port, host)}; {kept}; session key in {key_path}",
        file=sys.stderr,
        flush=True,
    )
    try:
        stop.wait()
    finally:
        server.stop()
        leftover_store.forget(port)
        keys.remove_key(port, key)


class MotoProcess:
    """A moto server in a child process (its own session: Ctrl-C in a terminal spares it).

    The server answers only clients that use its session key (``store_key``) as access key
    id: ``session()`` makes a ``LocalSession`` that does. The key is made here and handed to the
    child in its environment (never in its command line); it is kept when the child is started
    again (``revive``), so clients made before go on working.

    Args:
        port: The port to serve on (always on the loopback address).
        state_dir: Where it keeps its state (durable); None: in memory only (ephemeral).
        store_key: The session key; None: a new one (``store_key.new_key``). Pass the key of
            a previous process to let its clients talk to this one.
    """

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        state_dir: Path | None = None,
        *,
        store_key: str | None = None,
    ):
        self.port = port
        self.state_dir = state_dir
        self.store_key = store_key or keys.new_key()
        self.host = HOST
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The server's endpoint URL."""
        return endpoint_url(self.port, self.host)

    def session(self, region: str = DEFAULT_REGION, **kwargs: Any) -> LocalSession:
        """A ``LocalSession`` for this server (its endpoint and session key).

        Args:
            region: The region to sign for.
            **kwargs: ``LocalSession``'s other arguments (``fail_fast``).
        """
        return LocalSession(self.endpoint, region, store_key=self.store_key, **kwargs)

    @property
    def pid(self) -> int | None:
        """The child's process id (None before ``start``)."""
        return self._process.pid if self._process else None

    def start(self, timeout: float = 120.0) -> None:
        """Starts the process and waits until it accepts connections (its state rebuilt).

        Raises:
            PortInUseError: If the port is already taken.
            RuntimeError: If the process exits (its error is on stderr, e.g. the state
                directory is in use) or does not listen within ``timeout``.
        """
        if not port_is_free(self.port, self.host):
            raise PortInUseError(f"{self.host}:{self.port} is already in use")
        command = [
            sys.executable,
            "-m",
            "durable_agents_local.moto_server",
            "--port",
            str(self.port),
            *(
                ["--state-dir", str(self.state_dir)]
                if self.state_dir is not None
                else ["--ephemeral"]
            ),
        ]
        self._process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            command,
            env={**os.environ, keys.KEY_VARIABLE: self.store_key},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                why = " (its state directory or its key's directory is unusable: see above)" * (
                    code == EXIT_STATE_UNUSABLE
                )
                raise RuntimeError(f"moto server exited with code {code}{why}")
            if is_listening(self.host, self.port):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto server did not listen on {self.endpoint} within {timeout} s")

    def revive(self) -> bool:
        """Starts the process again if it died (same port, same state directory).

        Returns:
            True if it had died and was started again.

        Raises:
            PortInUseError, RuntimeError: As ``start``.
        """
        if self._process is None or self._process.poll() is None:
            return False
        self.start()
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stops the process (SIGTERM, then SIGKILL after ``timeout``); safe to call twice."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m durable_agents_local.moto_server``.

    Returns:
        The exit status (2 if the port is taken, 3 if the state directory or the key
        file's directory is unusable).
    """
    from durable_agents_local.durable_store import (  # noqa: PLC0415
        ReplayDivergedError,
        SnapshotVersionError,
    )
    from durable_agents_local.wal import CorruptStateError, StateDirLockedError  # noqa: PLC0415

    parser = argparse.ArgumentParser(description="Run the local moto server until SIGTERM.")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--host",
        default=HOST,
        help="the address to listen on (default %(default)s; `make sam-local` passes the "
        "gateway of the Docker network it created, so its containers reach the store)",
    )
    add_state_arguments(parser)
    args = parser.parse_args(argv)
    try:
        serve(args.port, host=args.host, state_dir=state_dir_of(args))
    except PortInUseError as exc:
        print(f"error: {exc}; is another moto server running there?", file=sys.stderr)
        return EXIT_PORT_IN_USE
    except (
        StateDirLockedError,
        CorruptStateError,
        SnapshotVersionError,
        ReplayDivergedError,
        keys.StoreKeyError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_STATE_UNUSABLE
    return 0


def add_state_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--state-dir DIR`` and ``--ephemeral`` (mutually exclusive) to ``parser``.

    ``--state-dir`` defaults to None, so that callers can tell it was not given; read the
    flags with ``state_dir_of``.
    """
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="keep the local store's state (journal, payloads, secrets) in DIR: it survives "
        f"a SIGKILL of every local process and a reboot (default {DEFAULT_STATE_DIR}/)",
    )
    group.add_argument(
        "--ephemeral",
        action="store_true",
        help="keep the state in memory only: lost when the store stops (tests, demos)",
    )


def state_dir_of(args: argparse.Namespace) -> Path | None:
    """The state directory the parsed flags ask for (None: ``--ephemeral``)."""
    return None if args.ephemeral else Path(args.state_dir or DEFAULT_STATE_DIR)


if __name__ == "__main__":
    sys.exit(main())
