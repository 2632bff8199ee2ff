"""The Api events of the template, served on loopback as API Gateway REST (v1) proxy events.

Each HTTP request is matched against the declared ``Method`` + ``Path`` routes, turned into
the event API Gateway would send (``resource`` with its ``{param}`` template, path and query
parameters, headers, body, a ``requestContext`` with the caller's address) and handed to the
function; its ``statusCode``/``headers``/``body`` become the HTTP response. Unknown paths get
404 and known paths with another method 405, as JSON; a malformed ``Content-Length`` or a body
that is not UTF-8 gets 400. The server is werkzeug's threaded WSGI server (a listen backlog of
``LISTEN_BACKLOG``); routing uses the raw request target, so ``%2F`` is not decoded before
routing. A request whose ``Host`` is not one of the server's own loopback names (127.0.0.1,
localhost, [::1], with its port) gets 421 before routing: a web page that rebinds its DNS name
to 127.0.0.1 must not read runs, pass the console's same-origin check or pick a caller. A body
shorter than its ``Content-Length`` gets 400 after ``BODY_READ_SECONDS``. IAM (SigV4) auth is
not enforced: the server binds 127.0.0.1 only. Every IAM route's
caller (``requestContext.identity.userArn``, what API Gateway puts there after checking the
signature) is ``caller_arn`` (``--caller-arn``, ``LOCAL_CALLER_ARN`` by default), or the ARN a
request's ``X-Local-Caller-Arn`` header names; the Api's own checks (approvers, link minters,
reviewers) then apply to it as on AWS. An ``Authorizer: NONE`` route's event names no IAM
caller, as on AWS.
"""

from __future__ import annotations

import base64
import gc
import json
import logging
import re
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from durable_agents.core.clock import SystemClock
from durable_agents_local.identity import CALLER_HEADER, LOCAL_CALLER_ARN, is_own_host
from durable_agents_local.invoke import LocalFunction
from durable_agents_local.lambda_context import LOCAL_ACCOUNT_ID

log = logging.getLogger("durable_agents_local")

HOST = "127.0.0.1"
DEFAULT_PORT = 3000
STAGE = "local"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
LARGE_BODY_BYTES = 1024 * 1024  # a request this large is followed by a garbage collection
LISTEN_BACKLOG = 1024
BODY_READ_SECONDS = 3.0
"""How long the whole body may take to arrive: a short body is answered, not waited on."""


@dataclass(frozen=True, slots=True)
class Route:
    """One Api event: a method on a resource path, served by a function.

    Attributes:
        method: HTTP method (``ANY`` matches all).
        resource: The declared path, e.g. ``/runs/{run_id}``.
        function: The function that serves it.
        iam: Whether API Gateway would authenticate the caller (False: ``Authorizer: NONE``,
            and the event names no IAM caller, as on AWS).
    """

    method: str
    resource: str
    function: LocalFunction
    iam: bool = True

    def match(self, segments: Sequence[str]) -> dict[str, str] | None:
        """Returns the path parameters if ``segments`` (decoded) fit this resource."""
        template = [s for s in self.resource.split("/") if s]
        if len(template) != len(segments):
            return None
        params: dict[str, str] = {}
        for pattern, segment in zip(template, segments, strict=True):
            name = re.fullmatch(r"\{([^}+]+)\}", pattern)
            if name:
                params[name.group(1)] = segment
            elif pattern != segment:
                return None
        return params


def _multi(pairs: Sequence[tuple[str, str]]) -> tuple[dict[str, str], dict[str, list[str]]]:
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for key, value in pairs:
        single[key] = value
        multi.setdefault(key, []).append(value)
    return single, multi


