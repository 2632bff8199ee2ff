"""What every credential shares: the errors a refused one raises, base64url JSON segments.

JWTs (``jwt_verifier``) and signed links (``links``) are both dot-separated base64url
segments; IAM callers and bearer tokens fail with the same ``AuthenticationError``. Nothing here
repeats a credential in an error message.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from durable_agents.errors import DurableError


class AuthenticationError(DurableError):
    """The credential is missing, malformed, expired, tampered with or not trusted (401).

    Attributes:
        scheme: The authentication scheme the route expects (``Bearer``, ``Link``, ``IAM``).
    """

    def __init__(self, message: str, *, scheme: str = "Bearer"):
        self.scheme = scheme
        super().__init__(message)


class NotAnApproverError(DurableError):
    """The caller is authenticated but is not among the approval's approvers (403)."""


class AuthUnavailableError(DurableError):
    """This way of signing in is not configured, or its keys cannot be fetched (503)."""


def _b64decode(segment: str) -> bytes:
    """Decodes unpadded base64url.

    Raises:
        ValueError: If it is not base64url.
    """
    if not segment or any(c not in _B64URL for c in segment):
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def b64encode(data: bytes) -> str:
    """Unpadded base64url, as JWTs and link tokens use it."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _json_segment(segment: str, what: str, scheme: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64decode(segment))
    except (ValueError, UnicodeDecodeError) as exc:
        raise AuthenticationError(f"the {what} is not base64url JSON", scheme=scheme) from exc
    if not isinstance(value, dict):
        raise AuthenticationError(f"the {what} is not a JSON object", scheme=scheme)
    return value


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header.

    Raises:
        AuthenticationError: If the header is missing or not a bearer token.
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("send the JWT as 'Authorization: Bearer <token>'")
    return token.strip()
