"""Approvals decided through signed links (``/links/approvals``) — and every rejection."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from durable_agents.auth.links import LinkSigner
from tests.unit import approvals_harness as harness
from tests.unit.approvals_harness import (
    APPROVERS,
    NOTIFIER,
    Pending,
    Reply,
    mint,
    request,
    start_approval,
    step_ready,
    token_of,
)
from tests.unit.tampering import changed_in_the_middle

# The fixtures: the Api with a link key and a JWT issuer; an agent waiting on a refund.
api = harness.api
pending = harness.pending


def test_signed_link_page_form_decision_and_single_use(
    pending: Pending, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    aid = pending.approval_id
    url = mint(pending)
    parts = urlsplit(url)
    assert (
        f"{parts.scheme}://{parts.netloc}"
        == "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com"
    )
    assert parts.path == f"/dev/links/approvals/{aid}"
    token = token_of(url)

    page = request("GET", f"/links/approvals/{aid}", query={"token": token}, user_arn=None)
    assert page.status == 200
    assert f'value="{token}"' in page.html and f'action="{aid}"' in page.html
    assert "&lt;script&gt;" in page.html and "<script>" not in page.html
    # The link's token is in this page's URL: no referrer leaves it, not even to the Api.
    assert page.headers["Referrer-Policy"] == "no-referrer"
    refused = request("GET", f"/links/approvals/{aid}", query={"token": "x" + token},
                      user_arn=None, headers={"Accept": "text/html"})  # fmt: skip
    assert refused.status >= 400 and refused.headers["Referrer-Policy"] == "no-referrer"
    as_json = request(
        "GET",
        f"/links/approvals/{aid}",
        query={"token": token},
        headers={"Accept": "application/json"},
        user_arn=None,
    )
    assert as_json.json["approval_id"] == aid

    form = urlencode({"token": token, "decision": "approve", "comment": "via the link"})
    browser = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/html"}
    done = request("POST", f"/links/approvals/{aid}", raw_body=form, headers=browser, user_arn=None)
    assert done.status == 200 and "Decision recorded" in done.html
    decision = request("GET", f"/approvals/{aid}").json["decision"]
    assert decision["via"] == "link"
    link_id = decision["decided_by"].removeprefix("user:ada@example.com (signed link ")[:-1]
    assert len(link_id) == 8 and token.startswith(token[:4])
    assert step_ready(pending.deployment) == [pending.run_id]

    second = request(
        "POST", f"/links/approvals/{aid}", raw_body=form, headers=browser, user_arn=None
    )
    assert second.status == 409 and "already approved" in second.html
    second_json = request(
        "POST", f"/links/approvals/{aid}", {"token": token, "decision": "reject"}, user_arn=None
    )
    assert second_json.status == 409
    assert second_json.json["error"]["current"]["decision"]["decided_by"] == decision["decided_by"]

    output = pending.finish()
    assert output["via"] == "link" and output["comment"] == "via the link"
    assert token not in caplog.text  # never logged


def test_link_json_post_and_public_base_url(
    pending: Pending, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUBLIC_BASE_URL", "https://approvals.example.com/")
    url = mint(pending, "group:finance", ttl=60)
    assert url.startswith(
        f"https://approvals.example.com/links/approvals/{pending.approval_id}?token="
    )
    reply = request(
        "POST",
        f"/links/approvals/{pending.approval_id}",
        {"token": token_of(url), "decision": "reject", "comment": "no"},
        user_arn=None,
    )
    assert reply.status == 200 and reply.json["status"] == "rejected"
    assert reply.json["decision"]["decided_by"].startswith("group:finance (signed link ")
    assert pending.finish()["approved"] is False


def test_link_rejections(pending: Pending) -> None:
    aid = pending.approval_id
    token = token_of(mint(pending))
    payload, signature = token.split(".")
    runner = pending.runner
    other_run, other_aid = start_approval(runner, amount=7)

    def use(approval_id: str, tok: str | None, **body: Any) -> Reply:
        data = {"decision": "approve", **body} | ({"token": tok} if tok is not None else {})
        return request("POST", f"/links/approvals/{approval_id}", data, user_arn=None)

    flipped = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
    cases = [
        (use(aid, f"{flipped}.{signature}"), 401, "does not match"),
        (use(aid, f"{payload}.{changed_in_the_middle(signature)}"), 401, "does not match"),
        (use(aid, "garbage"), 401, "malformed"),
        (use(aid, None), 401, "missing"),
        (use(other_aid, token), 401, "another approval"),
        (
            request(
                "GET",
                f"/links/approvals/{aid}",
                query={"token": flipped + "." + signature},
                headers={"Accept": "application/json"},
                user_arn=None,
            ),
            401,
            "does not match",
        ),
        (use(aid, token, decision="maybe"), 422, "schema"),
        (use(aid, token, extra=1), 422, "schema"),
        (request("POST", f"/links/approvals/{aid}", raw_body="{x", user_arn=None), 400, "JSON"),
        (
            request(
                "POST",
                f"/links/approvals/{aid}",
                raw_body="token=a&token=b",
                user_arn=None,
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Accept": "application/json",
                },
            ),
            400,
            "repeated",
        ),
    ]
    for reply, status, fragment in cases:
        assert reply.status == status, (fragment, reply.text)
        assert fragment in reply.json["error"]["message"], reply.text
    # A browser gets the same refusal as a page, not JSON.
    page = request("GET", f"/links/approvals/{aid}", query={"token": "garbage"}, user_arn=None)
    assert page.status == 401 and "malformed" in page.html

    # Signed with our key, but for an approver the approval does not list (anymore).
    from api.routes.approvals import link_signer

    signer: LinkSigner = link_signer()
    stranger, _ = signer.mint(aid, "user:mallory@example.com", 600, now_ms=runner.clock.now_ms())
    reply = use(aid, stranger)
    assert reply.status == 403 and "user:mallory@example.com" in reply.json["error"]["message"]

    # Minting: only for one of the approval's approvers, within the TTL bounds.
    for body, status in (
        ({"approver": "user:mallory@example.com"}, 422),
        ({"approver": "user:ada@example.com", "ttl_seconds": 10}, 422),
        ({"approver": "user:ada@example.com", "ttl_seconds": 604_801}, 422),
        ({}, 422),
    ):
        assert (
            request("POST", f"/approvals/{aid}/links", body, user_arn=NOTIFIER).status == status
        ), body
    assert (
        request("POST", f"/approvals/{aid}/links", {"approver": APPROVERS[1]}, user_arn=None).status
        == 401
    )
    assert (
        request(
            "POST", "/approvals/apr-nope/links", {"approver": APPROVERS[1]}, user_arn=NOTIFIER
        ).status
        == 404
    )

    # Expired link (the approval itself is still open).
    runner.clock.advance(601_000)
    reply = use(aid, token)
    assert reply.status == 401 and "expired" in reply.json["error"]["message"]
    assert request("GET", f"/approvals/{aid}").json["status"] == "pending"
    # A link to an approval already decided: minting gets 409.
    assert request("POST", f"/approvals/{other_aid}", {"decision": "approve"}).status == 200
    assert (
        request(
            "POST", f"/approvals/{other_aid}/links", {"approver": APPROVERS[1]}, user_arn=NOTIFIER
        ).status
        == 409
    )
    assert runner.resume(other_run).output["approved"] is True


def test_links_without_a_key_answer_503(pending: Pending, monkeypatch: pytest.MonkeyPatch) -> None:
    from api.routes import approvals

    monkeypatch.setattr(approvals, "_link_signer", None)
    monkeypatch.delenv("APPROVAL_LINK_SECRET_ARN")
    reply = request(
        "POST",
        f"/approvals/{pending.approval_id}/links",
        {"approver": APPROVERS[1]},
        user_arn=NOTIFIER,
    )
    assert reply.status == 503 and "APPROVAL_LINK_SECRET_ARN" in reply.json["error"]["message"]
    assert (
        request(
            "GET", f"/links/approvals/{pending.approval_id}", query={"token": "x"}, user_arn=None
        ).status
        == 503
    )
