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
blindly; S3's POST-object upload is such a form).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from durable_agents_local.identity import is_own_host

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# Headers every browser adds to a request a page makes, and no AWS SDK sends.
BROWSER_HEADERS = (
    "HTTP_ORIGIN",
    "HTTP_SEC_FETCH_SITE",
    "HTTP_SEC_FETCH_MODE",
    "HTTP_SEC_FETCH_DEST",
)


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


def refuse_browsers(app: WsgiApp) -> WsgiApp:
    """Wraps the store's WSGI app so that only local processes' SDK clients reach it.

    Refused before moto sees anything (so nothing is read or written): 421 for a ``Host`` that
    is not the store's own loopback address and port (``identity.is_own_host``), 403 for a
    request with a browser's ``Origin`` or ``Sec-Fetch-*`` headers.
    """

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        host = environ.get("HTTP_HOST")
        port = int(environ.get("SERVER_PORT") or 0)
        if not is_own_host(None if host is None else str(host), port):
            return _refusal(
                start_response,
                "421 Misdirected Request",
                f"local mode's store answers only Host 127.0.0.1:{port} (or localhost, [::1]), "
                f"not {str(host)[:100]!r}\n",
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


class IsolatedMotoServer(ThreadedMotoServer):
    """A ``ThreadedMotoServer`` whose DynamoDB requests are handled one at a time.

    Args:
        state_dir: Keep the state there (see ``durable_store``); None: in memory only.
        **kwargs: ``ThreadedMotoServer``'s arguments.
    """

    def __init__(self, *, state_dir: Path | None = None, **kwargs: Any):
        super().__init__(**kwargs)
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
            app = refuse_browsers(self._app())
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
