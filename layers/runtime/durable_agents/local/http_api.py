"""The Api events of the template, served on loopback as API Gateway REST (v1) proxy events.

Each HTTP request is matched against the declared ``Method`` + ``Path`` routes, turned into
the event API Gateway would send (``resource`` with its ``{param}`` template, path and query
parameters, headers, body, a ``requestContext`` with the caller's address) and handed to the
function; its ``statusCode``/``headers``/``body`` become the HTTP response. Unknown paths get
404 and known paths with another method 405, as JSON. IAM (SigV4) auth is not enforced: the
server binds 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from durable_agents.clock import SystemClock
from durable_agents.local.invoke import LocalFunction
from durable_agents.local.lambda_context import LOCAL_ACCOUNT_ID

log = logging.getLogger("durable_agents.local")

HOST = "127.0.0.1"
DEFAULT_PORT = 3000
STAGE = "local"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit


@dataclass(frozen=True, slots=True)
class Route:
    """One Api event: a method on a resource path, served by a function.

    Attributes:
        method: HTTP method (``ANY`` matches all).
        resource: The declared path, e.g. ``/runs/{run_id}``.
        function: The function that serves it.
    """

    method: str
    resource: str
    function: LocalFunction

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
    headers: Message,
    body: bytes,
    source_ip: str,
) -> dict[str, Any]:
    """Builds the API Gateway REST (v1) proxy event for one request.

    Args:
        route: The matched route.
        params: The path parameters.
        method: The request method.
        raw_path: The request target (path and query string).
        headers: The request headers.
        body: The raw body.
        source_ip: The client's address.

    Returns:
        The event, as API Gateway would deliver it to the function.
    """
    parts = urlsplit(raw_path)
    path = unquote(parts.path)
    query, multi_query = _multi(parse_qsl(parts.query, keep_blank_values=True))
    single_headers, multi_headers = _multi(list(headers.items()))
    try:
        text: str | None = body.decode("utf-8") if body else None
        is_base64 = False
    except UnicodeDecodeError:
        text, is_base64 = base64.b64encode(body).decode(), True
    now_ms = SystemClock().now_ms()
    request_id = secrets.token_hex(16)
    return {
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
                "caller": "local",
                "user": "local",
                # API Gateway authenticates IAM callers on AWS; locally every caller is this
                # local principal (or the one an X-Local-Caller-Arn header names, for tests).
                "userArn": single_headers.get("X-Local-Caller-Arn")
                or f"arn:aws:iam::{LOCAL_ACCOUNT_ID}:user/local",
                "accountId": LOCAL_ACCOUNT_ID,
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


class ApiServer(ThreadingHTTPServer):
    """A threading HTTP server on loopback that routes requests to the Api functions.

    Args:
        routes: The Api routes.
        port: The TCP port (``0`` picks a free one).
    """

    daemon_threads = False  # shutdown waits for in-flight requests
    block_on_close = True

    def __init__(self, routes: Sequence[Route], port: int = DEFAULT_PORT):
        self.routes = list(routes)
        super().__init__((HOST, port), _RequestHandler)

    def find(self, method: str, path: str) -> tuple[Route, dict[str, str]] | HTTPStatus:
        """Matches a request: the route and its parameters, or 404/405."""
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


class _RequestHandler(BaseHTTPRequestHandler):
    server: ApiServer
    server_version = "durable-agents-local"
    # A browser keeps idle connections open; without a timeout a clean shutdown waits for them.
    timeout = 5

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: the invoked function logs one line per request."""

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        names = {k.lower() for k, _ in headers}
        for key, value in headers:
            if key.lower() not in ("content-length", "connection"):
                self.send_header(key, value)
        if "content-type" not in names:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(
        self, status: HTTPStatus, message: str, extra: list[tuple[str, str]] | None = None
    ) -> None:
        body = {"error": {"type": status.phrase.replace(" ", ""), "message": message}}
        self._send(status.value, extra or [], json.dumps(body).encode())

    def _dispatch(self) -> None:
        found = self.server.find(self.command, self.path)
        if isinstance(found, HTTPStatus):
            if found is HTTPStatus.METHOD_NOT_ALLOWED:
                allowed = ", ".join(self.server.allowed_methods(self.path))
                self._error(
                    found,
                    f"{self.command} is not allowed here; use {allowed}",
                    [("Allow", allowed)],
                )
            else:
                self._error(found, f"no route for {self.command} {urlsplit(self.path).path}")
            return
        route, params = found
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body exceeds {MAX_BODY_BYTES} bytes"
            )
            return
        body = self.rfile.read(length) if length else b""
        event = build_event(
            route,
            params,
            method=self.command,
            raw_path=self.path,
            headers=self.headers,
            body=body,
            source_ip=self.client_address[0],
        )
        try:
            response = route.function.invoke(event)
        except Exception:  # logged by invoke; API Gateway answers 502
            self._error(HTTPStatus.BAD_GATEWAY, "the function raised; see the worker's log")
            return
        if not isinstance(response, Mapping) or "statusCode" not in response:
            self._error(HTTPStatus.BAD_GATEWAY, "the function returned no statusCode")
            return
        raw = response.get("body") or ""
        payload = base64.b64decode(raw) if response.get("isBase64Encoded") else str(raw).encode()
        self._send(int(response["statusCode"]), response_headers(response), payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _dispatch
