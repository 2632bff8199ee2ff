"""waits/auth.py: JWT verification (real RS256), signed links, the link key and IAM callers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from durable_agents import SkipClock
from durable_agents.auth.deciders import principal_from_iam
from durable_agents.auth.jwks import fetch_json
from durable_agents.auth.jwt import JwtVerifier, jwt_verifier_from_env
from durable_agents.auth.links import (
    LinkSigner,
    SecretsManagerKey,
)
from durable_agents.auth.tokens import AuthenticationError, AuthUnavailableError, bearer_token
from durable_agents.core.principals import may_decide
from durable_agents_local.secrets import create_secrets
from durable_agents_local.template import load_template
from tests.conftest import TEMPLATE
from tests.unit.tampering import changed_in_the_middle

ISSUER = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_TestPool"
AUDIENCE = "app-client-1"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Keys:
    """An RSA signing key and its JWKS entry."""

    def __init__(self, kid: str, bits: int = 2048):
        self.kid = kid
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=bits)
        numbers = self.private.public_key().public_numbers()
        self.jwk = {
            "kty": "RSA",
            "kid": kid,
            "use": "sig",
            "alg": "RS256",
            "n": b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
            "e": b64(numbers.e.to_bytes(3, "big")),
        }

    def sign(self, claims: dict[str, Any], **header: Any) -> str:
        head = {"alg": "RS256", "typ": "JWT", "kid": self.kid, **header}
        signing_input = f"{b64(json.dumps(head).encode())}.{b64(json.dumps(claims).encode())}"
        signature = self.private.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64(signature)}"


@pytest.fixture(scope="session")
def keys() -> Keys:
    return Keys("key-1")


@pytest.fixture(scope="session")
def other_keys() -> Keys:
    return Keys("key-2")


def claims(clock: SkipClock, **overrides: Any) -> dict[str, Any]:
    now = clock.now_ms() // 1000
    base = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "sub-ada",
        "email": "ada@example.com",
        "email_verified": True,
        "cognito:groups": ["finance", "ops"],
        "token_use": "id",
        "iat": now,
        "exp": now + 3600,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def verifier(keys: Keys, clock: SkipClock) -> JwtVerifier:
    return JwtVerifier(ISSUER, AUDIENCE, jwks={"keys": [keys.jwk]}, clock=clock)


# --------------------------------------------------------------------------------------- JWT
def test_a_cognito_id_token_identifies_the_person(keys: Keys) -> None:
    clock = SkipClock()
    principal = verifier(keys, clock).verify(keys.sign(claims(clock)))
    assert principal.via == "jwt"
    assert principal.identity == "sub-ada"
    assert principal.email == "ada@example.com"
    assert principal.groups == frozenset({"finance", "ops"})
    assert principal.display == "user:ada@example.com"
    assert may_decide(principal, ["user:ada@example.com"])
    # sub matches user: patterns only where the issuer is configured to assign it (Cognito).
    assert not may_decide(principal, ["user:sub-ada"])
    cognito = JwtVerifier(
        ISSUER, AUDIENCE, jwks={"keys": [keys.jwk]}, clock=clock, user_claims="sub,email"
    )
    assert may_decide(cognito.verify(keys.sign(claims(clock))), ["user:sub-ada"])
    assert may_decide(principal, ["group:finance"])
    assert not may_decide(principal, ["group:legal", "user:grace@example.com", "iam:arn:*"])


def test_a_cognito_access_token_is_checked_by_client_id(keys: Keys) -> None:
    clock = SkipClock()
    token = keys.sign(
        claims(clock, aud=None, email=None, token_use="access", client_id=AUDIENCE, groups=None)
    )
    principal = verifier(keys, clock).verify(token)
    assert principal.identity == "sub-ada" and principal.email is None
    wrong = keys.sign(claims(clock, aud=None, token_use="access", client_id="another-client"))
    with pytest.raises(AuthenticationError, match="another audience"):
        verifier(keys, clock).verify(wrong)


def test_generic_oidc_groups_claim_and_audience_list(keys: Keys) -> None:
    clock = SkipClock()
    token = keys.sign(
        claims(
            clock,
            aud=["other", AUDIENCE],
            token_use=None,
            groups=["sre"],
            **{"cognito:groups": None},
        )
    )
    assert verifier(keys, clock).verify(token).groups == frozenset({"sre"})
    several = JwtVerifier(ISSUER, f"x, {AUDIENCE}", jwks={"keys": [keys.jwk]}, clock=clock)
    assert several.verify(token).identity == "sub-ada"


def test_an_unverified_email_is_not_used(keys: Keys) -> None:
    clock = SkipClock()
    principal = verifier(keys, clock).verify(keys.sign(claims(clock, email_verified=False)))
    assert principal.email is None
    assert principal.display == "user:sub-ada"
    assert not may_decide(principal, ["user:ada@example.com"])


def _forge(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    return (
        f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}.{b64(signature)}"
    )


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda k, c: k.sign(claims(c, exp=c.now_ms() // 1000 - 120)), "expired"),
        (lambda k, c: k.sign(claims(c, nbf=c.now_ms() // 1000 + 600)), "not valid yet"),
        (lambda k, c: k.sign(claims(c, iat=c.now_ms() // 1000 + 600)), "in the future"),
        (lambda k, c: k.sign(claims(c, exp=None)), "no expiry"),
        (lambda k, c: k.sign(claims(c, aud="someone-else")), "another audience"),
        (lambda k, c: k.sign(claims(c, iss="https://evil.example.com")), "trusted issuer"),
        (lambda k, c: k.sign(claims(c, token_use="refresh")), "token_use"),
        (lambda k, c: k.sign(claims(c, sub=None)), "subject"),
        (lambda k, c: k.sign(claims(c), kid="unknown-kid"), "does not publish"),
        (lambda k, c: k.sign(claims(c), kid=None), "names no key"),
        (lambda k, c: _forge({"alg": "none", "kid": "key-1"}, claims(c)), "'none' is not"),
        (lambda k, c: _forge({"alg": "RS512", "kid": "key-1"}, claims(c)), "only RS256"),
        (lambda k, c: "not-a-jwt", "not a JWT"),
        (lambda k, c: "a.b.c", "not base64url JSON"),
        (lambda k, c: "", "missing"),
        (lambda k, c: "x" * 20_000, "too long"),
    ],
)
def test_jwt_rejections(keys: Keys, make: Any, fragment: str) -> None:
    clock = SkipClock()
    with pytest.raises(AuthenticationError, match=fragment):
        verifier(keys, clock).verify(make(keys, clock))


def test_a_tampered_or_foreign_signature_is_refused(keys: Keys, other_keys: Keys) -> None:
    clock = SkipClock()
    token = keys.sign(claims(clock))
    head, payload, signature = token.split(".")
    evil = b64(json.dumps(claims(clock, sub="sub-mallory")).encode())
    for bad in (
        f"{head}.{evil}.{signature}",  # payload changed
        f"{head}.{payload}.{changed_in_the_middle(signature)}",  # signature changed
        f"{head}.{payload}.",  # no signature
        # signed by another key that claims this key's kid
        other_keys.sign(claims(clock), kid="key-1"),
    ):
        with pytest.raises(AuthenticationError, match="signature is invalid"):
            verifier(keys, clock).verify(bad)


def test_hs256_with_the_public_key_as_secret_is_refused(keys: Keys) -> None:
    """The classic algorithm confusion: an HMAC 'signed' with the public key."""
    clock = SkipClock()
    public_pem = keys.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = b64(json.dumps({"alg": "HS256", "kid": "key-1"}).encode())
    payload = b64(json.dumps(claims(clock)).encode())
    mac = hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    with pytest.raises(AuthenticationError, match="only RS256"):
        verifier(keys, clock).verify(f"{header}.{payload}.{b64(mac)}")


def test_weak_and_foreign_keys_are_left_out_of_the_jwks(keys: Keys) -> None:
    weak = Keys("weak", bits=1024)
    jwks = {
        "keys": [
            weak.jwk,
            {**keys.jwk, "kid": "enc", "use": "enc"},
            {"kty": "EC", "kid": "ec", "crv": "P-256", "x": "AA", "y": "AA"},
            {**keys.jwk, "kid": "broken", "n": "!!"},
        ]
    }
    clock = SkipClock()
    jwt = JwtVerifier(ISSUER, AUDIENCE, jwks=jwks, clock=clock)
    with pytest.raises(AuthenticationError, match="does not publish"):
        jwt.verify(weak.sign(claims(clock)))


def test_verifier_needs_issuer_and_audience() -> None:
    with pytest.raises(ValueError, match="issuer"):
        JwtVerifier("", AUDIENCE, jwks={"keys": []})
    with pytest.raises(ValueError, match="audience"):
        JwtVerifier(ISSUER, " , ", jwks={"keys": []})


class _Issuer:
    """A local OIDC issuer: discovery document and JWKS over real HTTP, counting fetches."""

    def __init__(self) -> None:
        self.jwks: dict[str, Any] = {"keys": []}
        self.hits: list[str] = []
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.hits.append(self.path)
                if self.path == "/pool/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.base}/pool/jwks.json"}
                elif self.path == "/pool/jwks.json":
                    body = issuer.jwks
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.base}/pool"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def issuer() -> Iterator[_Issuer]:
    served = _Issuer()
    yield served
    served.stop()


def test_jwks_found_by_discovery_cached_and_refetched_on_rotation(
    issuer: _Issuer, keys: Keys, other_keys: Keys
) -> None:
    clock = SkipClock()
    issuer.jwks = {"keys": [keys.jwk]}
    jwt = JwtVerifier(issuer.url, AUDIENCE, clock=clock)
    token = keys.sign(claims(clock, iss=issuer.url))
    assert jwt.verify(token).identity == "sub-ada"
    assert jwt.verify(token).identity == "sub-ada"
    assert issuer.hits == ["/pool/.well-known/openid-configuration", "/pool/jwks.json"]
    # The issuer rotates to a new key: an unknown kid refetches, but at most once a minute.
    issuer.jwks = {"keys": [keys.jwk, other_keys.jwk]}
    rotated = other_keys.sign(claims(clock, iss=issuer.url))
    clock.advance(10_000)
    with pytest.raises(AuthenticationError, match="does not publish"):
        jwt.verify(rotated)
    with pytest.raises(AuthenticationError, match="does not publish"):
        jwt.verify(other_keys.sign(claims(clock, iss=issuer.url), kid="never-published"))
    assert len(issuer.hits) == 2  # too soon to ask again
    clock.advance(60_000)
    assert jwt.verify(rotated).identity == "sub-ada"
    assert len(issuer.hits) == 4


def test_jwks_url_from_configuration(issuer: _Issuer, keys: Keys) -> None:
    clock = SkipClock()
    issuer.jwks = {"keys": [keys.jwk]}
    jwt = jwt_verifier_from_env(
        {
            "JWT_ISSUER": ISSUER,
            "JWT_AUDIENCE": AUDIENCE,
            "JWT_JWKS_URL": f"{issuer.base}/pool/jwks.json",
        },
        clock=clock,
    )
    assert jwt.verify(keys.sign(claims(clock))).identity == "sub-ada"
    assert issuer.hits == ["/pool/jwks.json"]


def test_unreachable_or_insecure_jwks_is_unavailable(issuer: _Issuer, keys: Keys) -> None:
    clock = SkipClock()
    with pytest.raises(AuthUnavailableError, match="use https"):
        fetch_json("http://keys.example.com/jwks.json")
    with pytest.raises(AuthUnavailableError, match="use https"):
        jwt_verifier_from_env(
            {"JWT_ISSUER": ISSUER, "JWT_AUDIENCE": "a", "JWT_JWKS_URL": "ftp://x/jwks"}
        )
    with pytest.raises(AuthUnavailableError, match="cannot fetch"):
        fetch_json(f"{issuer.base}/missing")
    jwt = JwtVerifier(ISSUER, AUDIENCE, jwks_url=f"{issuer.base}/missing", clock=clock)
    with pytest.raises(AuthUnavailableError):
        jwt.verify(keys.sign(claims(clock)))


def test_jwt_configuration_from_env() -> None:
    with pytest.raises(AuthUnavailableError, match="JwtIssuer"):
        jwt_verifier_from_env({})
    with pytest.raises(AuthUnavailableError, match="JwtAudience"):
        jwt_verifier_from_env({"JWT_ISSUER": ISSUER, "JWT_AUDIENCE": ""})
    jwt = jwt_verifier_from_env({"JWT_ISSUER": ISSUER, "JWT_AUDIENCE": "a,b"})
    assert jwt.audiences == {"a", "b"} and jwt.fetches_keys
    assert "key" not in repr(jwt).lower()


@pytest.mark.parametrize("value", [None, "", "Basic abc", "Bearer", "Bearer   ", "token"])
def test_bearer_header_required(value: str | None) -> None:
    with pytest.raises(AuthenticationError, match="Bearer"):
        bearer_token(value)


def test_bearer_token_parsed() -> None:
    assert bearer_token("Bearer abc.def.ghi") == "abc.def.ghi"
    assert bearer_token("bearer  abc ") == "abc"


# -------------------------------------------------------------------------------- signed links
KEY = b"k" * 48


def test_link_round_trip_and_what_it_grants() -> None:
    signer = LinkSigner(lambda: KEY)
    now = SkipClock().now_ms()
    token, minted = signer.mint("apr-1", "user:ada@example.com", 600, now_ms=now)
    claims_ = signer.verify(token, "apr-1", now_ms=now + 599_000)
    assert claims_ == minted
    assert claims_.principal.via == "link"
    assert may_decide(claims_.principal, ["user:ada@example.com"])
    assert not may_decide(claims_.principal, ["user:grace@example.com", "group:finance"])
    assert claims_.decided_by == f"user:ada@example.com (signed link {minted.nonce[:8]})"
    assert KEY.decode() not in token and "key" not in repr(signer).lower().replace("<key", "")
    other, _ = signer.mint("apr-1", "user:ada@example.com", 600, now_ms=now)
    assert other != token  # every link has its own nonce


def test_link_rejections() -> None:
    signer = LinkSigner(lambda: KEY)
    now = SkipClock().now_ms()
    token, _ = signer.mint("apr-1", "user:ada@example.com", 600, now_ms=now)
    payload, signature = token.split(".")
    forged_payload = b64(
        json.dumps(
            {"aid": "apr-1", "approver": "group:finance", "exp": now // 1000 + 600, "nonce": "n"}
        ).encode()
    )
    cases = {
        f"{forged_payload}.{signature}": "does not match",
        f"{payload}.{changed_in_the_middle(signature)}": "does not match",
        f"{payload}.": "malformed",
        f"{payload}.{signature}.x": "malformed",
        payload: "malformed",
        "": "missing",
        "x" * 5000: "too long",
        f"{payload}.!!": "malformed",
    }
    for bad, fragment in cases.items():
        with pytest.raises(AuthenticationError, match=fragment):
            signer.verify(bad, "apr-1", now_ms=now)
    with pytest.raises(AuthenticationError, match="another approval"):
        signer.verify(token, "apr-2", now_ms=now)
    with pytest.raises(AuthenticationError, match="expired"):
        signer.verify(token, "apr-1", now_ms=now + 600_000)
    with pytest.raises(AuthenticationError, match="does not match"):
        LinkSigner(lambda: b"x" * 48).verify(token, "apr-1", now_ms=now)
    # A correctly signed payload with the wrong shape is still refused.
    odd = b64(json.dumps(["not", "an", "object"]).encode())
    mac = hmac.new(KEY, b"durable-agents/approval-link/v1\n" + odd.encode(), hashlib.sha256)
    with pytest.raises(AuthenticationError, match="not a JSON object"):
        signer.verify(f"{odd}.{b64(mac.digest())}", "apr-1", now_ms=now)
    for ttl in (59, 604_801):
        with pytest.raises(ValueError, match="ttl_seconds"):
            signer.mint("apr-1", "user:ada@example.com", ttl, now_ms=now)


class _FakeSecrets:
    def __init__(self, value: str | None) -> None:
        self.value = value
        self.reads = 0

    def get_secret_value(self, SecretId: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        self.reads += 1
        if self.value is None:
            raise ClientError(
                {"Error": {"Code": "ResourceNotFoundException", "Message": "nope"}},
                "GetSecretValue",
            )
        return {"ARN": SecretId, "SecretString": self.value}


def test_link_key_is_cached_and_reread_after_its_ttl(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    now = [0.0]
    client = _FakeSecrets("s" * 64)
    key = SecretsManagerKey(client, "arn:secret", ttl_seconds=300, monotonic=lambda: now[0])
    assert key() == b"s" * 64
    now[0] = 299
    assert key() == b"s" * 64 and client.reads == 1
    now[0] = 300
    client.value = "t" * 64
    assert key() == b"t" * 64 and client.reads == 2
    assert "s" * 64 not in repr(key) and "s" * 64 not in caplog.text


def test_unreadable_or_short_link_key_is_unavailable() -> None:
    with pytest.raises(AuthUnavailableError, match="ResourceNotFoundException"):
        SecretsManagerKey(_FakeSecrets(None), "arn:secret")()
    with pytest.raises(AuthUnavailableError, match="at least 32 bytes"):
        SecretsManagerKey(_FakeSecrets("short"), "arn:secret")()


def test_link_key_from_secrets_manager_provisioned_like_local_mode(aws: None) -> None:
    """local/secrets.py creates the template's secrets in moto; the Api reads the key."""
    session = boto3.session.Session(region_name="us-east-1")
    template = load_template(TEMPLATE)
    arns = create_secrets(template, session)
    assert set(arns) == {"ApprovalLinkSecret", "PaymentsApiKeySecret"}  # every template secret
    assert create_secrets(template, session) == arns  # idempotent, same secret
    client = session.client("secretsmanager")
    key = SecretsManagerKey(client, arns["ApprovalLinkSecret"])()
    assert len(key) == 64 and key.isalnum()
    by_name = SecretsManagerKey(client, "durable-agents-local-approval-link-secret")()
    assert by_name == key  # the value survives re-provisioning; the name works as SecretId
    assert create_secrets({"Resources": {}}, session) == {}


# ----------------------------------------------------------------------------------------- IAM
def test_principal_from_iam() -> None:
    arn = "arn:aws:sts::123456789012:assumed-role/operator/alice"
    principal = principal_from_iam({"requestContext": {"identity": {"userArn": arn}}})
    assert (principal.via, principal.identity, principal.display) == ("iam", arn, arn)
    assert may_decide(principal, ["iam:arn:aws:sts::123456789012:assumed-role/operator/*"])
    assert not may_decide(principal, ["iam:arn:aws:sts::123456789012:assumed-role/other/*"])
    for event in ({}, {"requestContext": {"identity": {"userArn": None}}}, {"requestContext": 1}):
        with pytest.raises(AuthenticationError, match="SigV4"):
            principal_from_iam(event)
