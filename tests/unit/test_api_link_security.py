"""Security of signed links: who may mint them, for whom, what they record, and their URL.

Over the Api handler with API Gateway events (``test_api_approvals``' fixtures): minting is a
privilege of the configured notifier principals (``LINK_MINTERS``), an ``iam:`` approver is
never turned into a bearer link, a decision names who minted the link, and a link's scheme and
host come from configuration, never from request headers.
"""

from __future__ import annotations

import pytest

from tests.unit import test_api_approvals as approvals_api
from tests.unit.test_api_approvals import (
    APPROVERS,
    NOTIFIER,
    OPERATOR,
    OUTSIDER,
    Pending,
    mint,
    request,
    step_ready,
    token_of,
)

# The approvals suite's fixtures: the Api with a link key, and an agent waiting on a refund.
api = approvals_api.api
pending = approvals_api.pending


def _mint_as(pending: Pending, caller: str, approver: str = "group:finance") -> tuple[int, str]:
    reply = request(
        "POST",
        f"/approvals/{pending.approval_id}/links",
        {"approver": approver, "ttl_seconds": 600},
        user_arn=caller,
    )
    return reply.status, reply.text


def test_callers_other_than_the_notifier_cannot_mint(pending: Pending) -> None:
    # Even an approver may not mint a link for someone else (the finding: any IAM caller did).
    for caller in (OUTSIDER, OPERATOR):
        status, text = _mint_as(pending, caller)
        assert status == 403, text
        assert "may not mint" in text and caller in text
    assert request("GET", f"/approvals/{pending.approval_id}").json["status"] == "pending"


def test_minting_is_refused_until_minters_are_configured(
    pending: Pending, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LINK_MINTERS")
    status, text = _mint_as(pending, NOTIFIER)
    assert status == 403 and "LINK_MINTERS" in text


def test_an_iam_approver_is_never_turned_into_a_link(pending: Pending) -> None:
    status, text = _mint_as(pending, NOTIFIER, approver=APPROVERS[0])
    assert status == 422, text
    assert "iam:" in text and "SigV4" in text


def test_the_decision_names_the_links_approver_and_who_minted_it(pending: Pending) -> None:
    url = mint(pending, "group:finance")
    reply = request(
        "POST",
        f"/links/approvals/{pending.approval_id}",
        {"token": token_of(url), "decision": "approve"},
        user_arn=None,
    )
    assert reply.status == 200, reply.text
    decision = reply.json["decision"]
    assert decision["via"] == "link"
    assert decision["decided_by"].startswith("group:finance (signed link ")
    assert decision["minted_by"] == NOTIFIER
    assert step_ready(pending.deployment) == [pending.run_id]
    output = pending.finish()
    assert (output["via"], output["minted_by"]) == ("link", NOTIFIER)


def test_forwarded_headers_never_shape_a_link(pending: Pending) -> None:
    reply = request(
        "POST",
        f"/approvals/{pending.approval_id}/links",
        {"approver": "group:finance"},
        headers={"X-Forwarded-Proto": "javascript", "Host": "evil.example.com"},
        user_arn=NOTIFIER,
    )
    assert reply.status == 201, reply.text
    assert reply.json["url"].startswith(
        f"https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/dev/links/approvals/"
        f"{pending.approval_id}?token="
    )


@pytest.mark.parametrize(
    "configured",
    [
        "javascript:alert(1)//",
        "http://approvals.example.com",
        "ftp://approvals.example.com",
        "https://",
        "https://user@approvals.example.com",
        "https://approvals.example.com/?x=1",
    ],
)
def test_a_configured_base_url_must_be_https(
    pending: Pending, monkeypatch: pytest.MonkeyPatch, configured: str
) -> None:
    monkeypatch.setenv("PUBLIC_BASE_URL", configured)
    status, text = _mint_as(pending, NOTIFIER)
    assert status == 503, text
    assert "PUBLIC_BASE_URL" in text


def test_plain_http_is_accepted_on_loopback_only(
    pending: Pending, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUBLIC_BASE_URL", "http://127.0.0.1:3000")
    url = mint(pending)
    assert url.startswith(f"http://127.0.0.1:3000/links/approvals/{pending.approval_id}?token=")


def test_a_link_already_minted_for_an_iam_approver_decides_nothing(pending: Pending) -> None:
    from api.routes.approvals import link_signer

    token, _ = link_signer().mint(
        pending.approval_id, APPROVERS[0], 600, now_ms=pending.runner.clock.now_ms()
    )
    reply = request(
        "POST",
        f"/links/approvals/{pending.approval_id}",
        {"token": token, "decision": "approve"},
        user_arn=None,
    )
    assert reply.status == 403, reply.text
    assert request("GET", f"/approvals/{pending.approval_id}").json["status"] == "pending"
