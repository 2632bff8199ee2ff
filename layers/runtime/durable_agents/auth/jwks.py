"""Fetching an issuer's signing keys: https only, no redirects, RS256/ES256 keys only.

``fetch_json`` GETs the OIDC discovery document and the JWKS with an opener that refuses every
redirect (the keys come from the configured URL, never from wherever it points to), and
``signing_keys`` turns a JWKS into PyJWT keys, leaving out what must not verify anything.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, NoReturn
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from durable_agents.auth.tokens import AuthUnavailableError

ALGORITHMS = frozenset({"RS256", "ES256"})
"""The only signature algorithms accepted; the key's own algorithm must match the header's."""
MIN_RSA_BITS = 2048
_MAX_JWKS_BYTES = 1_000_000
_FETCH_TIMEOUT_SECONDS = 5


def signing_keys(jwks: Mapping[str, Any]) -> dict[str, jwt.PyJWK]:
    """The usable signing keys of a JWKS document, by ``kid``.

    Keys without a ``kid``, marked for another use, of an algorithm other than RS256/ES256,
    RSA keys shorter than 2048 bits and keys PyJWT cannot load are left out.
    """
    keys: dict[str, jwt.PyJWK] = {}
    for entry in jwks.get("keys") or []:
        if not isinstance(entry, Mapping) or entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid")
        if not isinstance(kid, str) or not kid:
            continue
        try:
            key = jwt.PyJWK(dict(entry))
        except (jwt.PyJWTError, ValueError, TypeError):
            continue
        if key.algorithm_name not in ALGORITHMS:
            continue
        if isinstance(key.key, rsa.RSAPublicKey) and key.key.key_size < MIN_RSA_BITS:
            continue
        keys[kid] = key
    return keys


def check_fetch_url(url: str) -> str:
    """Only https, or http to this machine (tests and local mode).

    Raises:
        AuthUnavailableError: For any other URL.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    local = host == "localhost"
    with contextlib.suppress(ValueError):
        local = local or ipaddress.ip_address(host).is_loopback
    if parts.scheme == "https" or (parts.scheme == "http" and local):
        return url
    raise AuthUnavailableError(f"refusing to fetch signing keys from {url!r}: use https")


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Signing keys come from the configured URL itself, never from where it redirects to."""

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> NoReturn:
        raise AuthUnavailableError(
            f"{req.full_url} answered {code} (a redirect): signing keys are not fetched from "
            "anywhere else; configure the final URL"
        )


_OPENER = urllib.request.build_opener(_RefuseRedirects())


def fetch_json(url: str) -> dict[str, Any]:
    """GETs a JSON document (the JWKS or the OIDC discovery document), following no redirect.

    Raises:
        AuthUnavailableError: If it cannot be fetched, redirects, or is not a JSON object.
    """
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked just above
        check_fetch_url(url), headers={"Accept": "application/json"}
    )
    try:
        with _OPENER.open(request, timeout=_FETCH_TIMEOUT_SECONDS) as response:
            body = response.read(_MAX_JWKS_BYTES + 1)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise AuthUnavailableError(f"cannot fetch {url}: {exc}") from exc
    if len(body) > _MAX_JWKS_BYTES:
        raise AuthUnavailableError(f"{url} returned more than {_MAX_JWKS_BYTES} bytes")
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise AuthUnavailableError(f"{url} did not return JSON") from exc
    if not isinstance(document, dict):
        raise AuthUnavailableError(f"{url} did not return a JSON object")
    return document
