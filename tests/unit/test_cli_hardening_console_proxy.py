"""Issue 31 (8, 9): the console proxy answers a malformed request with 400, never a dropped
connection, and its allow-list cannot be walked out of with dot segments.

A stand-in Api on 127.0.0.1 records what reaches it; requests go to the proxy over a raw
socket (exactly the bytes written), so malformed headers and paths arrive as sent.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from durable_agents_local.cli.console_proxy import MAX_BODY_BYTES, ConsoleProxy, refusal
from tests.unit.test_console_proxy import serving_proxy

SEEN: list[str] = []


class _Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        SEEN.append(f"{self.command} {self.path}")
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


def _sign(method: str, url: str, headers: Any, body: bytes) -> dict[str, str]:
    return {**headers, "authorization": "AWS4-HMAC-SHA256 test"}


@pytest.fixture
def proxy() -> Iterator[ConsoleProxy]:
    SEEN.clear()
    with serving_proxy(_Api, _sign) as served:
        yield served


def _raw(proxy: ConsoleProxy, request_line: str, headers: list[str], body: bytes = b"") -> bytes:
    """Sends exactly these bytes; returns everything the proxy answers before it closes."""
    port = proxy.server_address[1]
    head = [request_line, f"Host: 127.0.0.1:{port}", "Connection: close", *headers]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _status(answer: bytes) -> int:
    assert answer, "the proxy closed the connection without an answer"
    return int(answer.split(b" ", 2)[1])


def test_a_well_formed_post_is_forwarded(proxy: ConsoleProxy) -> None:
    answer = _raw(
        proxy,
        "POST /console/runs/r-1/cancel HTTP/1.1",
        ["Sec-Fetch-Site: same-origin", "Content-Length: 3"],
        b"a=1",
    )
    assert _status(answer) == 200 and SEEN == ["POST /Prod/console/runs/r-1/cancel"]


@pytest.mark.parametrize(
    "headers",
    [
        ["Content-Length: abc"],
        ["Content-Length: -1"],
        ["Content-Length: +3"],
        ["Content-Length: 1e3"],
        ["Content-Length: 3 3"],
        ["Content-Length: \uff13"],  # a fullwidth digit (as UTF-8 bytes)
        ["Content-Length: 99999999999999999999999999999999"],
        ["Content-Length: " + "9" * 5000],  # int() refuses over 4300 digits
        [f"Content-Length: {MAX_BODY_BYTES + 1}"],
        ["Content-Length: 3", "Content-Length: 4"],
        ["Transfer-Encoding: chunked"],
    ],
)
def test_a_malformed_or_oversized_body_length_is_a_400_with_a_message(
    proxy: ConsoleProxy, headers: list[str]
) -> None:
    answer = _raw(
        proxy,
        "POST /console/runs/r-1/cancel HTTP/1.1",
        ["Sec-Fetch-Site: same-origin", *headers],
        b"a=1",
    )
    assert _status(answer) == 400, answer
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"Content-Length" in body or b"Transfer-Encoding" in body or b"over" in body
    assert b"connection: close" in head.lower()  # the unread body is not taken as a request
    assert SEEN == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/console/../runs/r-1/cancel"),
        ("POST", "/console/./../runs/r-1/cancel"),
        ("POST", "/console/%2e%2e/runs/r-1/cancel"),
        ("POST", "/console/%2E%2e/runs/r-1/cancel"),
        ("POST", "/console/.%2e/runs/r-1/cancel"),
        ("POST", "/console/%252e%252e/runs/r-1/cancel"),  # decoded twice by someone
        ("POST", "/console/..%2fruns/r-1/cancel"),
        ("POST", "/console/..;/runs/r-1/cancel"),
        ("POST", "/console\\..\\runs/r-1/cancel"),
        ("POST", "/console/%5c..%5cruns/r-1/cancel"),
        ("GET", "/console/.."),
        ("GET", "/console/."),
        ("GET", "/runs/../console"),
        ("GET", "/runs/%2e%2e/history"),
        ("GET", "/runs/r-1/../../approvals/a-1/history"),
    ],
)
def test_dot_segments_and_backslashes_are_refused_before_the_allow_list(
    proxy: ConsoleProxy, method: str, path: str
) -> None:
    headers = ["Sec-Fetch-Site: same-origin", "Content-Length: 3"] if method == "POST" else []
    answer = _raw(proxy, f"{method} {path} HTTP/1.1", headers, b"a=1" if headers else b"")
    assert _status(answer) in (400, 404), answer
    assert SEEN == []  # nothing signed, nothing sent
    port = proxy.server_address[1]
    own = {f"127.0.0.1:{port}"}
    incoming = {"host": f"127.0.0.1:{port}", "sec-fetch-site": "same-origin"}
    assert refusal(method, path, incoming, own) is not None


def test_dots_in_the_query_or_inside_a_segment_are_fine(proxy: ConsoleProxy) -> None:
    for path in ("/console/runs/r-1?back=../..", "/console/runs/r..1", "/runs/run.1/history"):
        assert _status(_raw(proxy, f"GET {path} HTTP/1.1", [])) == 200, path
    assert len(SEEN) == 3
