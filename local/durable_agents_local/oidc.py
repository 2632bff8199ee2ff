"""A local OIDC issuer, so the people's routes (``/people/approvals/{id}``) work locally.

``durable-agents local --local-oidc`` starts one on ``http://127.0.0.1:3001``
(``--oidc-port``) and points the functions' ``JWT_ISSUER`` / ``JWT_AUDIENCE`` /
``JWT_JWKS_URL`` at it; the Api then verifies its tokens exactly as it verifies a Cognito
user pool's (``waits.auth.JwtVerifier``: RS256, issuer, audience, expiry). It serves:

* ``GET /.well-known/openid-configuration`` and ``GET /.well-known/jwks.json``: the discovery
  document and the public key;
* ``POST /token`` (``{"user": ..., "groups": [...], "ttl_seconds": ...}``): a signed token
  for that person. ``durable-agents token USER --group G`` calls it and prints the token.

It answers only requests whose ``Host`` is one of its own loopback names (127.0.0.1, localhost,
[::1], with its port), with 421 otherwise: a web page that rebinds its DNS name to 127.0.0.1
must not get tokens from it. A malformed request (a bad or overstated ``Content-Length``, a
``ttl_seconds`` that is not a whole number) gets 400 with a message.

It can never stand in for a real issuer on AWS: the signing key is made in memory at start-up
and dies with the process; the issuer listens on loopback only, and its URL (``http://`` to
127.0.0.1) is one a Lambda cannot reach; it refuses to start inside a Lambda execution
environment (``AWS_LAMBDA_FUNCTION_NAME`` set); and nothing in ``template.yaml`` refers to it.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from durable_agents.core.clock import SystemClock
from durable_agents.errors import ConfigurationError
from durable_agents_local.identity import is_own_host
from durable_agents_local.no_redirects import OPENER

HOST = "127.0.0.1"
DEFAULT_PORT = 3001
LOCAL_AUDIENCE = "durable-agents-local"
DEFAULT_TTL_SECONDS = 3600
MAX_TTL_SECONDS = 24 * 3600
_MAX_BODY = 16 * 1024
BODY_READ_SECONDS = 3.0
"""How long a request's body may take to arrive before the issuer answers 400."""


class LocalIssuerRefusedError(ConfigurationError):
    """The local issuer was asked to start where it must not (inside Lambda)."""


class LocalTokenError(Exception):
    """The local issuer could not be reached or refused to mint a token."""


class _BrokenBodyError(Exception):
    """A request body the issuer cannot read as declared (answered 400, connection closed)."""


def _ttl(value: Any) -> int:
    """A token lifetime from a request: a JSON whole number of seconds (absent: the default).

    Raises:
        ValueError: For anything else (a float such as ``1e999``, a bool, a string).
    """
    if value is None:
        return DEFAULT_TTL_SECONDS
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"ttl_seconds must be a whole number of seconds, 1..{MAX_TTL_SECONDS}; "
            f"got {json.dumps(value)[:40]}"
        )
    return value


