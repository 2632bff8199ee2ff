"""JWT sign-in: verifying a person's token from an OIDC issuer (a Cognito user pool or any other).

An RS256 or ES256 token is verified with PyJWT against the issuer's JWKS (signature, pinned
algorithm, issuer, audience), fetched without following redirects and kept for a limited
lifespan; times are checked against the runtime's clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

import jwt

from durable_agents.auth.jwks import (
    ALGORITHMS,
    check_fetch_url,
    fetch_json,
    signing_keys,
)
from durable_agents.auth.tokens import AuthenticationError, AuthUnavailableError, _json_segment
from durable_agents.core.clock import Clock, SystemClock
from durable_agents.core.principals import Principal
from durable_agents.core.tenancy import DEFAULT_JWT_TENANT_CLAIM

LEEWAY_SECONDS = 30
"""Clock skew tolerated on ``exp``, ``nbf`` and ``iat``."""
JWKS_REFETCH_SECONDS = 60
"""An unknown ``kid`` refetches the JWKS at most this often (key rotation without a stampede)."""
JWKS_LIFESPAN_SECONDS = 300
"""Fetched keys are used this long, then fetched again: a key the issuer drops stops working."""
MAX_JWKS_LIFESPAN_SECONDS = 86_400
USER_CLAIMS = frozenset({"sub", "email"})
"""Claims a ``user:`` pattern may be configured to match (``email`` only when verified)."""
MAX_JWT_CHARS = 16_384


def _user_claims(value: str | Iterable[str]) -> frozenset[str]:
    names = value.split(",") if isinstance(value, str) else list(value)
    claims = frozenset(n.strip() for n in names if n.strip())
    if not claims or not claims <= USER_CLAIMS:
        raise ValueError(f"user_claims must be among {sorted(USER_CLAIMS)}, not {sorted(claims)}")
    return claims


class JwtVerifier:
    """Verifies JWTs from one OIDC issuer (with PyJWT) and returns who they identify.

    Works with a Cognito user pool (issuer ``https://cognito-idp.<region>.amazonaws.com/<pool
    id>``; ID tokens carry ``aud``, access tokens ``client_id`` and ``token_use: access``) and
    with any OIDC issuer. Only RS256 and ES256 are accepted, and only with a key of that
    algorithm: ``alg: none`` and the HMAC algorithms are refused, so a public key can never be
    used as an HMAC secret.

    Args:
        issuer: The exact ``iss`` claim expected.
        audience: The accepted audience(s) (``aud``, or ``client_id`` of Cognito access tokens);
            a string may list several, comma-separated.
        jwks: A JWKS document to trust (tests, or issuers whose keys are configured inline;
            it does not expire).
        jwks_url: Where to fetch the JWKS; without it and without ``jwks`` the issuer's OIDC
            discovery document (``<issuer>/.well-known/openid-configuration``) names it.
        clock: The time source for ``exp``/``nbf``/``iat`` and for the key cache.
        fetch: How to GET a JSON document (``fetch_json`` by default; injectable for tests).
        jwks_lifespan_s: How long fetched keys are used before they are fetched again.
        user_claims: Which claims ``user:`` patterns match: ``email`` (only when
            ``email_verified`` is true) and/or ``sub`` — ``sub`` only for issuers that assign
            subjects themselves (Cognito does); a string may list both, comma-separated.
        tenant_claim: The claim naming the person's tenant (``Principal.tenant``; a claim that
            is not a string names none).

    Raises:
        ValueError: If the issuer or the audience is empty, the lifespan is out of range or a
            user claim is unknown.
    """

    def __init__(
        self,
        issuer: str,
        audience: str | Iterable[str],
        jwks: Mapping[str, Any] | None = None,
        jwks_url: str | None = None,
        clock: Clock | None = None,
        fetch: Callable[[str], dict[str, Any]] = fetch_json,
        *,
        jwks_lifespan_s: int = JWKS_LIFESPAN_SECONDS,
        user_claims: str | Iterable[str] = ("email",),
        tenant_claim: str = DEFAULT_JWT_TENANT_CLAIM,
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
        if not 1 <= jwks_lifespan_s <= MAX_JWKS_LIFESPAN_SECONDS:
            raise ValueError(f"jwks_lifespan_s must be 1..{MAX_JWKS_LIFESPAN_SECONDS}")
        self.user_claims = _user_claims(user_claims)
        self.tenant_claim = tenant_claim.strip() or DEFAULT_JWT_TENANT_CLAIM
        self.jwks_url = jwks_url or None
        self.jwks_lifespan_ms = jwks_lifespan_s * 1000
        self._discover = jwks is None and self.jwks_url is None
        self._fetch = fetch
        self.clock: Clock = clock or SystemClock()
        self._keys = signing_keys(jwks) if jwks is not None else {}
        self._fetched_at_ms: int | None = None  # when the keys in hand were fetched
        self._asked_at_ms: int | None = None  # the last fetch attempt (the refetch limit)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JwtVerifier(issuer={self.issuer!r}, audiences={sorted(self.audiences)!r})"

    @property
    def fetches_keys(self) -> bool:
        """Whether keys come from the network (a JWKS URL or discovery)."""
        return self.jwks_url is not None or self._discover

    def _refresh(self, now: int) -> None:
        self._asked_at_ms = now
        url = self.jwks_url
        if url is None:
            discovery = self._fetch(f"{self.issuer.rstrip('/')}/.well-known/openid-configuration")
            jwks_uri = discovery.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri:
                raise AuthUnavailableError(f"the issuer {self.issuer} publishes no jwks_uri")
            url = jwks_uri
        try:
            self._keys = signing_keys(self._fetch(url))
        except AuthUnavailableError:
            # Fail closed: keys past their lifespan are not used while the JWKS is unreachable.
            self._keys, self._fetched_at_ms = {}, None
            raise
        self._fetched_at_ms = now

    def key(self, kid: str) -> jwt.PyJWK | None:
        """The signing key with this id, from keys fetched less than a lifespan ago.

        Raises:
            AuthUnavailableError: If the JWKS cannot be fetched.
        """
        if not self.fetches_keys:
            return self._keys.get(kid)
        with self._lock:
            now = self.clock.now_ms()
            stale = (
                self._fetched_at_ms is None or now - self._fetched_at_ms >= self.jwks_lifespan_ms
            )
            unknown = kid not in self._keys and (
                self._asked_at_ms is None or now - self._asked_at_ms >= JWKS_REFETCH_SECONDS * 1000
            )
            if stale or unknown:
                self._refresh(now)
            return self._keys.get(kid)

    def verify(self, token: str, *, now_ms: int | None = None) -> Principal:
        """Verifies a JWT and returns the person it identifies.

        Args:
            token: The compact JWT (``header.payload.signature``).
            now_ms: The current time (the verifier's clock if omitted).

        Returns:
            ``Principal(via="jwt", identity=sub, email=…, groups=…, user_ids=…)``. The email is
            kept only when the token says it is verified (``email_verified``); ``user_ids`` are
            the values of the configured ``user_claims`` that ``user:`` patterns match.

        Raises:
            AuthenticationError: If the token is malformed, not RS256/ES256, signed by an
                unknown key, has a bad signature, the wrong issuer or audience, or is expired
                or not yet valid.
            AuthUnavailableError: If the issuer's keys cannot be fetched.
        """
        if not isinstance(token, str) or not token or len(token) > MAX_JWT_CHARS:
            raise AuthenticationError("the bearer token is missing or too long")
        if len(token.split(".")) != 3:
            raise AuthenticationError("the bearer token is not a JWT (header.payload.signature)")
        header = _json_segment(token.split(".", maxsplit=1)[0], "JWT header", "Bearer")
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise AuthenticationError(
                f"JWT algorithm {alg!r} is not accepted; only RS256 or ES256 are"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise AuthenticationError("the JWT header names no key (kid)")
        key = self.key(kid)
        if key is None:
            raise AuthenticationError("the JWT is signed with a key the issuer does not publish")
        claims = self._decode(token, key)
        self._check_times(claims, (self.clock.now_ms() if now_ms is None else now_ms) / 1000)
        return self._principal(claims)

    def _decode(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        """Signature (with the key's own algorithm only), ``iss``, ``aud`` and required claims.

        Times are checked by ``_check_times`` against the runtime's clock (PyJWT reads the
        wall clock, which tests and replays cannot steer).
        """
        # Any: PyJWT's ``Options`` TypedDict is not in every release the pin allows.
        options: Any = {
            "require": ["iss", "sub", "exp"],
            "verify_exp": False,
            "verify_nbf": False,
            "verify_iat": False,
        }
        try:
            try:
                return jwt.decode(
                    token,
                    key,
                    algorithms=[key.algorithm_name],
                    audience=sorted(self.audiences),
                    issuer=self.issuer,
                    options=options,
                )
            except jwt.MissingRequiredClaimError as exc:
                if exc.claim != "aud":
                    raise
            # A Cognito access token names its app client in client_id, not in aud.
            no_aud: Any = {**options, "verify_aud": False}
            claims = jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],
                issuer=self.issuer,
                options=no_aud,
            )
        except jwt.PyJWTError as exc:
            _refuse(exc)
        if claims.get("token_use") != "access" or claims.get("client_id") not in self.audiences:
            raise AuthenticationError("the JWT is meant for another audience (no aud, client_id)")
        return claims

    @staticmethod
    def _check_times(claims: Mapping[str, Any], now_s: float) -> None:
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise AuthenticationError("the JWT has no valid expiry (exp)")
        if now_s > exp + LEEWAY_SECONDS:
            raise AuthenticationError("the JWT has expired")
        for claim, what in (("nbf", "is not valid yet"), ("iat", "was issued in the future")):
            value = claims.get(claim)
            if value is None:
                continue
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise AuthenticationError(f"the JWT claim {claim} is malformed")
            if now_s + LEEWAY_SECONDS < value:
                raise AuthenticationError(f"the JWT {what}")

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        token_use = claims.get("token_use")
        if token_use is not None and token_use not in ("id", "access"):
            raise AuthenticationError(f"JWT token_use {token_use!r} is not accepted")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise AuthenticationError("the JWT names no subject (sub)")
        groups = claims.get("cognito:groups", claims.get("groups")) or []
        if isinstance(groups, str):
            groups = [groups]
        email = claims.get("email")
        verified = claims.get("email_verified") in (True, "true")
        email = email if isinstance(email, str) and email and verified else None
        user_ids = {sub} if "sub" in self.user_claims else set()
        if "email" in self.user_claims and email is not None:
            user_ids.add(email)
        tenant = claims.get(self.tenant_claim)
        return Principal(
            via="jwt",
            identity=sub,
            email=email,
            groups=frozenset(g for g in groups if isinstance(g, str)),
            user_ids=frozenset(user_ids),
            tenant=tenant if isinstance(tenant, str) and tenant else None,
        )


_MISSING = {
    "iss": "was not issued by the trusted issuer (no iss)",
    "sub": "names no subject (sub)",
    "exp": "has no expiry (exp)",
}


def _refuse(exc: jwt.PyJWTError) -> NoReturn:
    """PyJWT's refusal as an ``AuthenticationError`` that says what is wrong (not the token).

    Raises:
        AuthenticationError: Always.
    """
    if isinstance(exc, jwt.MissingRequiredClaimError):
        message = _MISSING.get(exc.claim, f"has no {exc.claim} claim")
    elif isinstance(exc, jwt.InvalidIssuerError):
        message = "was not issued by the trusted issuer"
    elif isinstance(exc, jwt.InvalidAudienceError):
        message = "is meant for another audience"
    elif isinstance(exc, jwt.InvalidSignatureError):
        message = "signature is invalid"
    elif isinstance(exc, jwt.InvalidAlgorithmError):
        message = "algorithm does not match its key's"
    else:  # DecodeError and the rest: a segment or a claim is malformed
        message = f"is malformed ({type(exc).__name__})"
    raise AuthenticationError(f"the JWT {message}") from exc


def jwt_verifier_from_env(env: Mapping[str, str], clock: Clock | None = None) -> JwtVerifier:
    """Builds the verifier from the ``JWT_*`` settings.

    ``JWT_ISSUER`` and ``JWT_AUDIENCE`` (required), ``JWT_JWKS_URL`` (else OIDC discovery),
    ``JWT_JWKS_CACHE_SECONDS`` (default 300) and ``JWT_USER_CLAIMS`` (``email`` by default;
    ``sub,email`` or ``sub`` for an issuer that assigns subjects itself), ``JWT_TENANT_CLAIM``
    (``tenant`` by default: the claim naming the person's tenant).

    Raises:
        AuthUnavailableError: If the issuer or the audience is not configured, or a setting is
            invalid.
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
        check_fetch_url(url)
    lifespan = env.get("JWT_JWKS_CACHE_SECONDS", "").strip() or str(JWKS_LIFESPAN_SECONDS)
    users = env.get("JWT_USER_CLAIMS", "").strip() or "email"
    try:
        seconds = int(lifespan)
        if not 1 <= seconds <= MAX_JWKS_LIFESPAN_SECONDS:
            raise ValueError(lifespan)
    except ValueError as exc:
        raise AuthUnavailableError(
            f"JWT_JWKS_CACHE_SECONDS must be 1..{MAX_JWKS_LIFESPAN_SECONDS}, not {lifespan!r}"
        ) from exc
    try:
        claims = _user_claims(users)
    except ValueError as exc:
        raise AuthUnavailableError(f"JWT_USER_CLAIMS: {exc}") from exc
    return JwtVerifier(
        issuer,
        audience,
        jwks_url=url,
        clock=clock,
        jwks_lifespan_s=seconds,
        user_claims=claims,
        tenant_claim=env.get("JWT_TENANT_CLAIM", ""),
    )
