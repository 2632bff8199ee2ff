"""A stand-in for the Api on loopback: scripted answers per (method, path), requests recorded.

The CLI's tests check what it sends (paths, query, bodies, headers) and how it handles each
answer (status codes and bodies the Api gives) without starting local mode.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Received:
    """One request as the stand-in saw it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class StandIn:
    """Answers: ``(method, path)`` -> ``(status, body)``, or a list of them used in turn (the
    last one repeats). A body of ``bytes`` is sent as it is (not JSON)."""

    url: str = ""
    answers: dict[tuple[str, str], Any] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)

    def answer(self, method: str, path: str) -> tuple[int, Any]:
        found = self.answers.get((method, path))
        if found is None:
            return 404, {"error": {"message": f"no route for {method} {path}"}}
        if isinstance(found, list):
            return found.pop(0) if len(found) > 1 else found[0]
        return found  # type: ignore[no-any-return]


def _handler(stand_in: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            stand_in.received.append(
                Received(
                    self.command,
                    parts.path,
                    dict(parse_qsl(parts.query)),
                    dict(self.headers.items()),
                    json.loads(raw) if raw else None,
                )
            )
            status, body = stand_in.answer(self.command, parts.path)
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, *_: Any) -> None:
            """Silenced."""

    return Handler


@contextmanager
def stand_in_api() -> Iterator[StandIn]:
    """A running stand-in on 127.0.0.1 (its ``url``); stopped on exit."""
    stand_in = StandIn()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stand_in))
    stand_in.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stand_in
    finally:
        server.shutdown()
        server.server_close()
