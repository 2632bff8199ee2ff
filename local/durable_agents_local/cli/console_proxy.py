"""``durable-agents console --api-url URL``: the deployed run console in a local browser.

The console's routes are IAM routes (docs/adr/0013-run-console.md) and a browser cannot sign
SigV4. This serves on 127.0.0.1 and forwards the console's requests to the Api, each signed
with the operator's own AWS credentials (botocore's ``SigV4Auth``, service ``execute-api``).
It forwards only what the console needs — ``GET``/``POST`` under ``/console`` and ``GET
/runs/{id}/history`` — so it is not a general signing oracle for the Api, and it refuses:

* a request whose ``Host`` is not the proxy's own loopback address (a DNS-rebinding page
  would otherwise be "same-origin" with it);
* a ``POST`` that the browser does not call same-origin (``Sec-Fetch-Site``), before signing
  anything — the Api checks the forwarded header again;
* (400) a path with a ``.`` or ``..`` segment or a backslash, however percent-encoded: the
  Api's side may resolve ``/console/../runs/{id}/cancel`` to a route that is not the console's,
  so such a path never reaches the allow-list;
* (400) a body whose length is not one plain ``Content-Length`` from 0 to ``MAX_BODY_BYTES``
  (a chunked body included); the connection is closed after the answer, as the body is unread.

The Api must be https (plain http only to a loopback host): the signature and the session
token are not sent in the clear. Responses (redirects included: the console's are relative)
are passed back as they are, never followed by the proxy.
"""

from __future__ import annotations

import http.client
import logging
import re
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from durable_agents_local.cli.api_client import is_loopback_host
from durable_agents_local.cli.tables import escape_controls

log = logging.getLogger("durable_agents.console")

HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MAX_BODY_BYTES = 256 * 1024
TIMEOUT_SECONDS = 30
FORWARDED_HEADERS = ("accept", "content-type", "sec-fetch-site", "origin")
"""What of the browser's request reaches the Api (no cookies, no credentials of its own)."""
ALLOWED = re.compile(r"/console(/[^?#]*)?|/runs/[^/?#]+/history")
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: int() would also take "+3", " 3", "٣"
_DECODE_ROUNDS = 3
"""A path still changing after this many rounds of percent-decoding is refused."""
_REGION = re.compile(r"\.execute-api\.([a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com$")

Signer = Callable[[str, str, Mapping[str, str], bytes], dict[str, str]]
"""(method, url, headers, body) -> the headers to send (the signature's among them)."""


class ConsoleProxyError(Exception):
    """The Api URL or the local credentials cannot be used for the proxy."""


def region_of(api_url: str) -> str:
    """The region in an execute-api URL.

    >>> region_of("https://abc123.execute-api.eu-west-1.amazonaws.com/Prod")
    'eu-west-1'

    Raises:
        ConsoleProxyError: If the host is not an execute-api host (pass ``--region`` then).
    """
    found = _REGION.search(urlsplit(api_url).hostname or "")
    if not found:
        raise ConsoleProxyError(f"cannot tell the region of {api_url!r}: pass --region")
    return found.group(1)


def upstream_of(api_url: str) -> SplitResult:
    """The parts of the Api's URL, once it is one the proxy may send signed requests to.

    >>> upstream_of("https://abc123.execute-api.eu-west-1.amazonaws.com/Prod/").path
    '/Prod'

    Raises:
        ConsoleProxyError: If it is not an http(s) URL with a host, or it is plain http to a
            host that is not loopback (127.0.0.0/8, ::1, localhost): the signature and the
            session token would cross the network unencrypted.
    """
    try:
        parts = urlsplit(api_url.rstrip("/"))
        host = parts.hostname
    except ValueError as exc:  # an unbalanced [ in an IPv6 host
        raise ConsoleProxyError(f"--api-url must be the Api's URL, not {api_url!r}") from exc
    if parts.scheme not in ("https", "http") or not host:
        raise ConsoleProxyError(f"--api-url must be the Api's URL, not {api_url!r}")
    if parts.scheme == "http" and not is_loopback_host(host):
        raise ConsoleProxyError(
            f"refusing to sign requests to {api_url}: over plain http the SigV4 signature and "
            "session token would cross the network unencrypted; use the Api's https:// URL"
        )
    return parts


