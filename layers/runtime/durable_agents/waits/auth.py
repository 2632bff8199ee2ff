"""Who is deciding: IAM callers, people with a JWT (any OIDC issuer), and signed links.

Three ways to authenticate a decision, each ending in a ``Principal`` that
``principals.may_decide`` checks against the approval's approver patterns:

* **IAM** (``principal_from_iam``): API Gateway verified the SigV4 signature and put the
  caller's ARN in ``requestContext.identity.userArn``.
* **JWT** (``JwtVerifier``): an RS256 token from an OIDC issuer (a Cognito user pool or any
  other), verified here against the issuer's JWKS — signature, issuer, audience, expiry.
* **Signed link** (``links.LinkSigner``): an HMAC-SHA256 token minted for one approval and one
  approver pattern, expiring, keyed by a secret kept in Secrets Manager.

Nothing here logs or returns a token, a JWT or the link key; error messages say what is wrong
without repeating the credential.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ipaddress
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from durable_agents.clock import Clock, SystemClock
from durable_agents.errors import DurableError
from durable_agents.waits.principals import Principal

LEEWAY_SECONDS = 30
"""Clock skew tolerated on ``exp``, ``nbf`` and ``iat``."""
JWKS_REFETCH_SECONDS = 60
"""An unknown ``kid`` refetches the JWKS at most this often (key rotation without a stampede)."""
MAX_JWT_CHARS = 16_384
MIN_RSA_BITS = 2048
_MAX_JWKS_BYTES = 1_000_000
_FETCH_TIMEOUT_SECONDS = 5


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


# ----------------------------------------------------------------------------------------- IAM
def principal_from_iam(event: Mapping[str, Any]) -> Principal:
    """The SigV4 caller API Gateway authenticated (``requestContext.identity.userArn``).

    Raises:
        AuthenticationError: If the event carries no caller ARN (the route is not IAM-authorised).
    """
    context = event.get("requestContext") or {}
    identity = (context.get("identity") or {}) if isinstance(context, Mapping) else {}
    arn = identity.get("userArn") if isinstance(identity, Mapping) else None
    if not isinstance(arn, str) or not arn.startswith("arn:"):
        raise AuthenticationError(
            "this route needs a request signed with AWS credentials (SigV4)", scheme="IAM"
        )
    return Principal(via="iam", identity=arn)


# ---------------------------------------------------------------------------------------- JWT
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


def _int_from_b64(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError("not a base64url string")
    return int.from_bytes(_b64decode(value), "big")


def rsa_keys_from_jwks(jwks: Mapping[str, Any]) -> dict[str, rsa.RSAPublicKey]:
    """The RS256 signing keys of a JWKS document, by ``kid``.

    Keys that are not RSA, are marked for another use or algorithm, have no ``kid`` or are
    shorter than 2048 bits are left out.
    """
    keys: dict[str, rsa.RSAPublicKey] = {}
    for jwk in jwks.get("keys") or []:
        if not isinstance(jwk, Mapping) or jwk.get("kty") != "RSA":
            continue
        if jwk.get("use", "sig") != "sig" or jwk.get("alg", "RS256") != "RS256":
            continue
        kid = jwk.get("kid")
        if not isinstance(kid, str) or not kid:
            continue
        try:
            key = rsa.RSAPublicNumbers(
                _int_from_b64(jwk.get("e")), _int_from_b64(jwk.get("n"))
            ).public_key()
        except ValueError:
            continue
        if key.key_size >= MIN_RSA_BITS:
            keys[kid] = key
    return keys


def _check_fetch_url(url: str) -> str:
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


def fetch_json(url: str) -> dict[str, Any]:
    """GETs a JSON document (the JWKS or the OIDC discovery document).

    Raises:
        AuthUnavailableError: If it cannot be fetched or is not a JSON object.
    """
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked just above
        _check_fetch_url(url), headers={"Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=_FETCH_TIMEOUT_SECONDS) as response:  # noqa: S310
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


class JwtVerifier:
    """Verifies RS256 JWTs from one OIDC issuer and returns who they identify.

    Works with a Cognito user pool (issuer ``https://cognito-idp.<region>.amazonaws.com/<pool
    id>``; ID tokens carry ``aud``, access tokens ``client_id``) and with any OIDC issuer. Only
    RS256 is accepted: ``alg: none`` and the HMAC algorithms are refused, so a public key can
    never be used as an HMAC secret.

    Args:
        issuer: The exact ``iss`` claim expected.
        audience: The accepted audience(s) (``aud``, or ``client_id`` of Cognito access tokens);
            a string may list several, comma-separated.
        jwks: A JWKS document to trust (tests, or issuers whose keys are configured inline).
        jwks_url: Where to fetch the JWKS; without it and without ``jwks`` the issuer's OIDC
            discovery document (``<issuer>/.well-known/openid-configuration``) names it.
        clock: The time source for ``exp``/``nbf`` and for the refetch limit.
        fetch: How to GET a JSON document (``fetch_json`` by default; injectable for tests).

    Raises:
        ValueError: If the issuer or the audience is empty.
    """

    def __init__(
        self,
        issuer: str,
        audience: str | Iterable[str],
        jwks: Mapping[str, Any] | None = None,
        jwks_url: str | None = None,
        clock: Clock | None = None,
        fetch: Callable[[str], dict[str, Any]] = fetch_json,
    ):
        audiences = (
            [a.strip() for a in audience.split(",")]
            if isinstance(audience, str)
            else [str(a).strip() for a in audience]
        )
        self.issuer = issuer.strip()
        self.audiences = frozenset(a for a in audiences if a)
        if not self.issuer or not self.audiences:
            raise ValueError("a JwtVerifier needs an issuer and at least one audience")
        self.jwks_url = jwks_url or None
        self._discover = jwks is None and self.jwks_url is None
        self._fetch = fetch
        self.clock: Clock = clock or SystemClock()
        self._keys = rsa_keys_from_jwks(jwks) if jwks is not None else {}
        self._fetched_at_ms: int | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JwtVerifier(issuer={self.issuer!r}, audiences={sorted(self.audiences)!r})"

    @property
    def fetches_keys(self) -> bool:
        """Whether keys come from the network (a JWKS URL or discovery)."""
        return self.jwks_url is not None or self._discover

    def _refresh(self) -> None:
        now = self.clock.now_ms()
        if (
            self._fetched_at_ms is not None
            and now - self._fetched_at_ms < JWKS_REFETCH_SECONDS * 1000
        ):
            return
        self._fetched_at_ms = now
        url = self.jwks_url
        if url is None:
            discovery = self._fetch(f"{self.issuer.rstrip('/')}/.well-known/openid-configuration")
            jwks_uri = discovery.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri:
                raise AuthUnavailableError(f"the issuer {self.issuer} publishes no jwks_uri")
            url = jwks_uri
        self._keys = rsa_keys_from_jwks(self._fetch(url))

    def key(self, kid: str) -> rsa.RSAPublicKey | None:
        """The signing key with this id (fetching the JWKS when it is not known yet).

        Raises:
            AuthUnavailableError: If the JWKS cannot be fetched.
        """
        key = self._keys.get(kid)
        if key is None and self.fetches_keys:
            with self._lock:
                key = self._keys.get(kid)
                if key is None:
                    self._refresh()
                    key = self._keys.get(kid)
        return key

    def verify(self, token: str, *, now_ms: int | None = None) -> Principal:
        """Verifies a JWT and returns the person it identifies.

        Args:
            token: The compact JWT (``header.payload.signature``).
            now_ms: The current time (the verifier's clock if omitted).

        Returns:
            ``Principal(via="jwt", identity=sub, email=…, groups=…)``. The email is kept only
            when the token says it is verified (``email_verified``), so that ``user:<email>``
            approvers cannot be matched by a self-asserted address.

        Raises:
            AuthenticationError: If the token is malformed, not RS256, signed by an unknown key,
                has a bad signature, the wrong issuer or audience, or is expired or not yet valid.
            AuthUnavailableError: If the issuer's keys cannot be fetched.
        """
        if not isinstance(token, str) or not token or len(token) > MAX_JWT_CHARS:
            raise AuthenticationError("the bearer token is missing or too long")
        parts = token.split(".")
        if len(parts) != 3:
            raise AuthenticationError("the bearer token is not a JWT (header.payload.signature)")
        header = _json_segment(parts[0], "JWT header", "Bearer")
        alg = header.get("alg")
        if alg != "RS256":
            raise AuthenticationError(f"JWT algorithm {alg!r} is not accepted; only RS256 is")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise AuthenticationError("the JWT header names no key (kid)")
        key = self.key(kid)
        if key is None:
            raise AuthenticationError("the JWT is signed with a key the issuer does not publish")
        try:
            signature = _b64decode(parts[2])
            key.verify(
                signature,
                f"{parts[0]}.{parts[1]}".encode("ascii"),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
        except (ValueError, InvalidSignature) as exc:
            raise AuthenticationError("the JWT signature is invalid") from exc
        claims = _json_segment(parts[1], "JWT payload", "Bearer")
        self._check_claims(claims, (self.clock.now_ms() if now_ms is None else now_ms) / 1000)
        groups = claims.get("cognito:groups", claims.get("groups")) or []
        if isinstance(groups, str):
            groups = [groups]
        email = claims.get("email")
        verified = claims.get("email_verified") in (True, "true")
        return Principal(
            via="jwt",
            identity=str(claims["sub"]),
            email=email if isinstance(email, str) and email and verified else None,
            groups=frozenset(g for g in groups if isinstance(g, str)),
        )

    def _check_claims(self, claims: Mapping[str, Any], now_s: float) -> None:
        if claims.get("iss") != self.issuer:
            raise AuthenticationError("the JWT was not issued by the trusted issuer")
        token_use = claims.get("token_use")
        if token_use is not None and token_use not in ("id", "access"):
            raise AuthenticationError(f"JWT token_use {token_use!r} is not accepted")
        aud = claims.get("aud")
        if aud is not None:
            audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not self.audiences.intersection(a for a in audiences if isinstance(a, str)):
                raise AuthenticationError("the JWT is meant for another audience")
        elif claims.get("client_id") not in self.audiences:
            raise AuthenticationError("the JWT is meant for another audience (client_id)")
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise AuthenticationError("the JWT has no expiry (exp)")
        if now_s > exp + LEEWAY_SECONDS:
            raise AuthenticationError("the JWT has expired")
        for claim, what in (("nbf", "is not valid yet"), ("iat", "was issued in the future")):
            value = claims.get(claim)
            if isinstance(value, int | float) and now_s + LEEWAY_SECONDS < value:
                raise AuthenticationError(f"the JWT {what}")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise AuthenticationError("the JWT names no subject (sub)")


def jwt_verifier_from_env(env: Mapping[str, str], clock: Clock | None = None) -> JwtVerifier:
    """Builds the verifier from ``JWT_ISSUER``, ``JWT_AUDIENCE`` and ``JWT_JWKS_URL``.

    Raises:
        AuthUnavailableError: If the issuer or the audience is not configured.
    """
    issuer = env.get("JWT_ISSUER", "").strip()
    audience = env.get("JWT_AUDIENCE", "").strip()
    if not issuer or not audience:
        raise AuthUnavailableError(
            "sign-in with a JWT is not configured for this deployment: set the JwtIssuer and "
            "JwtAudience parameters (JWT_ISSUER / JWT_AUDIENCE), or use a signed link"
        )
    url = env.get("JWT_JWKS_URL", "").strip() or None
    if url is not None:
        _check_fetch_url(url)
    return JwtVerifier(issuer, audience, jwks_url=url, clock=clock)


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header.

    Raises:
        AuthenticationError: If the header is missing or not a bearer token.
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("send the JWT as 'Authorization: Bearer <token>'")
    return token.strip()
