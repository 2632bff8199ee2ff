"""moto with DynamoDB's isolation: one DynamoDB request at a time.

DynamoDB checks a write's condition and applies the write atomically (transactions included),
so two racing conditional writes can never both succeed. moto's threaded server handles
requests concurrently without that isolation: a condition checked by one request can be
overtaken by another's write. Local mode and the concurrency tests use this server, which
serialises requests, so races behave as they would on AWS while clients stay concurrent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer


class IsolatedMotoServer(ThreadedMotoServer):
    """A ``ThreadedMotoServer`` whose DynamoDB requests are handled one at a time."""

    def _server_entry(self) -> None:
        from moto.moto_server.werkzeug_app import (  # noqa: PLC0415 - moto internals
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server  # noqa: PLC0415

        app = DomainDispatcherApplication(create_backend_app)
        lock = threading.Lock()

        def isolated(
            environ: dict[str, Any], start_response: Callable[..., Any]
        ) -> Iterable[bytes]:
            # Only DynamoDB needs it; other services keep their concurrency (an SQS long poll
            # must not hold everyone else up).
            if not str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB_"):
                return app(environ, start_response)  # type: ignore[no-any-return]
            with lock:  # the whole request, body included, under the lock
                return list(app(environ, start_response))

        self._server = make_server(
            self._ip_address, self._port, isolated, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()
