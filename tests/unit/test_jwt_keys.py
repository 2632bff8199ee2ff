"""JWT verification on PyJWT: JWKS cache lifespan, no redirects, pinned algorithms, user claims.

The issuer serves its JWKS over real HTTP on 127.0.0.1; time is the verifier's SkipClock.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from durable_agents import SkipClock
from durable_agents.auth.jwt import JwtVerifier, jwt_verifier_from_env
from durable_agents.auth.tokens import AuthenticationError, AuthUnavailableError
from durable_agents.core.principals import may_decide
from tests.unit.test_auth import AUDIENCE, ISSUER, Keys, claims


class Server:
    """Serves ``routes`` (path → JSON body, or ``("redirect", location)``) and counts hits."""

    def __init__(self) -> None:
        self.routes: dict[str, Any] = {}
        self.hits: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits.append(self.path)
                route = server.routes.get(self.path)
                if route is None:
                    self.send_error(404)
                    return
                if isinstance(route, tuple):
                    self.send_response(302)
                    self.send_header("Location", route[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps(route).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    served = Server()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def keys() -> Keys:
    return Keys("key-1")


@pytest.fixture(scope="module")
def new_keys() -> Keys:
    return Keys("key-2")


def test_a_key_dropped_from_the_jwks_stops_working_after_the_lifespan(
    server: Server, keys: Keys, new_keys: Keys
) -> None:
    clock = SkipClock()
    server.routes["/jwks.json"] = {"keys": [keys.jwk]}
    verifier = JwtVerifier(
        ISSUER, AUDIENCE, jwks_url=f"{server.base}/jwks.json", clock=clock, jwks_lifespan_s=300
    )
    token = keys.sign(claims(clock, exp=clock.now_ms() // 1000 + 7200))
    assert verifier.verify(token).identity == "sub-ada"
    server.routes["/jwks.json"] = {"keys": [new_keys.jwk]}  # the issuer dropped key-1
    clock.advance(299_000)
    assert verifier.verify(token).identity == "sub-ada"  # cached, within the lifespan
    assert server.hits == ["/jwks.json"]
    clock.advance(2_000)
    with pytest.raises(AuthenticationError, match="does not publish"):
        verifier.verify(token)
    assert server.hits == ["/jwks.json", "/jwks.json"]
    assert verifier.verify(new_keys.sign(claims(clock))).identity == "sub-ada"


def test_the_jwks_lifespan_is_configurable_from_env(server: Server, keys: Keys) -> None:
    clock = SkipClock()
    server.routes["/jwks.json"] = {"keys": [keys.jwk]}
    env = {
        "JWT_ISSUER": ISSUER,
        "JWT_AUDIENCE": AUDIENCE,
        "JWT_JWKS_URL": f"{server.base}/jwks.json",
        "JWT_JWKS_CACHE_SECONDS": "60",
    }
    verifier = jwt_verifier_from_env(env, clock=clock)
    token = keys.sign(claims(clock, exp=clock.now_ms() // 1000 + 7200))
    verifier.verify(token)
    clock.advance(61_000)
    server.routes["/jwks.json"] = {"keys": []}
    with pytest.raises(AuthenticationError, match="does not publish"):
        verifier.verify(token)
    for bad in ("0", "-1", "x", "86401"):
        with pytest.raises(AuthUnavailableError, match="JWT_JWKS_CACHE_SECONDS"):
            jwt_verifier_from_env({**env, "JWT_JWKS_CACHE_SECONDS": bad})


def test_a_redirecting_jwks_url_is_refused(server: Server, keys: Keys) -> None:
    clock = SkipClock()
    # Another host (localhost is not 127.0.0.1 to urllib) serving a key the attacker controls.
    server.routes["/real.json"] = {"keys": [keys.jwk]}
    server.routes["/jwks.json"] = ("redirect", f"http://localhost:{server.port}/real.json")
    verifier = JwtVerifier(ISSUER, AUDIENCE, jwks_url=f"{server.base}/jwks.json", clock=clock)
    with pytest.raises(AuthUnavailableError, match="redirect"):
        verifier.verify(keys.sign(claims(clock)))
    assert server.hits == ["/jwks.json"]  # the redirect was not followed
    # Discovery documents are fetched the same way.
    server.routes["/pool/.well-known/openid-configuration"] = ("redirect", "https://evil/")
    discovering = JwtVerifier(f"{server.base}/pool", AUDIENCE, clock=clock)
    with pytest.raises(AuthUnavailableError, match="redirect"):
        discovering.verify(keys.sign(claims(clock, iss=f"{server.base}/pool")))


def test_an_unreachable_jwks_after_the_lifespan_fails_closed(server: Server, keys: Keys) -> None:
    clock = SkipClock()
    server.routes["/jwks.json"] = {"keys": [keys.jwk]}
    verifier = JwtVerifier(ISSUER, AUDIENCE, jwks_url=f"{server.base}/jwks.json", clock=clock)
    token = keys.sign(claims(clock, exp=clock.now_ms() // 1000 + 7200))
    verifier.verify(token)
    del server.routes["/jwks.json"]
    clock.advance(301_000)
    with pytest.raises(AuthUnavailableError, match="cannot fetch"):
        verifier.verify(token)  # stale keys are not used once their lifespan is over


def _es256() -> tuple[Any, dict[str, Any]]:
    private = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(pyjwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
    return private, {**jwk, "kid": "ec-1", "use": "sig", "alg": "ES256"}


def test_es256_is_accepted_and_the_key_decides_the_algorithm(keys: Keys) -> None:
    clock = SkipClock()
    private, jwk = _es256()
    verifier = JwtVerifier(ISSUER, AUDIENCE, jwks={"keys": [keys.jwk, jwk]}, clock=clock)
    token = pyjwt.encode(claims(clock), private, algorithm="ES256", headers={"kid": "ec-1"})
    assert verifier.verify(token).identity == "sub-ada"
    # An RS256 header naming the EC key (or ES256 naming the RSA key) is refused.
    mixed = keys.sign(claims(clock), kid="ec-1")
    with pytest.raises(AuthenticationError):
        verifier.verify(mixed)
    wrong = pyjwt.encode(claims(clock), private, algorithm="ES256", headers={"kid": "key-1"})
    with pytest.raises(AuthenticationError):
        verifier.verify(wrong)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"aud": None}, "another audience"),  # no aud, no client_id
        ({"aud": None, "client_id": AUDIENCE, "token_use": None}, "another audience"),
        ({"aud": None, "client_id": AUDIENCE, "token_use": "id"}, "another audience"),
        ({"iss": None}, "issuer"),
        ({"iat": "yesterday"}, "malformed"),
        ({"exp": "soon"}, "expiry"),
        ({"sub": ""}, "subject"),
    ],
)
def test_claims_pyjwt_requires(keys: Keys, overrides: dict[str, Any], fragment: str) -> None:
    clock = SkipClock()
    verifier = JwtVerifier(ISSUER, AUDIENCE, jwks={"keys": [keys.jwk]}, clock=clock)
    with pytest.raises(AuthenticationError, match=fragment):
        verifier.verify(keys.sign(claims(clock, **overrides)))


def test_the_leeway_is_small(keys: Keys) -> None:
    clock = SkipClock()
    now = clock.now_ms() // 1000
    verifier = JwtVerifier(ISSUER, AUDIENCE, jwks={"keys": [keys.jwk]}, clock=clock)
    assert verifier.verify(keys.sign(claims(clock, exp=now - 29))).identity == "sub-ada"
    with pytest.raises(AuthenticationError, match="expired"):
        verifier.verify(keys.sign(claims(clock, exp=now - 31)))
    assert verifier.verify(keys.sign(claims(clock, nbf=now + 29))).identity == "sub-ada"
    with pytest.raises(AuthenticationError, match="not valid yet"):
        verifier.verify(keys.sign(claims(clock, nbf=now + 31)))


def test_user_patterns_match_the_claims_the_issuer_is_trusted_for(keys: Keys) -> None:
    clock = SkipClock()
    jwks = {"keys": [keys.jwk]}
    token = keys.sign(claims(clock))
    # By default a user: pattern matches the verified email only: where users may choose
    # their own subject, a sub is no identity.
    default = JwtVerifier(ISSUER, AUDIENCE, jwks=jwks, clock=clock).verify(token)
    assert may_decide(default, ["user:ada@example.com"])
    assert not may_decide(default, ["user:sub-ada"])
    # An issuer whose subjects it assigns itself (Cognito's) is configured to match sub.
    both = JwtVerifier(ISSUER, AUDIENCE, jwks=jwks, clock=clock, user_claims=("sub", "email"))
    principal = both.verify(token)
    assert may_decide(principal, ["user:sub-ada"]) and may_decide(
        principal, ["user:ada@example.com"]
    )
    only_sub = JwtVerifier(ISSUER, AUDIENCE, jwks=jwks, clock=clock, user_claims="sub")
    principal = only_sub.verify(token)
    assert may_decide(principal, ["user:sub-ada"])
    assert not may_decide(principal, ["user:ada@example.com"])
    unverified = both.verify(keys.sign(claims(clock, email_verified=False)))
    assert not may_decide(unverified, ["user:ada@example.com"])
    with pytest.raises(ValueError, match="user_claims"):
        JwtVerifier(ISSUER, AUDIENCE, jwks=jwks, user_claims=("name",))
    env = {"JWT_ISSUER": ISSUER, "JWT_AUDIENCE": AUDIENCE, "JWT_USER_CLAIMS": "sub,email"}
    assert jwt_verifier_from_env(env).user_claims == frozenset({"sub", "email"})
    assert jwt_verifier_from_env({**env, "JWT_USER_CLAIMS": ""}).user_claims == {"email"}
    with pytest.raises(AuthUnavailableError, match="JWT_USER_CLAIMS"):
        jwt_verifier_from_env({**env, "JWT_USER_CLAIMS": "preferred_username"})
