"""moto with DynamoDB's isolation: one DynamoDB request at a time; optionally durable.

DynamoDB checks a write's condition and applies the write atomically (transactions included),
so two racing conditional writes can never both succeed. moto's threaded server handles
requests concurrently without that isolation: a condition checked by one request can be
overtaken by another's write. Local mode and the concurrency tests use this server, which
serialises requests, so races behave as they would on AWS while clients stay concurrent.

With a state directory (``durable_store``) the requests of every persisted service go through
that lock, and the accepted writes are logged to disk before they are acknowledged.

The store answers local mode's SDK clients, never a web page (``refuse_browsers``): a request
whose ``Host`` is not the store's own loopback address gets 421 (a page that rebinds its DNS
name to 127.0.0.1 must not read or write the journal), and a request carrying what only a
browser sends (``Origin``, ``Sec-Fetch-*``) gets 403 (any page may post a form to 127.0.0.1
blindly; S3's POST-object upload is such a form). Local mode's store also answers only
its own processes (``require_store_key``): a request whose access key id is not the
store's session key (``store_key``) gets 403, so another local user or process cannot read or
write it either.
"""

from __future__ import annotations

import hmac
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from durable_agents_local.identity import LOOPBACK_NAMES, is_own_host

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# Headers every browser adds to a request a page makes, and no AWS SDK sends.
BROWSER_HEADERS = (
    "HTTP_ORIGIN",
    "HTTP_SEC_FETCH_SITE",
    "HTTP_SEC_FETCH_MODE",
    "HTTP_SEC_FETCH_DEST",
)


# Where an AWS SDK puts the access key id in the ``Authorization`` header: SigV4's
# ``Credential=<id>/<date>/<region>/<service>/aws4_request`` and SigV2's ``AWS <id>:<signature>``.
_HEADER_CREDENTIAL = re.compile(r"^(?:AWS4-HMAC-SHA256\s+Credential=([^/,\s]*)/|AWS ([^:\s]*):)")


def _is_dynamodb(environ: dict[str, Any]) -> bool:
    # Only DynamoDB needs it; other services keep their concurrency (an SQS long poll must not
    # hold everyone else up).
    return str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB_")


def _refusal(start_response: Callable[..., Any], status: str, message: str) -> Iterable[bytes]:
    payload = message.encode()
    start_response(
        status,
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(payload))),
            ("Connection", "close"),
        ],
    )
    return [payload]


def refuse_browsers(app: WsgiApp, bound: str | None = None) -> WsgiApp:
    """Wraps the store's WSGI app so that only local processes' SDK clients reach it.

    Refused before moto sees anything (so nothing is read or written): 421 for a ``Host`` that
    is not the store's own loopback address and port (``identity.is_own_host``), 403 for a
    request with a browser's ``Origin`` or ``Sec-Fetch-*`` headers.

    Args:
        app: The store's app.
        bound: The non-loopback address the store listens on, if any (``make sam-local``'s
            store, on the gateway of its Docker network): requests naming it are its own too.
    """

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        host = environ.get("HTTP_HOST")
        port = int(environ.get("SERVER_PORT") or 0)
        if not is_own_host(None if host is None else str(host), port, bound):
            return _refusal(
                start_response,
                "421 Misdirected Request",
                f"local mode's store answers only Host 127.0.0.1:{port} (or localhost, [::1]"
                f"{', ' + bound if bound else ''}), not {str(host)[:100]!r}\n",
            )
        sent = [k[5:].replace("_", "-").title() for k in BROWSER_HEADERS if k in environ]
        if sent:
            return _refusal(
                start_response,
                "403 Forbidden",
                f"local mode's store answers AWS SDK clients only, not a web page (the request "
                f"carries {', '.join(sent)})\n",
            )
        return app(environ, start_response)

    return guarded


def access_key_ids(environ: dict[str, Any]) -> list[str]:
    """The access key ids a request carries where an AWS SDK puts them.

    The ``Authorization`` header's (SigV4 ``Credential=<id>/...``, SigV2 ``AWS <id>:...``)
    and a presigned URL's (SigV4 ``X-Amz-Credential=<id>/...``, SigV2 ``AWSAccessKeyId=<id>``:
    boto3 presigns S3 URLs for a custom endpoint with SigV2); nothing else counts.
    """
    found: list[str] = []
    match = _HEADER_CREDENTIAL.match(str(environ.get("HTTP_AUTHORIZATION", "")))
    if match:
        found.append(match.group(1) if match.group(1) is not None else match.group(2))
    query = parse_qs(str(environ.get("QUERY_STRING", "")), keep_blank_values=True)
    found.extend(value.partition("/")[0] for value in query.get("X-Amz-Credential", []))
    found.extend(query.get("AWSAccessKeyId", []))
    return found