class LocalIssuer:
    """The issuer: an RSA key made now, and a loopback HTTP server publishing it.

    Args:
        port: The TCP port on 127.0.0.1 (``0`` picks a free one).
    """

    def __init__(self, port: int = DEFAULT_PORT):
        self._port = port
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = secrets.token_hex(8)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on.

        Raises:
            RuntimeError: If the issuer is not started.
        """
        if self._server is None:
            raise RuntimeError("the local issuer is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The issuer URL (the ``iss`` claim).

        Raises:
            RuntimeError: If the issuer is not started.
        """
        if self._server is None:
            raise RuntimeError("the local issuer is not started")
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        """Binds the port and serves in a daemon thread.

        Raises:
            LocalIssuerRefusedError: Inside a Lambda execution environment.
            OSError: If the port cannot be bound.
        """
        if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
            raise LocalIssuerRefusedError(
                "the local OIDC issuer runs only in local mode, never inside Lambda "
                f"(AWS_LAMBDA_FUNCTION_NAME={os.environ['AWS_LAMBDA_FUNCTION_NAME']!r})"
            )
        issuer = self

        class _Handler(BaseHTTPRequestHandler):
            # Idle or stalled connections are not held forever (setup() applies it).
            timeout = 10

            def log_message(self, format: str, *args: Any) -> None:
                """Silenced: local mode logs its own lines."""

            def do_GET(self) -> None:
                if not self._own_host():
                    return
                documents = {
                    "/.well-known/openid-configuration": issuer.discovery,
                    "/.well-known/jwks.json": issuer.jwks,
                }
                make = documents.get(self.path.split("?")[0])
                if make is None:
                    self._reply(HTTPStatus.NOT_FOUND, {"error": f"no document at {self.path}"})
                else:
                    self._reply(HTTPStatus.OK, make())

            def do_POST(self) -> None:
                if not self._own_host():
                    return
                if self.path.split("?")[0] != "/token":
                    self._reply(HTTPStatus.NOT_FOUND, {"error": f"no endpoint at {self.path}"})
                    return
                try:
                    body = json.loads(self._body() or b"{}")
                    if not isinstance(body, dict):
                        raise ValueError("the body must be a JSON object")
                    token = issuer.mint(
                        str(body.get("user") or ""),
                        groups=[str(g) for g in body.get("groups") or []],
                        ttl_seconds=_ttl(body.get("ttl_seconds")),
                    )
                except _BrokenBodyError as exc:
                    self.close_connection = True  # the rest of the body must not be parsed
                    self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                    return
                except (ValueError, TypeError, RecursionError) as exc:
                    message = (
                        "the body nests too deeply" if isinstance(exc, RecursionError) else str(exc)
                    )
                    self._reply(HTTPStatus.BAD_REQUEST, {"error": message})
                    return
                self._reply(HTTPStatus.OK, {"token": token, "token_type": "Bearer"})

            def _own_host(self) -> bool:
                """Whether ``Host`` names this issuer; answers 421 itself if not."""
                port = issuer.port
                host = self.headers.get("Host")
                if is_own_host(host, port):
                    return True
                payload = (
                    f"the local OIDC issuer answers only Host 127.0.0.1:{port}, "
                    f"localhost:{port} or [::1]:{port}, not {str(host)[:100]!r}\n"
                ).encode()
                self.close_connection = True
                self.send_response(HTTPStatus.MISDIRECTED_REQUEST)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(payload)
                return False

            def _body(self) -> bytes:
                """The body its Content-Length declares, read within ``BODY_READ_SECONDS``.

                Raises:
                    _BrokenBodyError: For a Content-Length that is not a byte count, is over
                        the limit, or overstates the body.
                """
                declared = (self.headers.get("Content-Length") or "").strip()
                if not declared:
                    return b""
                if not declared.isdigit() or not declared.isascii():
                    raise _BrokenBodyError(
                        f"Content-Length {declared[:40]!r} is not a number of bytes"
                    )
                length = int(declared[:20])
                if length > _MAX_BODY:
                    raise _BrokenBodyError(
                        f"the body must be at most {_MAX_BODY} bytes (Content-Length {length})"
                    )
                data = b""
                deadline = time.monotonic() + BODY_READ_SECONDS
                try:
                    while len(data) < length and (remaining := deadline - time.monotonic()) > 0:
                        self.connection.settimeout(remaining)
                        chunk = self.rfile.read1(length - len(data))
                        if not chunk:
                            break
                        data += chunk
                except TimeoutError:
                    pass
                finally:
                    self.connection.settimeout(self.timeout)
                if len(data) < length:
                    raise _BrokenBodyError(
                        f"the body ended after {len(data)} of the {length} bytes its "
                        f"Content-Length declares"
                    )
                return data

            def _reply(self, status: HTTPStatus, document: dict[str, Any]) -> None:
                payload = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer((HOST, self._port), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="local-oidc", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stops serving (safe to call twice)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def environment(self) -> dict[str, str]:
        """The functions' ``JWT_*`` settings for this issuer.

        ``sub`` and ``email`` both match ``user:`` approver patterns.
        """
        return {
            "JWT_ISSUER": self.url,
            "JWT_AUDIENCE": LOCAL_AUDIENCE,
            "JWT_JWKS_URL": f"{self.url}/.well-known/jwks.json",
            "JWT_USER_CLAIMS": "sub,email",
        }

    def discovery(self) -> dict[str, Any]:
        """The OIDC discovery document."""
        return {
            "issuer": self.url,
            "jwks_uri": f"{self.url}/.well-known/jwks.json",
            "token_endpoint": f"{self.url}/token",
            "id_token_signing_alg_values_supported": ["RS256"],
        }

    def jwks(self) -> dict[str, Any]:
        """The public key as a JWKS."""
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def mint(
        self,
        user: str,
        *,
        groups: Sequence[str] = (),
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        now_s: int | None = None,
    ) -> str:
        """A token for ``user`` (its ``sub``; also its verified ``email`` if it has an ``@``).

        Args:
            user: Who the token names.
            groups: Its ``groups`` claim (``group:`` approver patterns match them).
            ttl_seconds: Its lifetime.
            now_s: Its issue time (now by default; a test's skip-clock time otherwise).

        Raises:
            ValueError: If the user is empty or the lifetime is out of range.
        """
        if not user.strip():
            raise ValueError("a token needs a user")
        if not 1 <= ttl_seconds <= MAX_TTL_SECONDS:
            raise ValueError(f"ttl_seconds must be 1..{MAX_TTL_SECONDS}")
        now = SystemClock().now_ms() // 1000 if now_s is None else now_s
        claims: dict[str, Any] = {
            "iss": self.url,
            "aud": LOCAL_AUDIENCE,
            "sub": user,
            "groups": list(groups),
            "iat": now,
            "exp": now + ttl_seconds,
        }
        if "@" in user:
            claims.update(email=user, email_verified=True)
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.kid})


def request_token(
    issuer_url: str, user: str, *, groups: Sequence[str] = (), ttl_seconds: int | None = None
) -> str:
    """Asks a running local issuer (``durable-agents local --local-oidc``) for a token.

    Raises:
        LocalTokenError: If the issuer does not answer or refuses.
    """
    body = {"user": user, "groups": list(groups)}
    if ttl_seconds is not None:
        body["ttl_seconds"] = ttl_seconds  # type: ignore[assignment]
    request = urllib.request.Request(  # noqa: S310 - a loopback URL the caller gives
        f"{issuer_url.rstrip('/')}/token",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with OPENER.open(request, timeout=10) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:200]
        raise LocalTokenError(f"{issuer_url} refused: {exc.code} {detail}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise LocalTokenError(
            f"no local issuer answers at {issuer_url} (start local mode with --local-oidc): {exc}"
        ) from exc
    return str(answer["token"])
