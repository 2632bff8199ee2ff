"""Local mode's servers refuse a web page that rebinds its DNS name to 127.0.0.1 (issue 31).

A page on ``evil.example`` whose name is made to resolve to 127.0.0.1 reaches local mode's
ports from the victim's browser; the only thing that gives it away is the ``Host`` header,
which names the attacker's host. The Api server and the local OIDC issuer answer only their
own loopback names, before any routing, so such a request changes nothing and reads nothing.
They also answer a truncated or malformed request with a 400 instead of dropping it.
Everything is served for real on 127.0.0.1 and spoken to with raw requests.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from durable_agents_local.http_api import HOST, ApiServer, Route
from durable_agents_local.oidc import LocalIssuer


class RecordingFunction:
    """Answers 200 and records every event it is given (the state a request could change)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return {"statusCode": 200, "headers": {}, "body": json.dumps({"ok": True})}


@pytest.fixture
def recorder() -> RecordingFunction:
    return RecordingFunction()


@pytest.fixture
def api(recorder: RecordingFunction) -> Iterator[ApiServer]:
    function: Any = recorder
    server = ApiServer([Route("GET", "/runs", function), Route("POST", "/runs", function)], port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def issuer() -> Iterator[LocalIssuer]:
    local = LocalIssuer(port=0)
    local.start()
    try:
        yield local
    finally:
        local.stop()


def _port(server: ApiServer | LocalIssuer) -> int:
    if isinstance(server, LocalIssuer):
        return int(server.url.rsplit(":", 1)[1])
    return int(server.server_address[1])


def _request(
    port: int, method: str, path: str, host: str, body: bytes = b""
) -> tuple[int, str, bytes]:
    """One request with an explicit ``Host``: status, content type and body."""
    connection = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", host)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        reply = connection.getresponse()
        return reply.status, reply.getheader("Content-Type") or "", reply.read()
    finally:
        connection.close()


def _raw(port: int, request: bytes, timeout: float = 15) -> bytes:
    """Sends raw bytes (keeping the connection open) and reads the answer's head and body."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                return answer
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(body) < length and (chunk := sock.recv(65536)):
            body += chunk
        return head + b"\r\n\r\n" + body


def _status(answer: bytes) -> int:
    assert answer, "the server dropped the connection without an answer"
    return int(answer.split(b" ", 2)[1])


FOREIGN_HOSTS = ["evil.example:{port}", "evil.example", "127.0.0.1.evil.example:{port}", "[::1"]


@pytest.mark.parametrize("host", FOREIGN_HOSTS)
def test_the_api_refuses_a_foreign_host_and_changes_nothing(
    api: ApiServer, recorder: RecordingFunction, host: str
) -> None:
    port = _port(api)
    status, content_type, body = _request(
        port, "POST", "/runs", host.format(port=port), b'{"agent": "a"}'
    )
    assert status == 421, body
    assert content_type.startswith("text/plain")
    assert b"Host" in body
    status, _, body = _request(port, "GET", "/runs", host.format(port=port))
    assert status == 421
    assert recorder.events == []  # nothing was routed, read or started


def test_the_api_refuses_its_own_name_on_another_port(
    api: ApiServer, recorder: RecordingFunction
) -> None:
    status, _, _ = _request(_port(api), "GET", "/runs", "localhost:1")
    assert status == 421 and recorder.events == []


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LOCALHOST", "[::1]"])
def test_the_api_answers_its_own_loopback_names(
    api: ApiServer, recorder: RecordingFunction, name: str
) -> None:
    port = _port(api)
    status, _, body = _request(port, "POST", "/runs", f"{name}:{port}", b'{"agent": "a"}')
    assert status == 200, body
    assert len(recorder.events) == 1


def test_the_oidc_issuer_refuses_a_foreign_host(issuer: LocalIssuer) -> None:
    port = _port(issuer)
    body = json.dumps({"user": "ada@example.com", "groups": ["finance"]}).encode()
    status, content_type, answer = _request(port, "POST", "/token", f"evil.example:{port}", body)
    assert status == 421 and b"token" not in answer
    assert content_type.startswith("text/plain")
    status, _, answer = _request(
        port, "GET", "/.well-known/openid-configuration", f"evil.example:{port}"
    )
    assert status == 421
    status, _, answer = _request(port, "POST", "/token", f"127.0.0.1:{port}", body)
    assert status == 200 and "token" in json.loads(answer)
    status, _, _ = _request(port, "GET", "/.well-known/jwks.json", f"localhost:{port}")
    assert status == 200


# Finding 8: a truncated or malformed request gets a 400, quickly, instead of a dropped
# connection or a hang.


def test_the_api_answers_a_body_shorter_than_its_content_length(
    api: ApiServer, recorder: RecordingFunction
) -> None:
    port = _port(api)
    started = time.monotonic()
    answer = _raw(
        port,
        f"POST /runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
        + b"Content-Length: 100\r\n\r\n{}",
    )
    assert _status(answer) == 400
    assert b"100" in answer  # the message says how long the body was said to be
    assert time.monotonic() - started < 10
    assert recorder.events == []


def test_the_issuer_answers_a_body_shorter_than_its_content_length(issuer: LocalIssuer) -> None:
    port = _port(issuer)
    started = time.monotonic()
    answer = _raw(
        port,
        f"POST /token HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
        + b"Content-Length: 100\r\n\r\n{}",
    )
    assert _status(answer) == 400
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("length", ["-5", "abc", "1e3", "5, 7"])
def test_the_issuer_answers_a_bad_content_length_with_400(issuer: LocalIssuer, length: str) -> None:
    port = _port(issuer)
    answer = _raw(
        port,
        f"POST /token HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
        + f"Content-Length: {length}\r\n\r\n{{}}".encode(),
    )
    assert _status(answer) == 400
    assert "Content-Length" in json.loads(answer.partition(b"\r\n\r\n")[2])["error"]


@pytest.mark.parametrize("ttl", ["1e999", "-1e999", "1.5", "true", '"60"', "NaN"])
def test_the_issuer_answers_a_ttl_that_is_not_a_whole_number_with_400(
    issuer: LocalIssuer, ttl: str
) -> None:
    port = _port(issuer)
    body = f'{{"user": "ada", "ttl_seconds": {ttl}}}'.encode()
    status, _, answer = _request(port, "POST", "/token", f"127.0.0.1:{port}", body)
    assert status == 400, answer
    assert b"ttl_seconds" in answer


def test_the_issuer_answers_a_deeply_nested_body_with_400(issuer: LocalIssuer) -> None:
    port = _port(issuer)
    body = b"[" * 5000 + b"]" * 5000  # within the size limit; deeper than the parser goes
    status, _, _ = _request(port, "POST", "/token", f"127.0.0.1:{port}", body)
    assert status == 400


def test_the_api_answers_a_chunked_body_that_stalls(
    api: ApiServer, recorder: RecordingFunction
) -> None:
    port = _port(api)
    started = time.monotonic()
    answer = _raw(
        port,
        f"POST /runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
        + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",  # no last chunk: it never ends
    )
    assert _status(answer) == 400
    assert b"chunked" in answer
    assert time.monotonic() - started < 10
    assert recorder.events == []
