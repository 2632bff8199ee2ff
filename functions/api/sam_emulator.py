"""The IAM caller SAM's local API Gateway leaves out, filled in under ``make sam-local`` only.

On AWS, API Gateway verifies each request's SigV4 signature for the ``AWS_IAM`` routes and puts
the caller's ARN in ``requestContext.identity.userArn``; ``api.authn`` refuses a request without
one. ``sam local start-api`` serves the same routes but runs no IAM authorizer: every request
arrives with no caller, so every IAM route would answer 401 and no run could be started through
it. Under ``make sam-local`` (docs/deploy.md, "sam local") this module stands in for the
authorizer the way local mode's Api does: a request that carries the session's token in
``X-Sam-Local-Token`` is made by the IAM caller ``SAM_LOCAL_CALLER_ARN`` names; one that does not
names no caller, as an unsigned request, so ``api.authn`` refuses it on an IAM route (401) and
the public routes (a JWT, a signed link) authenticate it themselves as on AWS.

It acts only inside SAM's emulator, and only when the emulation asks for it: ``AWS_SAM_LOCAL``
is ``true`` (SAM sets it in every container it runs; Lambda never does) **and** both
``SAM_LOCAL_TOKEN`` and ``SAM_LOCAL_CALLER_ARN`` are set (declared only by the overlay template
``scripts/sam_local_overlay.py`` writes, never by ``template.yaml``:
``tests/template/test_sam_local_overlay.py`` holds both to it). Anywhere else it does nothing.
An event that already names a caller is left as it is. The token is never logged or answered.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from typing import Any

TOKEN_HEADER = "X-Sam-Local-Token"  # noqa: S105 - a header name, not a secret
TOKEN_VARIABLE = "SAM_LOCAL_TOKEN"  # noqa: S105 - a variable name
CALLER_VARIABLE = "SAM_LOCAL_CALLER_ARN"


def _settings(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The session's token and caller, or None outside SAM's emulator (or not asked for)."""
    if environ.get("AWS_SAM_LOCAL") != "true":
        return None
    token = environ.get(TOKEN_VARIABLE, "")
    caller = environ.get(CALLER_VARIABLE, "")
    if not token or not caller.startswith("arn:"):
        return None
    return token, caller


def _header(event: Mapping[str, Any], name: str) -> str | None:
    headers = event.get("headers") or {}
    if not isinstance(headers, Mapping):
        return None
    wanted = name.lower()
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == wanted and isinstance(value, str):
            return value
    return None


def authenticate(event: dict[str, Any], environ: Mapping[str, str] | None = None) -> None:
    """Names the session's IAM caller in ``event`` under SAM's emulator; else does nothing.

    Args:
        event: The API Gateway (REST, proxy) event; its ``requestContext.identity.userArn``
            is set in place when the request carries the session's token (compared in
            constant time) and names no caller yet.
        environ: Where to read the settings (``os.environ`` by default).
    """
    settings = _settings(os.environ if environ is None else environ)
    if settings is None:
        return
    token, caller = settings
    offered = _header(event, TOKEN_HEADER)
    if offered is None or not hmac.compare_digest(offered.encode(), token.encode()):
        return
    context = event.get("requestContext")
    if not isinstance(context, dict):
        context = event["requestContext"] = {}
    identity = context.get("identity")
    if not isinstance(identity, dict):
        identity = context["identity"] = {}
    if not identity.get("userArn"):
        identity["userArn"] = caller
