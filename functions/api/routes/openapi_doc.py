"""``GET /openapi.json``: the Api's OpenAPI document (IAM, like every route but /people and /links).

Built from the resolver on first request and kept for the execution environment's life: the
routes cannot change while it runs. ``docs/openapi.json`` is the same document.
"""

from __future__ import annotations

import threading
from http import HTTPStatus

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

router = Router()  # type: ignore[no-untyped-call]
_document: str | None = None
_lock = threading.Lock()


@router.get("/openapi.json")
def get_openapi_document() -> Response[str]:
    """Returns the Api's OpenAPI 3.1 document: routes, bodies, responses and security."""
    global _document  # noqa: PLW0603 - one document per execution environment
    with _lock:  # threads of local mode would otherwise build it twice (harmless, wasteful)
        if _document is None:
            from api.app import app  # noqa: PLC0415 - the document describes the whole resolver
            from api.openapi import document_json  # noqa: PLC0415

            _document = document_json(app)
    return Response(
        status_code=HTTPStatus.OK.value,
        content_type="application/json",
        body=_document,
        headers={"Cache-Control": "no-cache"},
    )
