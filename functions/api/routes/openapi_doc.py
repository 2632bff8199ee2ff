"""``GET /openapi.json``: the Api's OpenAPI document (IAM, like every route but /people and /links).

Built from the resolver that included this router (Powertools' ``Router.api_resolver``: a
route never imports the app that mounts it) on first request, and kept for the execution
environment's life: the routes cannot change while it runs. ``docs/openapi.json`` is the same
document.
"""

from __future__ import annotations

import threading
from http import HTTPStatus

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import APIGatewayRestResolver, Router

router = Router()  # type: ignore[no-untyped-call]
_document: str | None = None
_lock = threading.Lock()


@router.get("/openapi.json")
def get_openapi_document() -> Response[str]:
    """Returns the Api's OpenAPI 3.1 document: routes, bodies, responses and security."""
    global _document  # noqa: PLW0603 - one document per execution environment
    with _lock:  # threads of local mode would otherwise build it twice (harmless, wasteful)
        if _document is None:
            # Not a cycle: the generator (Powertools' openapi modules, ~20 ms of the ~2 s
            # `import api.app` on Python 3.11) loads on the first request for the document only.
            from api.openapi import document_json  # noqa: PLC0415

            resolver = router.api_resolver  # the whole Api: every router it included
            assert isinstance(resolver, APIGatewayRestResolver)
            _document = document_json(resolver)
    return Response(
        status_code=HTTPStatus.OK.value,
        content_type="application/json",
        body=_document,
        headers={"Cache-Control": "no-cache"},
    )
