"""One HTTP server for the fake external services, their fault injection and their ledgers.

Each service (payments, email, tickets) lives under its own path prefix and records every state
change as an event in its ledger; its state is rebuilt from those events, so persisting the
ledgers persists everything. ``/_control`` lets tests inject faults, read ledgers and reset.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from durable_agents.core.clock import SystemClock

HOST = "127.0.0.1"
FAULT_MODES = ("act_then_drop", "fail_before_act", "unavailable", "slow")
Json = Any


class HttpError(Exception):
    """A definite error answer from a route (nothing changed)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request"):
        self.status, self.message, self.kind = status, message, kind
        super().__init__(message)

    def response(self) -> Response:
        """Returns the error as a JSON response."""
        return Response(self.status, {"error": {"type": self.kind, "message": self.message}})


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed request below a service's prefix (``path`` starts with ``/``)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Json


@dataclass(frozen=True, slots=True)
class Response:
    """A JSON response."""

    status: int
    body: Json


@dataclass(frozen=True, slots=True)
class Route:
    """``method`` + a regex over the service path, named by ``action`` for fault injection."""

    method: str
    pattern: str
    action: str
    handler: Callable[[Request, dict[str, str]], Response]


def body_fields(request: Request) -> dict[str, Any]:
    """Returns the JSON object body of a request.

    Raises:
        HttpError: 400 if the body is not a JSON object.
    """
    if not isinstance(request.body, dict):
        raise HttpError(400, "the request body must be a JSON object")
    return request.body


def text_field(body: dict[str, Any], name: str, *, required: bool = True) -> str:
    """Returns ``body[name]`` as a string.

    Raises:
        HttpError: 400 if it is missing (and required) or not a string.
    """
    value = body.get(name, None if required else "")
    if not isinstance(value, str) or (required and not value):
        raise HttpError(400, f"{name!r} must be a non-empty string")
    return value


