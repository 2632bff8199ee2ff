"""The local-mode HTTP server over real HTTP on 127.0.0.1: malformed requests and bursts.

Each malformed request gets an answer (a 400 that says what is wrong), never a silent hang or
a dropped connection; a burst of 200 concurrent connections is answered, none reset; and a
``%2F`` in a path parameter stays in its segment instead of being decoded before routing.
The function is a stand-in that echoes the API Gateway event it was given.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from durable_agents_local.http_api import HOST, ApiServer, Route


class EchoFunction:
    """Answers every event with what the handler would see of it."""

    def invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        seen = {k: event[k] for k in ("path", "resource", "pathParameters", "body")}
        seen["isBase64Encoded"] = event["isBase64Encoded"]
        seen["headers"] = event["headers"]
        seen["query"] = event["queryStringParameters"]
        return {
            "statusCode": 200,
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps(seen),
        }


@pytest.fixture
def server() -> Iterator[ApiServer]:
    echo: Any = EchoFunction()
    routes = [
        Route("GET", "/runs/{run_id}", echo),
        Route("POST", "/runs", echo),
        Route("POST", "/reviews/{operation_id}", echo),
    ]
    api = ApiServer(routes, port=0)
    thread = threading.Thread(target=api.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        api.shutdown()
        api.server_close()
        thread.join(timeout=10)


def port_of(api: ApiServer) -> int:
    return int(api.server_address[1])


def raw(api: ApiServer, request: bytes) -> bytes:
    """Sends raw bytes and reads the whole answer (b'' if the server answered nothing)."""
    with socket.create_connection((HOST, port_of(api)), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        try:
            # The first bytes may take a while on a loaded machine (CI runs two workers on two
            # cores); once the answer is flowing, 3 s of silence means it is whole.
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                sock.settimeout(3)
        except TimeoutError:
            pass
    return b"".join(chunks)


def status_and_json(answer: bytes) -> tuple[int, Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head, "the server sent no answer"
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else None


@pytest.mark.parametrize("length", [b"-5", b"abc", b"1e3", b"5, 7"])
def test_a_bad_content_length_is_400(server: ApiServer, length: bytes) -> None:
    answer = raw(
        server,
        b"POST /runs HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + length + b"\r\n\r\n{}",
    )
    status, body = status_and_json(answer)
    assert status == 400
    assert "Content-Length" in body["error"]["message"]


def test_a_body_that_is_not_utf8_is_400(server: ApiServer) -> None:
    payload = b'{"agent": "\xff\xfe"}'
    answer = raw(
        server,
        b"POST /runs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload,
    )
    status, body = status_and_json(answer)
    assert status == 400
    assert "UTF-8" in body["error"]["message"]


def test_a_body_is_passed_as_text(server: ApiServer) -> None:
    connection = http.client.HTTPConnection(HOST, port_of(server), timeout=5)
    body = '{"a": "é"}'.encode()
    connection.request("POST", "/runs?x=1", body=body, headers={"X-Local-Caller-Arn": "a"})
    reply = connection.getresponse()
    seen = json.loads(reply.read())
    assert reply.status == 200
    assert seen["body"] == '{"a": "é"}' and seen["isBase64Encoded"] is False
    assert seen["query"] == {"x": "1"} and seen["headers"]["X-Local-Caller-Arn"] == "a"


def test_an_encoded_slash_stays_in_its_segment(server: ApiServer) -> None:
    answer = raw(
        server,
        b"POST /reviews/scope%2Fstep-1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}",
    )
    status, seen = status_and_json(answer)
    assert status == 200, seen
    assert seen["resource"] == "/reviews/{operation_id}"
    assert seen["pathParameters"] == {"operation_id": "scope/step-1"}
    assert seen["path"] == "/reviews/scope%2Fstep-1"  # as API Gateway passes it: not decoded


def test_unknown_paths_and_methods_are_json(server: ApiServer) -> None:
    status, body = status_and_json(raw(server, b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n"))
    assert status == 404 and "no route" in body["error"]["message"]
    status, body = status_and_json(raw(server, b"DELETE /runs HTTP/1.1\r\nHost: localhost\r\n\r\n"))
    assert status == 405 and "POST" in body["error"]["message"]


def test_a_body_over_the_limit_is_413(server: ApiServer) -> None:
    answer = raw(
        server, b"POST /runs HTTP/1.1\r\nHost: localhost\r\nContent-Length: 999999999\r\n\r\n"
    )
    assert status_and_json(answer)[0] == 413


BURST = 200


def test_a_burst_of_connections_is_answered(server: ApiServer) -> None:
    assert server.request_queue_size >= 128  # the listen backlog
    barrier = threading.Barrier(BURST)

    def one(i: int) -> int:
        connection = http.client.HTTPConnection(HOST, port_of(server), timeout=30)
        barrier.wait(timeout=30)  # every connection opens at once
        connection.request("GET", f"/runs/run-{i}")
        reply = connection.getresponse()
        reply.read()
        connection.close()
        return reply.status

    with ThreadPoolExecutor(max_workers=BURST) as pool:
        statuses = list(pool.map(one, range(BURST)))
    assert statuses == [200] * BURST
