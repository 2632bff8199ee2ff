"""``durable-agents console``: the loopback proxy that signs the console's requests (SigV4).

A stand-in Api on 127.0.0.1 records what reaches it. Requests the console makes are forwarded
under the Api's stage, signed for ``execute-api`` with the configured credentials, and their
answers (a 303 included, not followed) come back as they are; anything else — another route,
another Host (DNS rebinding), a form the browser does not call same-origin — is refused before
anything is signed or sent.
"""

from __future__ import annotations

import contextlib
import doctest
import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from durable_agents_local.cli import console_proxy
from durable_agents_local.cli.console_proxy import ConsoleProxy, sigv4_signer

SEEN: list[dict[str, Any]] = []


class _Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        SEEN.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": self.rfile.read(length) if length else b"",
            }
        )
        if self.command == "POST":
            self.send_response(303)
            self.send_header("Location", "../../../console/runs/r-1?done=cancel-requested")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"<!doctype html><title>Runs</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ConsoleProxy]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-example")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    SEEN.clear()
    with serving_proxy(_Api, sigv4_signer("eu-west-1")) as served:
        yield served


@contextlib.contextmanager
def serving_proxy(api_handler: type[BaseHTTPRequestHandler], signer: Any) -> Iterator[ConsoleProxy]:
    """A console proxy on 127.0.0.1 in front of a fake Api (``api_handler``), both served."""
    api = ThreadingHTTPServer(("127.0.0.1", 0), api_handler)
    served = ConsoleProxy(f"http://127.0.0.1:{api.server_address[1]}/Prod", signer, port=0)
    for server in (api, served):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield served
    finally:
        for server in (served, api):
            server.shutdown()
            server.server_close()


def _send(
    proxy: ConsoleProxy, method: str, path: str, **kw: Any
) -> tuple[int, dict[str, str], bytes]:
    port = proxy.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Host": f"127.0.0.1:{port}", **kw.pop("headers", {})}
    connection.request(method, path, headers=headers, **kw)
    reply = connection.getresponse()
    body = reply.read()
    connection.close()
    return reply.status, dict(reply.getheaders()), body


def test_a_console_page_is_forwarded_signed(proxy: ConsoleProxy) -> None:
    status, _, body = _send(
        proxy, "GET", "/console?status=RUNNING", headers={"Accept": "text/html", "Cookie": "a=b"}
    )
    assert status == 200 and b"<title>Runs</title>" in body
    (seen,) = SEEN
    assert seen["path"] == "/Prod/console?status=RUNNING"
    auth = seen["headers"]["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in auth and "x-amz-date" in seen["headers"]
    assert seen["headers"]["host"] == proxy.upstream.netloc
    assert "cookie" not in seen["headers"]  # only what the console needs is forwarded


def test_a_same_origin_form_is_forwarded_and_its_redirect_passed_back(proxy: ConsoleProxy) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin"}
    status, headers, _ = _send(
        proxy, "POST", "/console/runs/r-1/cancel", body=b"reason=done", headers=form
    )
    assert status == 303
    assert headers["Location"] == "../../../console/runs/r-1?done=cancel-requested"
    (seen,) = SEEN  # the redirect was not followed
    assert seen["body"] == b"reason=done" and seen["headers"]["sec-fetch-site"] == "same-origin"


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("POST", "/console/runs/r-1/cancel", {"Sec-Fetch-Site": "cross-site"}),
        ("POST", "/console/runs/r-1/cancel", {}),
        ("GET", "/runs", {}),
        ("POST", "/runs/r-1/cancel", {"Sec-Fetch-Site": "same-origin"}),
        ("GET", "/console", {"Host": "evil.example:8765"}),
    ],
)
def test_anything_else_is_refused_unsigned(
    proxy: ConsoleProxy, method: str, path: str, headers: dict[str, str]
) -> None:
    status, _, body = _send(proxy, method, path, headers=headers, body=b"x=1")
    assert status == 403, body
    assert SEEN == []


def test_the_examples_run() -> None:
    result = doctest.testmod(console_proxy)
    assert result.attempted >= 3 and result.failed == 0
