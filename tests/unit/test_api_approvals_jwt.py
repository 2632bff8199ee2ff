"""Approvals decided by people with a JWT (``/people/approvals``) — and every rejection."""

from __future__ import annotations

import pytest

from tests.unit import approvals_harness as harness
from tests.unit.approvals_harness import (
    KEYS,
    Pending,
    jwt,
    request,
    step_ready,
)
from tests.unit.test_auth import Keys, claims

# The fixtures: the Api with a link key and a JWT issuer; an agent waiting on a refund.
api = harness.api
pending = harness.pending


def test_person_with_a_verified_email_decides(pending: Pending) -> None:
    path = f"/people/approvals/{pending.approval_id}"
    shown = request("GET", path, headers=jwt(pending.runner), user_arn=None)
    assert shown.status == 200 and shown.json["status"] == "pending"
    reply = request(
        "POST",
        path,
        {"decision": "approve", "comment": "fine"},
        headers=jwt(pending.runner),
        user_arn=None,
    )
    assert reply.status == 200
    assert reply.json["decision"]["decided_by"] == "user:ada@example.com"
    assert reply.json["decision"]["via"] == "jwt"
    assert step_ready(pending.deployment) == [pending.run_id]
    output = pending.finish()
    assert (output["approved"], output["by"], output["via"]) == (
        True,
        "user:ada@example.com",
        "jwt",
    )


def test_group_member_decides(pending: Pending) -> None:
    headers = jwt(
        pending.runner,
        sub="sub-grace",
        email="grace@example.com",
        **{"cognito:groups": ["finance"]},
    )
    reply = request(
        "POST",
        f"/people/approvals/{pending.approval_id}",
        {"decision": "reject"},
        headers=headers,
        user_arn=None,
    )
    assert reply.status == 200
    assert pending.finish()["by"] == "user:grace@example.com"


def test_jwt_rejections(pending: Pending) -> None:
    path = f"/people/approvals/{pending.approval_id}"
    runner = pending.runner
    now = runner.clock.now_ms() // 1000
    good = KEYS.sign(claims(runner.clock))
    head, payload, _sig = good.split(".")
    unsigned_header = "eyJhbGciOiJub25lIiwia2lkIjoiYXBpLWtleS0xIn0"  # {"alg":"none","kid":...}
    unauthenticated = {
        "expired": jwt(runner, exp=now - 300),
        "wrong audience": jwt(runner, aud="another-app"),
        "wrong issuer": jwt(runner, iss="https://issuer.example.com"),
        "bad signature": {"Authorization": f"Bearer {head}.{payload}.{_sig[::-1]}"},
        "alg none": {"Authorization": f"Bearer {unsigned_header}.{payload}."},
        "unknown kid": {"Authorization": f"Bearer {Keys('other').sign(claims(runner.clock))}"},
        "no header": {},
        "basic auth": {"Authorization": "Basic YWRhOnB3"},
    }
    for what, headers in unauthenticated.items():
        for method in ("GET", "POST"):
            reply = request(method, path, {"decision": "approve"}, headers=headers, user_arn=None)
            assert reply.status == 401, (what, reply.text)
            assert reply.json["error"]["type"] == "AuthenticationError"
            assert reply.headers["WWW-Authenticate"].startswith("Bearer")
            assert good not in reply.text
    forbidden = {
        "not an approver": jwt(
            runner, sub="sub-eve", email="eve@example.com", **{"cognito:groups": ["sales"]}
        ),
        "unverified email": jwt(
            runner, sub="sub-x", email_verified=False, **{"cognito:groups": None}
        ),
    }
    for what, headers in forbidden.items():
        reply = request("POST", path, {"decision": "approve"}, headers=headers, user_arn=None)
        assert reply.status == 403, (what, reply.text)
        assert "is not among the approvers" in reply.json["error"]["message"]
    assert (
        request(
            "POST",
            "/people/approvals/apr-missing",
            {"decision": "approve"},
            headers=jwt(runner),
            user_arn=None,
        ).status
        == 404
    )
    assert (
        request("POST", path, {"decision": "yes"}, headers=jwt(runner), user_arn=None).status == 422
    )
    assert request("GET", f"/approvals/{pending.approval_id}").json["status"] == "pending"


def test_people_routes_without_jwt_configuration_answer_503(
    pending: Pending, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.routes import approvals

    monkeypatch.setattr(approvals, "_jwt_verifier", None)
    monkeypatch.delenv("JWT_ISSUER")
    reply = request(
        "GET",
        f"/people/approvals/{pending.approval_id}",
        headers=jwt(pending.runner),
        user_arn=None,
    )
    assert reply.status == 503
    assert "JwtIssuer" in reply.json["error"]["message"]
