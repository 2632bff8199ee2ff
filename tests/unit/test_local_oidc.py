"""The local OIDC issuer: people's routes can be tried end to end in local mode.

It signs tokens with a key made at start-up, publishes its JWKS and discovery document on
loopback, and refuses to run inside a Lambda execution environment.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from durable_agents.auth.jwt import jwt_verifier_from_env
from durable_agents.auth.tokens import AuthenticationError
from durable_agents_local.oidc import (
    LOCAL_AUDIENCE,
    LocalIssuer,
    LocalIssuerRefusedError,
    request_token,
)
from tests.unit import test_api_approvals as approvals_suite
from tests.unit.test_api_approvals import Pending
from tests.unit.test_api_hostile_input import send

api = approvals_suite.api
pending = approvals_suite.pending


@pytest.fixture
def issuer() -> Iterator[LocalIssuer]:
    local = LocalIssuer(port=0)
    local.start()
    yield local
    local.stop()


def test_tokens_verify_through_discovery_like_any_issuer(issuer: LocalIssuer) -> None:
    env = issuer.environment()
    assert env["JWT_ISSUER"] == issuer.url and env["JWT_AUDIENCE"] == LOCAL_AUDIENCE
    assert issuer.url.startswith("http://127.0.0.1:")
    token = request_token(issuer.url, "ada@example.com", groups=["finance"])
    principal = jwt_verifier_from_env({**env, "JWT_JWKS_URL": ""}).verify(token)
    assert principal.identity == "ada@example.com"
    assert principal.groups == frozenset({"finance"})
    assert "ada@example.com" in principal.user_ids


def test_a_token_of_another_issuer_key_is_refused(issuer: LocalIssuer) -> None:
    other = LocalIssuer(port=0)
    other.start()
    try:
        forged = request_token(other.url, "ada@example.com", groups=["finance"])
    finally:
        other.stop()
    with pytest.raises(AuthenticationError):
        jwt_verifier_from_env(issuer.environment()).verify(forged)


def test_it_refuses_to_start_inside_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "durable-agents-ApiFunction")
    with pytest.raises(LocalIssuerRefusedError, match="Lambda"):
        LocalIssuer(port=0).start()


def test_the_people_route_decides_with_a_local_token(
    pending: Pending, issuer: LocalIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.routes import approvals

    for key, value in issuer.environment().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(approvals, "_jwt_verifier", None)  # built from the environment
    # Issued at the time of the run's (skip) clock, which the route checks expiry against.
    now_s = pending.runner.clock.now_ms() // 1000
    token = issuer.mint("ada@example.com", groups=["finance"], now_s=now_s)
    status, body = send(
        "POST",
        f"/people/approvals/{pending.approval_id}",
        json.dumps({"decision": "approve", "comment": "ok"}),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        user_arn=None,
    )
    assert status == 200, body
    assert "ada@example.com" in json.dumps(body)
