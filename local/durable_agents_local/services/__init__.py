"""Fake external systems over real HTTP: payments, email and tickets, with fault injection.

They let tests and the demo count real effects in each system's own ledger, and crash the
conversation at every point of the side-effect protocol (see ``docs/external-services.md``).

Example:
    >>> handle = ServicesHandle.start_in_thread()
    >>> handle.set_fault("payments", "charge", "act_then_drop")["mode"]
    'act_then_drop'
    >>> handle.ledger("payments")
    []
    >>> handle.stop()
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from durable_agents_local.services.email import EmailService
from durable_agents_local.services.payments import PaymentsService
from durable_agents_local.services.server import FAULT_MODES, ServicesApp, ServicesServer
from durable_agents_local.services.tickets import TicketsService

SERVICE_NAMES = ("payments", "email", "tickets")

__all__ = ["FAULT_MODES", "SERVICE_NAMES", "ServicesError", "ServicesHandle", "build_app"]


class ServicesError(RuntimeError):
    """The services' control API refused a request."""


def build_app(state_file: Path | None = None) -> ServicesApp:
    """Returns the application with all three services (ledgers loaded from ``state_file``).

    Raises:
        ValueError: If ``state_file`` exists but is not valid JSON.
    """
    return ServicesApp([PaymentsService(), EmailService(), TicketsService()], state_file)


class ServicesHandle:
    """A client for a running services server (and, with ``start_in_thread``, its owner).

    Args:
        url: The server's base URL (``http://127.0.0.1:<port>``).
    """

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self._server: ServicesServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def start_in_thread(
        cls, port: int = 0, *, state_file: Path | str | None = None, verbose: bool = False
    ) -> ServicesHandle:
        """Serves the services from a daemon thread of this process.

        Args:
            port: The port on 127.0.0.1 (0 picks a free one).
            state_file: Persist ledgers there (and load them now if it exists).
            verbose: Log every request.

        Returns:
            A handle owning the server: call ``stop()`` when done.

        Raises:
            OSError: If the port cannot be bound.
        """
        app = build_app(Path(state_file) if state_file is not None else None)
        server = ServicesServer(app, port, verbose=verbose)
        handle = cls(server.url)
        handle._server = server
        handle._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"services-{server.server_address[1]}",
            daemon=True,
        )
        handle._thread.start()
        return handle

    def service_url(self, service: str) -> str:
        """Returns a service's base URL, e.g. ``http://127.0.0.1:8900/payments``."""
        return f"{self.url}/{service}"

    def env(self) -> dict[str, str]:
        """Returns ``PAYMENTS_URL``, ``EMAIL_URL`` and ``TICKETS_URL`` for the example tools."""
        return {f"{name.upper()}_URL": self.service_url(name) for name in SERVICE_NAMES}

    def ledger(self, service: str) -> list[dict[str, Any]]:
        """Returns every event the service recorded, oldest first.

        Raises:
            ServicesError: If there is no such service.
        """
        events: list[dict[str, Any]] = self._control("GET", f"/ledger/{service}")
        return events

    def set_fault(
        self,
        service: str,
        action: str,
        mode: str,
        *,
        times: int = 1,
        delay_ms: int | None = None,
    ) -> dict[str, Any]:
        """Injects a fault into the next ``times`` calls of ``service``'s ``action``.

        Args:
            service: ``payments``, ``email`` or ``tickets``.
            action: The route name (``charge``, ``lookup``, ``refund``, ``send``,
                ``create_ticket``, ``find_ticket``, ...) or ``*`` for every route.
            mode: One of ``FAULT_MODES``.
            times: How many calls it hits (-1: every call until cleared).
            delay_ms: The delay of a ``slow`` fault (default 1000).

        Returns:
            The fault as registered.

        Raises:
            ServicesError: If the service, action, mode or counts are invalid.
        """
        body: dict[str, Any] = {"service": service, "action": action, "mode": mode, "times": times}
        if delay_ms is not None:
            body["delay_ms"] = delay_ms
        faults: list[dict[str, Any]] = self._control("POST", "/faults", body)["faults"]
        return faults[-1]

    def faults(self) -> list[dict[str, Any]]:
        """Returns the faults still armed."""
        faults: list[dict[str, Any]] = self._control("GET", "/faults")["faults"]
        return faults

    def clear_faults(self) -> None:
        """Disarms every fault."""
        self._control("DELETE", "/faults")

    def reset(self) -> None:
        """Clears every ledger (and the state file) and every fault."""
        self._control("POST", "/reset")

    def stop(self) -> None:
        """Stops the server if this handle started it (a no-op for a connected handle)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ServicesHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _control(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - our own http://127.0.0.1 URL
            f"{self.url}/_control{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise ServicesError(f"{method} {path}: {error.code} {error.read().decode()}") from None