def require_store_key(app: WsgiApp, store_key: str, where: str) -> WsgiApp:
    """Wraps the store's WSGI app so that only holders of ``store_key`` reach it.

    A request whose access key id (``access_key_ids``) is not ``store_key`` gets 403
    before moto sees anything (nothing is read or written). The answer says what is missing,
    never the key.

    Args:
        app: The store's app.
        store_key: The session key (``store_key.new_key``).
        where: Where local mode's processes find the key (named in the refusal).
    """
    expected = store_key.encode()

    def keyed(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        offered = access_key_ids(environ)
        if any(hmac.compare_digest(key.encode(), expected) for key in offered):
            return app(environ, start_response)
        what = "another access key id" if offered else "no access key id"
        return _refusal(
            start_response,
            "403 Forbidden",
            f"local mode's store answers only local mode's processes: the request carries "
            f"{what}, not the store's session key (the access key id local mode uses; it is "
            f"in {where}, readable by the user who started the store, or in "
            f"DURABLE_AGENTS_STORE_KEY)\n",
        )

    return keyed


class IsolatedMotoServer(ThreadedMotoServer):
    """A ``ThreadedMotoServer`` whose DynamoDB requests are handled one at a time.

    Args:
        store_key: Answer only requests signed with this access key id (local mode's store:
            ``require_store_key``); None: any credentials (an in-process server of the tests,
            which is not local mode's store). Required, so that no caller forgets it.
        key_location: Where clients find the key, for the refusal's message.
        state_dir: Keep the state there (see ``durable_store``); None: in memory only.
        **kwargs: ``ThreadedMotoServer``'s arguments.
    """

    def __init__(
        self,
        *,
        store_key: str | None,
        key_location: str = "the store's key file",
        state_dir: Path | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.store_key = store_key
        self.key_location = key_location
        self.state_dir = state_dir
        self.store: Any = None
        self.open_error: BaseException | None = None

    def _app(self) -> Callable[..., Iterable[bytes]]:
        from moto.moto_server.werkzeug_app import (  # noqa: PLC0415 - moto internals
            DomainDispatcherApplication,
            create_backend_app,
        )

        app = DomainDispatcherApplication(create_backend_app)
        if self.state_dir is not None:
            from durable_agents_local.durable_store import DurableStore  # noqa: PLC0415

            self.store = DurableStore(self.state_dir)
            self.store.open(app)  # before listening: nobody sees a half-rebuilt state
            return self.store.wrap(app, _is_dynamodb)  # type: ignore[no-any-return]
        lock = threading.Lock()

        def isolated(
            environ: dict[str, Any], start_response: Callable[..., Any]
        ) -> Iterable[bytes]:
            if not _is_dynamodb(environ):
                return app(environ, start_response)  # type: ignore[no-any-return]
            with lock:  # the whole request, body included, under the lock
                return list(app(environ, start_response))

        return isolated

    def _server_entry(self) -> None:
        from moto.moto_server.werkzeug_app import MotoRequestHandler  # noqa: PLC0415
        from werkzeug.serving import make_server  # noqa: PLC0415

        try:
            app = self._app()
            if self.store_key is not None:
                app = require_store_key(app, self.store_key, self.key_location)
            loopback = self._ip_address in LOOPBACK_NAMES or self._ip_address.startswith("127.")
            app = refuse_browsers(app, None if loopback else self._ip_address)
        except BaseException as exc:  # reported by start() in the caller's thread
            self.open_error = exc
            self._server_ready_event.set()
            return
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()

    def start(self) -> None:
        """Rebuilds the state (if durable), then serves in a thread.

        Raises:
            Exception: Whatever rebuilding the state raised (``durable_store``'s errors).
        """
        super().start()
        if self.open_error is not None:
            raise self.open_error

    def stop(self) -> None:
        """Stops serving, then compacts and releases the state directory."""
        if self._server is not None:
            super().stop()
        if self.store is not None:
            self.store.close()