class Service:
    """A fake external system whose state is a fold over its ledger of events."""

    name: ClassVar[str] = ""

    def __init__(self) -> None:
        self.ledger: list[dict[str, Any]] = []
        self.on_change: Callable[[], None] = lambda: None
        self._clock = SystemClock()
        self._clear()

    def routes(self) -> list[Route]:
        """Returns the service's routes (first match wins)."""
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError

    def _apply(self, event: str, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def now(self) -> str:
        """Returns the wall-clock time as an ISO-8601 UTC string."""
        return datetime.fromtimestamp(self._clock.now_ms() / 1000, tz=UTC).isoformat()

    def record(self, event: str, data: dict[str, Any]) -> None:
        """Applies an event to the state, appends it to the ledger and persists."""
        entry = {
            "seq": len(self.ledger) + 1,
            "service": self.name,
            "event": event,
            "at": self.now(),
            "data": data,
        }
        self._apply(event, copy.deepcopy(data))
        self.ledger.append(entry)
        self.on_change()

    def load(self, entries: list[dict[str, Any]]) -> None:
        """Replaces the state with the fold of ``entries`` (a persisted ledger)."""
        self.reset()
        for entry in entries:
            self._apply(entry["event"], copy.deepcopy(entry["data"]))
            self.ledger.append(entry)

    def reset(self) -> None:
        """Forgets every event."""
        self.ledger = []
        self._clear()

    def actions(self) -> list[str]:
        """Returns the action names faults can target."""
        return sorted({route.action for route in self.routes()})

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """Finds the route for ``method path``.

        Raises:
            HttpError: 404 for an unknown path, 405 for a known path with another method.
        """
        allowed = False
        for route in self.routes():
            found = re.fullmatch(route.pattern, path)
            if found and route.method == method:
                return route, found.groupdict()
            allowed = allowed or bool(found)
        if allowed:
            raise HttpError(405, f"{method} is not allowed on /{self.name}{path}")
        raise HttpError(404, f"no route /{self.name}{path}", "not_found")


@dataclass(slots=True)
class Fault:
    """An injected fault; ``times`` is how many more calls it hits (-1: until cleared)."""

    service: str
    action: str
    mode: str
    times: int = 1
    delay_ms: int = 0


class ServicesApp:
    """Routes requests to the services, applies faults and persists ledgers.

    Args:
        services: The services, each served under ``/<service.name>``.
        state_file: Where ledgers are persisted (loaded at start if it exists).
    """

    def __init__(self, services: list[Service], state_file: Path | None = None):
        self.services = {service.name: service for service in services}
        self.state_file = state_file
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        for service in services:
            service.on_change = self._persist
        if state_file is not None and state_file.exists():
            state = json.loads(state_file.read_text(encoding="utf-8"))
            for name, entries in state.get("ledgers", {}).items():
                if name in self.services:
                    self.services[name].load(entries)

    def _persist(self) -> None:
        if self.state_file is None:
            return
        state = {"version": 1, "ledgers": {n: s.ledger for n, s in self.services.items()}}
        tmp = self.state_file.with_name(f".{self.state_file.name}.{os.getpid()}.tmp")
        with tmp.open("w", encoding="utf-8") as out:
            json.dump(state, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.state_file)

    def take_fault(self, service: str, action: str) -> Fault | None:
        """Consumes one hit of the first fault matching ``service``/``action``."""
        with self.lock:
            for fault in self.faults:
                if fault.service == service and fault.action in (action, "*"):
                    hit = copy.copy(fault)
                    if fault.times > 0:
                        fault.times -= 1
                        if fault.times == 0:
                            self.faults.remove(fault)
                    return hit
        return None

    def dispatch(
        self, method: str, target: str, headers: dict[str, str], raw: bytes
    ) -> Response | None:
        """Handles one request; None means "drop the connection without answering"."""
        parts = urlsplit(target)
        path = parts.path.rstrip("/") or "/"
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        name, _, rest = path.lstrip("/").partition("/")
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            return HttpError(400, "the request body is not valid JSON").response()
        request = Request(method, "/" + rest, query, headers, body)
        fault: Fault | None = None
        try:
            if name == "_control":
                with self.lock:
                    return self._control(request)
            service = self.services.get(name)
            if service is None:
                raise HttpError(404, f"no service {name!r}", "not_found")
            route, params = service.match(method, request.path)
            fault = self.take_fault(name, route.action)
            if fault is not None and fault.mode == "slow":
                time.sleep(fault.delay_ms / 1000)
            elif fault is not None and fault.mode in ("fail_before_act", "unavailable"):
                message = f"{name} is unavailable ({fault.mode} fault injected)"
                return HttpError(503, message, "service_unavailable").response()
            with self.lock:
                response = route.handler(request, params)
                response = Response(response.status, copy.deepcopy(response.body))
        except HttpError as error:
            response = error.response()
        if fault is not None and fault.mode == "act_then_drop":
            return None
        return response

    def _control(self, request: Request) -> Response:
        route = (request.method, request.path)
        if route == ("POST", "/reset"):
            self.faults.clear()
            for each in self.services.values():
                each.reset()
            self._persist()
            return Response(200, {"reset": True})
        if route == ("GET", "/health"):
            return Response(200, {"ok": True, "services": sorted(self.services)})
        if request.path == "/faults":
            if request.method == "POST":
                self.faults.append(self._parse_fault(body_fields(request)))
            elif request.method == "DELETE":
                self.faults.clear()
            return Response(200, {"faults": [asdict(fault) for fault in self.faults]})
        if request.method == "GET" and request.path.startswith("/ledger/"):
            service = self.services.get(request.path.removeprefix("/ledger/"))
            if service is None:
                raise HttpError(404, f"no service at {request.path}", "not_found")
            return Response(200, service.ledger)
        raise HttpError(404, f"no control route {request.method} {request.path}", "not_found")

    def _parse_fault(self, body: dict[str, Any]) -> Fault:
        service = self.services.get(str(body.get("service")))
        if service is None:
            raise HttpError(400, f"'service' must be one of {sorted(self.services)}")
        action, mode = body.get("action", "*"), body.get("mode")
        if action != "*" and action not in service.actions():
            raise HttpError(400, f"'action' must be '*' or one of {service.actions()}")
        if mode not in FAULT_MODES:
            raise HttpError(400, f"'mode' must be one of {list(FAULT_MODES)}")
        times, delay_ms = body.get("times", 1), body.get("delay_ms", 1000 if mode == "slow" else 0)
        if not isinstance(times, int) or isinstance(times, bool) or times == 0 or times < -1:
            raise HttpError(400, "'times' must be a positive integer, or -1 for every call")
        if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
            raise HttpError(400, "'delay_ms' must be a non-negative integer")
        return Fault(service.name, action, mode, times, delay_ms)


class _Handler(BaseHTTPRequestHandler):
    server: ServicesServer
    protocol_version = "HTTP/1.1"

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        headers = {key.lower(): value for key, value in self.headers.items()}
        response = self.server.app.dispatch(self.command, self.path, headers, raw)
        if response is None:  # act_then_drop: the action happened, the answer never leaves
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        data = json.dumps(response.body).encode()
        self.send_response(response.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = _handle

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)


class ServicesServer(ThreadingHTTPServer):
    """A threading HTTP server (on 127.0.0.1 by default) hosting a :class:`ServicesApp`.

    Args:
        app: The application to serve.
        port: The TCP port (0 picks a free one).
        verbose: Log every request to stderr.
        host: The address to listen on (``make sam-local``: its Docker network's gateway, so
            that the functions' containers reach the services).

    Raises:
        OSError: If the port cannot be bound.
    """

    daemon_threads = True
    block_on_close = False

    def __init__(self, app: ServicesApp, port: int = 0, *, verbose: bool = False, host: str = HOST):
        self.app = app
        self.verbose = verbose
        self.host = host
        super().__init__((host, port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stays quiet when a client hung up first (the ``slow`` fault's documented use)."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        """The base URL (``http://<host>:<port>``)."""
        return f"http://{self.host}:{self.server_address[1]}"