def build_event(
    route: Route,
    params: Mapping[str, str],
    *,
    method: str,
    raw_path: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    source_ip: str,
    caller_arn: str = LOCAL_CALLER_ARN,
    acting_as: Sequence[str] = (),
) -> dict[str, Any]:
    """Builds the API Gateway REST (v1) proxy event for one request.

    Args:
        route: The matched route.
        params: The path parameters.
        method: The request method.
        raw_path: The raw request target (path and query string, not decoded).
        headers: The request headers.
        body: The raw body.
        source_ip: The client's address.
        caller_arn: The IAM caller, unless the request's ``X-Local-Caller-Arn`` names one.
        acting_as: ``--act-as``: the approver and reviewer patterns the IAM caller decides
            as, in ``requestContext.durableAgentsLocal`` (a part of the event API Gateway never
            writes; ``deciders.principal_from_iam`` reads it only in local mode's events).

    Returns:
        The event, as API Gateway would deliver it to the function.
    """
    parts = urlsplit(raw_path)
    # As API Gateway passes it: still encoded, so a %2F in an id is not a path separator.
    path = parts.path
    query, multi_query = _multi(parse_qsl(parts.query, keep_blank_values=True))
    single_headers, multi_headers = _multi(list(headers))
    try:
        text: str | None = body.decode("utf-8") if body else None
        is_base64 = False
    except UnicodeDecodeError:  # the server answers 400 first; a direct caller gets base64
        text, is_base64 = base64.b64encode(body).decode(), True
    now_ms = SystemClock().now_ms()
    request_id = secrets.token_hex(16)
    event: dict[str, Any] = {
        "resource": route.resource,
        "path": path,
        "httpMethod": method,
        "headers": single_headers or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": dict(params) or None,
        "stageVariables": None,
        "body": text,
        "isBase64Encoded": is_base64,
        "requestContext": {
            "accountId": LOCAL_ACCOUNT_ID,
            "apiId": "local",
            "resourceId": "local",
            "stage": STAGE,
            "requestId": request_id,
            "extendedRequestId": request_id,
            "requestTime": datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime(
                "%d/%b/%Y:%H:%M:%S +0000"
            ),
            "requestTimeEpoch": now_ms,
            "path": f"/{STAGE}{path}",
            "resourcePath": route.resource,
            "httpMethod": method,
            "protocol": "HTTP/1.1",
            "domainName": single_headers.get("Host", HOST),
            "identity": {
                "sourceIp": source_ip,
                "caller": "local" if route.iam else None,
                "user": "local" if route.iam else None,
                # API Gateway authenticates IAM callers on AWS; locally every caller of an IAM
                # route is this principal (--caller-arn), or the one an X-Local-Caller-Arn header
                # names. An auth NONE route gets no IAM caller, as on AWS.
                "userArn": (single_headers.get(CALLER_HEADER) or caller_arn) if route.iam else None,
                "accountId": LOCAL_ACCOUNT_ID if route.iam else None,
                "accessKey": None,
                "userAgent": single_headers.get("User-Agent"),
                "cognitoIdentityPoolId": None,
                "cognitoIdentityId": None,
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
                "principalOrgId": None,
            },
        },
    }
    if acting_as and route.iam:
        event["requestContext"]["durableAgentsLocal"] = {"actingAs": list(acting_as)}
    return event


def response_headers(response: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The HTTP headers of a proxy response (``headers`` and ``multiValueHeaders`` merged)."""
    pairs: list[tuple[str, str]] = []
    multi = response.get("multiValueHeaders") or {}
    for key, values in multi.items():
        pairs += [(key, str(v)) for v in values]
    for key, value in (response.get("headers") or {}).items():
        if key not in multi:
            pairs.append((key, str(value)))
    return pairs


def _undance(value: str) -> str:
    """Undoes WSGI's latin-1 transport of a value werkzeug read (PEP 3333)."""
    return value.encode("latin-1").decode("utf-8", errors="replace")


def _request_headers(environ: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The request headers, named as HTTP writes them (``X-Local-Caller-Arn``)."""
    pairs: list[tuple[str, str]] = []
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            name = key[5:]
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = key
        else:
            continue
        if value == "":
            continue
        pairs.append(("-".join(p.capitalize() for p in name.split("_")), _undance(str(value))))
    return pairs


class _BadRequestError(Exception):
    """A request the server answers itself with an HTTP error (carries status and message)."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _declared_length(environ: Mapping[str, Any]) -> int:
    """The request's Content-Length when it is a plain number (0 otherwise)."""
    declared = str(environ.get("CONTENT_LENGTH") or "").strip()
    return int(declared[:20]) if declared.isdigit() and declared.isascii() else 0


def _read_body(environ: Mapping[str, Any]) -> bytes:
    """The request body, at most ``MAX_BODY_BYTES``.

    Raises:
        _BadRequestError: 400 for a Content-Length that is not a decimal byte count or that
            overstates the body, or a chunked body that stalls (``_read_chunked``); 413 for a
            body over the limit.
    """
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):  # chunked: read to the end, one byte past the cap
        data: bytes = _read_chunked(stream, environ.get("werkzeug.socket"))
        if len(data) > MAX_BODY_BYTES:
            raise _BadRequestError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body exceeds {MAX_BODY_BYTES} bytes"
            )
        return data
    declared = str(environ.get("CONTENT_LENGTH") or "").strip()
    if not declared:
        return b""
    if not declared.isdigit() or not declared.isascii():  # "-5", "1e3", "5, 7" are not lengths
        raise _BadRequestError(
            HTTPStatus.BAD_REQUEST,
            f"Content-Length {declared[:40]!r} is not a number of bytes",
        )
    length = int(declared[:20])
    if length > MAX_BODY_BYTES:
        raise _BadRequestError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body exceeds {MAX_BODY_BYTES} bytes"
        )
    data = _read_exactly(stream, environ.get("werkzeug.socket"), length)
    if len(data) < length:
        raise _BadRequestError(
            HTTPStatus.BAD_REQUEST,
            f"the body ended after {len(data)} of the {length} bytes its Content-Length "
            f"declares (nothing more arrived within {BODY_READ_SECONDS:g}s)",
        )
    return data


