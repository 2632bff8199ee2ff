"""Child processes for the demo and the tests: the worker, the fake services; JSON over HTTP.

Used by ``scripts/demo.py`` and the integration tests, which kill the worker with SIGKILL
(or let it kill itself with ``--crash-at``) while the journal lives on in the moto server
process and the providers' ledgers in the services process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from durable_agents_local.moto_server import HOST
from durable_agents_local.no_redirects import OPENER
from durable_agents_local.services import ServicesHandle
from durable_agents_local.store_key import KEY_VARIABLE


def http_json(
    method: str, url: str, body: Any = None, *, raw: bytes | None = None, timeout: float = 10.0
) -> tuple[int, Any]:
    """Sends a request and decodes the JSON answer (errors included).

    Args:
        method: The HTTP method.
        url: The full URL.
        body: A value to send as JSON.
        raw: Bytes to send as they are (instead of ``body``).
        timeout: Socket timeout in seconds.

    Returns:
        The status code and the decoded body (None when empty, the text if not JSON).

    Raises:
        urllib.error.URLError: If nothing answers.
    """
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(  # noqa: S310 - loopback URLs built by the caller
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with OPENER.open(request, timeout=timeout) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    try:
        return status, json.loads(text) if text else None
    except json.JSONDecodeError:
        return status, text


class WorkerProcess:
    """``durable-agents local`` as a child process, attached to an existing moto server.

    Args:
        api_port: The Api port.
        moto_endpoint: The moto server to attach to; None: the worker starts its own (pass
            ``--moto-port`` and ``--state-dir`` or ``--ephemeral`` in ``args``).
        store_key: The attached store's session key (``MotoProcess.store_key``), handed to the
            worker in ``DURABLE_AGENTS_STORE_KEY``; None: the worker finds it (that variable
            in ``env`` or this environment, else the store's key file).
        args: More ``durable-agents local`` flags.
        cwd: Where to run (the directory holding ``template.yaml``).
        env: Extra environment variables.
        on_line: Called with each stderr line of the worker (its log).
    """

    def __init__(
        self,
        *,
        api_port: int,
        moto_endpoint: str | None,
        store_key: str | None = None,
        args: Sequence[str] = (),
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        on_line: Callable[[str], None] | None = None,
    ):
        self.api_port = api_port
        self.base_url = f"http://{HOST}:{api_port}"
        self._command = [
            sys.executable,
            "-m",
            "durable_agents_local.cli.main",
            "local",
            "--port",
            str(api_port),
            *(["--moto-endpoint", moto_endpoint] if moto_endpoint else []),
            *args,
        ]
        self._cwd = cwd
        # AGENT_MODULES in the environment would win over the template's list (local mode's
        # precedence): a worker started here runs its template's agents unless env says so.
        inherited = {k: v for k, v in os.environ.items() if k != "AGENT_MODULES"}
        self._env = {
            **inherited,
            **({KEY_VARIABLE: store_key} if store_key else {}),
            **(env or {}),
        }
        self._on_line = on_line
        self.lines: deque[str] = deque(maxlen=500)
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        """The worker's process id.

        Raises:
            RuntimeError: If it was not started.
        """
        if self._process is None:
            raise RuntimeError("the worker was not started")
        return self._process.pid

    def _read(self, stream: Any) -> None:
        for raw in stream:
            line = raw.rstrip("\n")
            self.lines.append(line)
            if self._on_line is not None:
                self._on_line(line)

    def start(self, timeout: float = 60.0) -> None:
        """Starts the worker and waits until its Api answers.

        Raises:
            RuntimeError: If it exits or does not answer within ``timeout``.
        """
        self._process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            self._command,
            cwd=self._cwd,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(
            target=self._read, args=(self._process.stderr,), daemon=True
        )
        self._reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the worker exited with code {self._process.returncode}: "
                    + " | ".join(list(self.lines)[-5:])
                )
            try:
                status, _ = http_json("GET", f"{self.base_url}/runs?limit=1", timeout=2)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                status = 0
            if status == 200:
                return
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(
            f"the worker did not answer on {self.base_url} within {timeout} s: "
            + " | ".join(list(self.lines)[-5:])
        )

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: killed by that signal); None while it runs."""
        return None if self._process is None else self._process.poll()

    def wait(self, timeout: float) -> int:
        """Waits for the worker to exit on its own (``--crash-at``).

        Returns:
            The exit code (``-9`` after a SIGKILL).

        Raises:
            RuntimeError: If it was not started or is still running after ``timeout``.
        """
        if self._process is None:
            raise RuntimeError("the worker was not started")
        try:
            code = self._process.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"the worker is still running after {timeout} s") from exc
        if self._reader is not None:
            self._reader.join(5)
        return code

    def kill(self) -> None:
        """SIGKILL: the worker dies mid-whatever, as a crashed Lambda would."""
        self._end(signal.SIGKILL, 10.0)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (a clean stop), then SIGKILL after ``timeout``; safe to call twice.

        Returns:
            The exit code (None if it was not running).
        """
        return self._end(signal.SIGTERM, timeout)

    def _end(self, signum: int, timeout: float) -> int | None:
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signum)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(5)
        return process.returncode


class ServicesProcess:
    """The fake services (``python -m durable_agents_local.services``) as a child process.

    Args:
        state_file: Where the services persist their ledgers.
        port: The port on 127.0.0.1 (0 picks a free one).
    """

    def __init__(self, state_file: Path, port: int = 0):
        self._command = [
            sys.executable,
            "-m",
            "durable_agents_local.services",
            "--port",
            str(port),
            "--state-file",
            str(state_file),
        ]
        self._process: subprocess.Popen[str] | None = None
        self.url = ""
        self.errors: deque[str] = deque(maxlen=200)

    @property
    def pid(self) -> int:
        """The services' process id.

        Raises:
            RuntimeError: If they were not started.
        """
        if self._process is None:
            raise RuntimeError("the services were not started")
        return self._process.pid

    def start(self, timeout: float = 30.0) -> ServicesHandle:
        """Starts the services and waits for the URL they print once they accept connections.

        Returns:
            A client for them (ledgers, faults).

        Raises:
            RuntimeError: If they exit or print nothing within ``timeout``.
        """
        process = self._process = subprocess.Popen(  # noqa: S603 - our own interpreter
            self._command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Drain stderr all along (tracebacks must never fill the pipe and block the server).
        threading.Thread(target=self._drain, args=(process.stderr,), daemon=True).start()
        first: list[str] = []
        reader = threading.Thread(
            target=lambda: first.append(process.stdout.readline() if process.stdout else ""),
            daemon=True,
        )
        reader.start()
        reader.join(timeout)
        url = first[0].strip() if first else ""
        if not url.startswith("http://"):
            self.stop()
            raise RuntimeError(
                f"the services did not start within {timeout} s (exit code "
                f"{process.returncode}): " + " | ".join(list(self.errors)[-5:])
            )
        self.url = url
        return ServicesHandle(url)

    def _drain(self, stream: Any) -> None:
        for line in stream:
            self.errors.append(line.rstrip("\n"))

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (a clean stop), then SIGKILL after ``timeout``; safe to call twice.

        Returns:
            The exit code (None if it was not started).
        """
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode
