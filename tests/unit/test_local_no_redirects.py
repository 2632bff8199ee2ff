"""Local mode's own HTTP clients never follow a redirect: a request goes only where it was sent.

``durable-agents runs start`` posts a run's input and reads its result; ``durable-agents
token`` asks the local issuer for a token. A server on that port that answers 3xx (another
program took the port, or a page's rebinding trick) must not send the client, with what it
carries, somewhere else: the 3xx is an error that names it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from durable_agents_local.oidc import LocalTokenError, request_token
from durable_agents_local.runs_start import RunStartError, start_run


class _Redirecting(BaseHTTPRequestHandler):
    followed: list[str] = []

    def _answer(self) -> None:
        if self.path.startswith("/elsewhere"):
            _Redirecting.followed.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"run": {"run_id": "run-x", "status": "SUCCEEDED"}, "token": "t"}')
            return
        self.send_response(302)
        self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def redirecting() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirecting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Redirecting.followed.clear()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_runs_start_does_not_follow_a_redirect(redirecting: str) -> None:
    with pytest.raises(RunStartError, match="answered 302"):
        start_run(redirecting, "greeter", "Ada", wait_seconds=1)
    assert _Redirecting.followed == []


def test_a_token_request_does_not_follow_a_redirect(redirecting: str) -> None:
    with pytest.raises(LocalTokenError, match="302"):
        request_token(redirecting, "ada@example.com")
    assert _Redirecting.followed == []