def _read_chunked(stream: Any, sock: socket.socket | None) -> bytes:
    """A chunked body to its end (at most one byte past the cap).

    Each wait for more bytes is bounded by ``BODY_READ_SECONDS`` (werkzeug's dechunking stream
    reads the socket itself, so there is no overall deadline as for a Content-Length body).

    Raises:
        _BadRequestError: 400 if nothing arrives for that long before the last chunk.
    """
    previous = sock.gettimeout() if sock is not None else None
    if sock is not None:
        sock.settimeout(BODY_READ_SECONDS)
    try:
        data: bytes = stream.read(MAX_BODY_BYTES + 1)
    except TimeoutError as exc:
        raise _BadRequestError(
            HTTPStatus.BAD_REQUEST,
            f"the chunked body stalled: nothing arrived for {BODY_READ_SECONDS:g}s before its "
            "last chunk",
        ) from exc
    finally:
        if sock is not None:
            sock.settimeout(previous)
    return data


def _read_exactly(stream: Any, sock: socket.socket | None, length: int) -> bytes:
    """Up to ``length`` bytes, for at most ``BODY_READ_SECONDS`` in all.

    Less comes back if the client stops sending or closes: a request whose Content-Length
    overstates its body is answered with a 400 instead of waiting for the connection's idle
    timeout, which drops it without a word.
    """
    # One buffer of the declared size, read into: a large body is one allocation the allocator
    # gives back when it is freed (allocator.py), not a hundred 64 KiB chunks it keeps.
    buffer = bytearray(length)
    view = memoryview(buffer)
    received = 0
    deadline = time.monotonic() + BODY_READ_SECONDS
    previous = sock.gettimeout() if sock is not None else None
    try:
        while received < length:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if sock is not None:  # per read: a client trickling bytes is bounded by the deadline
                sock.settimeout(remaining)
            try:
                count = _read_into(stream, view[received : received + 65536])
            except TimeoutError:
                break
            if not count:
                break
            received += count
    finally:
        view.release()
        if sock is not None:
            sock.settimeout(previous)
    return bytes(buffer) if received == length else bytes(buffer[:received])


def _read_into(stream: Any, target: memoryview) -> int:
    """Reads what has arrived (up to ``len(target)`` bytes) into ``target``; 0 at the end."""
    read_into = getattr(stream, "readinto1", None) or getattr(stream, "readinto", None)
    if read_into is not None:
        return int(read_into(target) or 0)
    read = getattr(stream, "read1", stream.read)  # read1: what has arrived, not all
    chunk: bytes = read(len(target))
    target[: len(chunk)] = chunk
    return len(chunk)