def sigv4_signer(region: str) -> Signer:
    """Signs requests for ``execute-api`` in ``region`` with the default credential chain.

    Raises:
        ConsoleProxyError: If no AWS credentials are configured.
    """
    import botocore.session  # noqa: PLC0415 - only the proxy needs botocore's signer
    from botocore.auth import SigV4Auth  # noqa: PLC0415
    from botocore.awsrequest import AWSRequest  # noqa: PLC0415

    credentials = botocore.session.Session().get_credentials()
    if credentials is None:
        raise ConsoleProxyError("no AWS credentials: configure a profile or AWS_* variables")

    def sign(method: str, url: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
        # Credentials are read on every request: a refreshed session (SSO, a role) applies.
        SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
        return dict(request.headers.items())

    return sign


class BadRequestError(ValueError):
    """The request is malformed (the message says how); the proxy answers 400."""


def check_path(path: str) -> None:
    """Refuses a request path with a dot segment or a backslash, however encoded.

    The path (its query left aside) is percent-decoded until it no longer changes, as a
    server behind the Api might decode it more than once; then a ``.`` or ``..`` segment
    (``..;x`` too, which some servers read as ``..``) or a backslash (a separator to some)
    refuses it.

    >>> check_path("/console/runs/r-1?back=../..")
    >>> check_path("/console/%2e%2e/runs/r-1/cancel")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    BadRequestError: a '.' or '..' segment in the path is not accepted (...)

    Raises:
        BadRequestError: If the path has such a segment, a backslash, or is still encoded
            after ``_DECODE_ROUNDS`` rounds of decoding.
    """
    decoded = path.split("?", 1)[0]
    for _ in range(_DECODE_ROUNDS):
        once = unquote(decoded, errors="replace")
        if once == decoded:
            break
        decoded = once
    else:
        if unquote(decoded, errors="replace") != decoded:
            raise BadRequestError("the path is percent-encoded too many times over")
    if "\\" in decoded:
        raise BadRequestError("a backslash in the path is not accepted")
    if any(part.split(";", 1)[0] in (".", "..") for part in decoded.split("/")):
        raise BadRequestError(
            "a '.' or '..' segment in the path is not accepted (it could leave the console)"
        )


def body_length(lengths: list[str], transfer_encodings: list[str]) -> int:
    """The request body's length, from its ``Content-Length`` header(s).

    >>> body_length(["42"], [])
    42

    Raises:
        BadRequestError: If the body is chunked (any ``Transfer-Encoding``), the headers
            disagree, or the length is not ASCII digits from 0 to ``MAX_BODY_BYTES``.
    """
    if transfer_encodings:
        raise BadRequestError("a Transfer-Encoding body is not accepted: send Content-Length")
    values = {value.strip() for value in lengths}
    if not values:
        return 0
    if len(values) > 1:
        raise BadRequestError("Content-Length is given more than once, with different values")
    (text,) = values
    if not _DIGITS.fullmatch(text):
        raise BadRequestError(f"Content-Length must be a number of bytes, not {text[:40]!r}")
    # Checked by its digits first: int() refuses (ValueError) over 4300 of them.
    if len(text.lstrip("0")) > len(str(MAX_BODY_BYTES)) or int(text) > MAX_BODY_BYTES:
        raise BadRequestError(f"the body is over {MAX_BODY_BYTES} bytes (Content-Length)")
    return int(text)


def refusal(method: str, path: str, headers: Mapping[str, str], own_hosts: set[str]) -> str | None:
    """Why the proxy does not forward this request, or None to forward it.

    >>> refusal("GET", "/console", {"host": "127.0.0.1:8765"}, {"127.0.0.1:8765"}) is None
    True
    >>> refusal("GET", "/runs", {"host": "127.0.0.1:8765"}, {"127.0.0.1:8765"})
    'the proxy forwards the console only (/console, /runs/{id}/history)'
    """
    if headers.get("host", "").lower() not in own_hosts:
        return "unexpected Host: open the console at the proxy's own address"
    route = path.split("?", 1)[0]
    try:
        check_path(path)  # ALLOWED would match /console/../runs/{id}/cancel
    except BadRequestError as exc:
        return str(exc)
    if method not in ("GET", "POST") or not ALLOWED.fullmatch(route):
        return "the proxy forwards the console only (/console, /runs/{id}/history)"
    if method == "POST" and (headers.get("sec-fetch-site") or "").lower() != "same-origin":
        return "console forms are forwarded from the console's own pages only"
    return None


class ConsoleProxy(ThreadingHTTPServer):
    """The loopback server; ``serve_forever()`` runs it, ``shutdown()`` stops it."""

    daemon_threads = True

    def __init__(self, api_url: str, signer: Signer, port: int = DEFAULT_PORT) -> None:
        """Binds 127.0.0.1:``port`` (0: any free port).

        Raises:
            ConsoleProxyError: If ``api_url`` cannot be used (``upstream_of``).
            OSError: If the port cannot be bound.
        """
        self.upstream = upstream_of(api_url)
        self.signer = signer
        super().__init__((HOST, port), _Handler)
        bound = self.server_address[1]
        self.own_hosts = {f"{HOST}:{bound}", f"localhost:{bound}"}

    @property
    def url(self) -> str:
        """Where to point the browser."""
        return f"http://{HOST}:{self.server_address[1]}/console"


class _Handler(BaseHTTPRequestHandler):
    server: ConsoleProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        # The request line is anyone's bytes: a log read on a terminal gets them escaped.
        log.info("%s %s", self.address_string(), escape_controls(format % args))

    def do_GET(self) -> None:
        self._forward("GET")

    def do_POST(self) -> None:
        self._forward("POST")

    def _reply(
        self, status: int, body: bytes, headers: Mapping[str, str], *, close: bool = False
    ) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, status: HTTPStatus, why: str) -> None:
        # The body (if any) is left unread: closing the connection keeps it from being read
        # as the next request.
        plain = {"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"}
        self._reply(status, why.encode(), plain, close=True)

    def _forward(self, method: str) -> None:
        incoming = {k.lower(): v for k, v in self.headers.items()}
        try:
            check_path(self.path)
            length = body_length(
                self.headers.get_all("Content-Length") or [],
                self.headers.get_all("Transfer-Encoding") or [],
            )
        except BadRequestError as exc:
            self._refuse(HTTPStatus.BAD_REQUEST, str(exc))
            return
        why = refusal(method, self.path, incoming, self.server.own_hosts)
        if why is not None:
            self._refuse(HTTPStatus.FORBIDDEN, why)
            return
        body = self.rfile.read(length) if length else b""
        up = self.server.upstream
        url = f"{up.scheme}://{up.netloc}{up.path}{self.path}"
        headers = {k: incoming[k] for k in FORWARDED_HEADERS if k in incoming}
        headers["host"] = up.netloc
        signed = self.server.signer(method, url, headers, body)
        connection_type = (
            http.client.HTTPSConnection if up.scheme == "https" else http.client.HTTPConnection
        )
        connection = connection_type(up.netloc, timeout=TIMEOUT_SECONDS)
        try:
            connection.request(method, f"{up.path}{self.path}", body=body or None, headers=signed)
            answer = connection.getresponse()
            payload = answer.read()
            passed = {
                k: v
                for k, v in answer.getheaders()
                if k.lower() not in ("content-length", "transfer-encoding", "connection")
            }
            self._reply(answer.status, payload, passed)
        except OSError as exc:
            self._reply(
                HTTPStatus.BAD_GATEWAY,
                f"the Api did not answer: {exc}".encode(),
                {"Content-Type": "text/plain; charset=utf-8"},
            )
        finally:
            connection.close()


def add_parser(commands: Any) -> None:
    """Adds ``durable-agents console`` to the CLI's subcommands."""
    console = commands.add_parser(
        "console", help="open a deployed Api's run console through a local SigV4 signing proxy"
    )
    console.add_argument("--api-url", required=True, help="the Api's URL, with its stage")
    console.add_argument("--region", help="the Api's region (default: from the URL)")
    console.add_argument("--port", type=int, default=DEFAULT_PORT, help="the local port")


def run(args: Any) -> int:
    """Serves the console proxy until interrupted; 2 when the URL or credentials cannot work."""
    try:
        upstream_of(args.api_url)  # a URL that cannot be used, before credentials are read
        signer = sigv4_signer(args.region or region_of(args.api_url))
        proxy = ConsoleProxy(args.api_url, signer, args.port)
    except (ConsoleProxyError, OSError) as exc:
        print(f"error: {escape_controls(str(exc))}")
        return 2
    print(f"console: {proxy.url}  (signing for {args.api_url}; Ctrl-C stops)", flush=True)
    try:
        proxy.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        proxy.server_close()
    return 0