class _QuietHandler(WSGIRequestHandler):
    # A browser keeps idle connections open; without a timeout a clean shutdown waits for them.
    timeout = 5

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Silenced: the invoked function logs one line per request."""


class ApiServer(ThreadedWSGIServer):
    """A threaded WSGI server (werkzeug) on loopback that routes requests to the Api functions.

    Args:
        routes: The Api routes.
        port: The TCP port (``0`` picks a free one).
        caller_arn: The IAM caller of requests without an ``X-Local-Caller-Arn`` header.
        acting_as: ``--act-as``: the approver and reviewer patterns that caller decides as.

    Raises:
        OSError: If the port cannot be bound.
    """

    daemon_threads = False  # shutdown waits for in-flight requests
    block_on_close = True
    # A burst of connections (a page's assets, a test's threads) waits in the backlog instead
    # of being reset; werkzeug's own default is 128.
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        routes: Sequence[Route],
        port: int = DEFAULT_PORT,
        *,
        caller_arn: str = LOCAL_CALLER_ARN,
        acting_as: Sequence[str] = (),
    ):
        self.routes = list(routes)
        self.caller_arn = caller_arn
        self.acting_as = tuple(acting_as)
        # Bound here, not by werkzeug: on a bind error werkzeug prints and calls sys.exit(1);
        # the worker turns an OSError into a message that names the port.
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((HOST, port))
            listener.listen(LISTEN_BACKLOG)
            super().__init__(HOST, port, self._wsgi, handler=_QuietHandler, fd=listener.fileno())
        finally:
            listener.close()  # werkzeug serves a duplicate of the descriptor

    def find(self, method: str, path: str) -> tuple[Route, dict[str, str]] | HTTPStatus:
        """Matches a request: the route and its parameters, or 404/405.

        ``path`` is the raw request target: it is split into segments before they are decoded,
        so a ``%2F`` stays inside its segment (an operation id of a nested scope).
        """
        segments = [unquote(s) for s in urlsplit(path).path.split("/") if s]
        allowed = False
        for route in self.routes:
            params = route.match(segments)
            if params is None:
                continue
            if route.method in (method, "ANY"):
                return route, params
            allowed = True
        return HTTPStatus.METHOD_NOT_ALLOWED if allowed else HTTPStatus.NOT_FOUND

    def allowed_methods(self, path: str) -> list[str]:
        """The methods declared for ``path``."""
        segments = [unquote(s) for s in urlsplit(path).path.split("/") if s]
        return sorted({r.method for r in self.routes if r.match(segments) is not None})

    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        method = str(environ["REQUEST_METHOD"])
        # The raw target, not PATH_INFO: WSGI decodes %2F in PATH_INFO before we could route.
        target = _undance(str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or "/"))
        status, headers, payload = self._respond(method, target, environ)
        if _declared_length(environ) >= LARGE_BODY_BYTES:
            # A request refused by raising (413, 415, 422, ...) leaves its frames, and the body
            # they hold, in a reference cycle through the exception's traceback, freed only by
            # a full collection that may not come for a long time: with bodies of megabytes,
            # local mode grew by hundreds of MiB (scripts/bench_loop.py --hostile). Collect now.
            gc.collect()
        names = {k.lower() for k, _ in headers}
        # The server's own "Connection: close" (after a broken body) stays: it makes werkzeug
        # close the connection instead of reading the rest of a body as the next request.
        out = [(k, v) for k, v in headers if k.lower() != "content-length"]
        if "content-type" not in names:
            out.append(("Content-Type", "application/json"))
        out.append(("Content-Length", str(len(payload))))
        start_response(f"{status} {_phrase(status)}", out)
        return [b"" if method == "HEAD" else payload]

    def _respond(
        self, method: str, target: str, environ: Mapping[str, Any]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        host = environ.get("HTTP_HOST")
        port = int(self.server_address[1])
        if not is_own_host(None if host is None else _undance(str(host)), port):
            # Before routing: a rebound page must not learn which routes exist either.
            return (
                HTTPStatus.MISDIRECTED_REQUEST.value,
                [("Content-Type", "text/plain; charset=utf-8"), ("Connection", "close")],
                (
                    f"local mode answers only Host 127.0.0.1:{port}, localhost:{port} or "
                    f"[::1]:{port}, not {_undance(str(host))[:100]!r}; open it by one of "
                    "those names\n"
                ).encode(),
            )
        found = self.find(method, target)
        if isinstance(found, HTTPStatus):
            if found is HTTPStatus.METHOD_NOT_ALLOWED:
                allowed = ", ".join(self.allowed_methods(target))
                return _error(
                    found, f"{method} is not allowed here; use {allowed}", [("Allow", allowed)]
                )
            return _error(found, f"no route for {method} {urlsplit(target).path}")
        route, params = found
        try:
            body = _read_body(environ)
            if body:
                body.decode("utf-8")  # API Gateway's text bodies; the Api's routes take JSON
        except _BadRequestError as exc:
            return _error(exc.status, exc.message, [("Connection", "close")])
        except UnicodeDecodeError as exc:
            return _error(
                HTTPStatus.BAD_REQUEST,
                f"the body is not UTF-8 (invalid byte at position {exc.start})",
            )
        event = build_event(
            route,
            params,
            method=method,
            raw_path=target,
            headers=_request_headers(environ),
            body=body,
            source_ip=str(environ.get("REMOTE_ADDR") or HOST),
            caller_arn=self.caller_arn,
            acting_as=self.acting_as,
        )
        try:
            response = route.function.invoke(event)
        except Exception:  # logged by invoke; API Gateway answers 502
            return _error(HTTPStatus.BAD_GATEWAY, "the function raised; see the worker's log")
        if not isinstance(response, Mapping) or "statusCode" not in response:
            return _error(HTTPStatus.BAD_GATEWAY, "the function returned no statusCode")
        raw = response.get("body") or ""
        payload = base64.b64decode(raw) if response.get("isBase64Encoded") else str(raw).encode()
        # A function does not manage the connection; API Gateway would not let it either.
        headers = [(k, v) for k, v in response_headers(response) if k.lower() != "connection"]
        return int(response["statusCode"]), headers, payload


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _error(
    status: HTTPStatus, message: str, extra: list[tuple[str, str]] | None = None
) -> tuple[int, list[tuple[str, str]], bytes]:
    body = {"error": {"type": status.phrase.replace(" ", ""), "message": message}}
    return status.value, extra or [], json.dumps(body).encode()
