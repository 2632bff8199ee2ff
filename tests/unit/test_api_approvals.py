"""Approvals over the Api decided by IAM callers: list, show, decide, reject, expire.

The agent, the events and the fixtures are in ``approvals_harness``; people with a JWT, signed
links and concurrent decisions have their own ``test_api_approvals_*.py`` files. Other suites
import the helpers and fixtures from this module: it re-exports them.
"""

from __future__ import annotations

from tests.unit import approvals_harness as harness
from tests.unit.approvals_harness import (
    APPROVERS,
    EVENTS,
    KEYS,
    NOTIFIER,
    OPERATOR,
    OUTSIDER,
    SUMMARY,
    TIMEOUT_S,
    Pending,
    Reply,
    jwt,
    mint,
    refund,
    request,
    start_approval,
    step_ready,
    token_of,
)

# The fixtures: the Api with a link key and a JWT issuer; an agent waiting on a refund.
api = harness.api
pending = harness.pending

# Other suites import the helpers and fixtures from here.
__all__ = [
    "APPROVERS",
    "EVENTS",
    "KEYS",
    "NOTIFIER",
    "OPERATOR",
    "OUTSIDER",
    "SUMMARY",
    "TIMEOUT_S",
    "Pending",
    "Reply",
    "api",
    "jwt",
    "mint",
    "pending",
    "refund",
    "request",
    "start_approval",
    "step_ready",
    "token_of",
]


# ------------------------------------------------------------------------------------ IAM
def test_iam_list_show_decide_and_resume(pending: Pending) -> None:
    aid = pending.approval_id
    listing = request("GET", "/approvals", query={"status": "pending"})
    assert listing.status == 200
    (shown,) = listing.json["approvals"]
    assert shown["approval_id"] == aid and shown["status"] == "pending"
    assert shown["request"] == {"amount": 42, "currency": "EUR", "order": 7}
    assert shown["approvers"] == APPROVERS and shown["summary"] == SUMMARY
    assert shown["agent"] == "refund-approval" and shown["deadline"] and shown["decision"] is None
    assert request("GET", f"/approvals/{aid}").json == shown

    decided = request("POST", f"/approvals/{aid}", {"decision": "approve", "comment": "ok"})
    assert decided.status == 200
    decision = decided.json["decision"]
    assert decided.json["status"] == "approved"
    assert decision["approved"] is True and decision["via"] == "iam"
    assert decision["decided_by"] == OPERATOR and decision["comment"] == "ok"
    assert step_ready(pending.deployment) == [pending.run_id]

    again = request("POST", f"/approvals/{aid}", {"decision": "reject"})
    assert again.status == 409
    assert again.json["error"]["type"] == "WaitGoneError"
    assert "already approved by" in again.json["error"]["message"]
    assert again.json["error"]["current"]["decision"] == decision

    assert pending.finish() == {
        "approved": True,
        "by": OPERATOR,
        "via": "iam",
        "comment": "ok",
        "request": {"amount": 42, "currency": "EUR", "order": 7},
    }
    by_status = {
        s: [
            a["approval_id"]
            for a in request("GET", "/approvals", query={"status": s}).json["approvals"]
        ]
        for s in ("pending", "approved", "rejected", "expired")
    }
    assert by_status == {"pending": [], "approved": [aid], "rejected": [], "expired": []}


def test_iam_reject_is_recorded_as_not_approved(pending: Pending) -> None:
    reply = request("POST", f"/approvals/{pending.approval_id}", {"decision": "reject"})
    assert reply.status == 200 and reply.json["status"] == "rejected"
    assert pending.finish()["approved"] is False
    listed = request("GET", "/approvals", query={"status": "rejected"}).json["approvals"]
    assert [a["approval_id"] for a in listed] == [pending.approval_id]


def test_approval_page_is_escaped_html_for_browsers(pending: Pending) -> None:
    page = request(
        "GET",
        f"/approvals/{pending.approval_id}",
        headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
    )
    assert page.status == 200
    assert "<script>alert(1)</script>" not in page.html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.html
    assert '"currency": "EUR"' in page.html.replace("&quot;", '"')
    # same-origin, not no-referrer: a browser without Sec-Fetch-Site (Safari before 16.4) then
    # posts the form with the page's Origin, not "null" (which the cross-site check refuses);
    # no referrer ever leaves for another origin.
    assert page.headers["Referrer-Policy"] == "same-origin"
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert page.headers["Cache-Control"] == "no-store"
    assert 'name="decision" value="approve"' in page.html


def test_iam_rejections(pending: Pending) -> None:
    aid = pending.approval_id
    cases: list[tuple[Reply, int, str]] = [
        (
            request("POST", f"/approvals/{aid}", {"decision": "approve"}, user_arn=OUTSIDER),
            403,
            "is not among the approvers",
        ),
        (
            request("POST", f"/approvals/{aid}", {"decision": "approve"}, user_arn=None),
            401,
            "SigV4",
        ),
        (request("GET", f"/approvals/{aid}", user_arn=None), 401, "SigV4"),
        (
            request("POST", "/approvals/apr-000000000000000000000000", {"decision": "approve"}),
            404,
            "no approval or callback",
        ),
        (request("GET", "/approvals/apr-unknown"), 404, "no approval or callback"),
        (request("GET", "/approvals/a%2Fb"), 404, "no approval or callback"),
        (request("POST", f"/approvals/{aid}", raw_body="{nope"), 400, "not valid JSON"),
        (request("POST", f"/approvals/{aid}", raw_body=""), 400, "needs a JSON body"),
        (request("POST", f"/approvals/{aid}", {"decision": "maybe"}), 422, "schema"),
        (
            request("POST", f"/approvals/{aid}", {"decision": "approve", "comment": "x" * 2001}),
            422,
            "schema",
        ),
        (request("POST", f"/approvals/{aid}", {"decision": "approve", "by": "me"}), 422, "schema"),
        (request("POST", f"/approvals/{aid}", ["approve"]), 422, "schema"),
        (request("GET", "/approvals", query={"status": "maybe"}), 400, "unknown status"),
        (request("GET", "/approvals", query={"limit": "0"}), 400, "between 1 and 100"),
        (request("GET", "/approvals", query={"limit": "x"}), 400, "integer"),
    ]
    for reply, status, fragment in cases:
        assert reply.status == status, (fragment, reply.text)
        assert fragment in reply.json["error"]["message"], reply.text
    assert request("GET", f"/approvals/{aid}").json["status"] == "pending"  # untouched
    assert step_ready(pending.deployment) == []


def test_decision_after_the_deadline_is_410_and_the_agent_sees_the_timeout(
    pending: Pending,
) -> None:
    pending.runner.clock.advance(TIMEOUT_S * 1000)
    reply = request("POST", f"/approvals/{pending.approval_id}", {"decision": "approve"})
    assert reply.status == 410
    assert reply.json["error"]["current"]["status"] == "expired"
    assert "deadline passed" in reply.json["error"]["message"]
    assert step_ready(pending.deployment) == [pending.run_id]
    # Expired: every way in answers 410 now (the record says EXPIRED).
    assert (
        request("POST", f"/approvals/{pending.approval_id}", {"decision": "reject"}).status == 410
    )
    link = request(
        "POST",
        f"/approvals/{pending.approval_id}/links",
        {"approver": APPROVERS[1]},
        user_arn=NOTIFIER,
    )
    assert link.status == 410
    assert pending.finish() == {"expired": pending.approval_id}
    expired = request("GET", "/approvals", query={"status": "expired"}).json["approvals"]
    assert [a["approval_id"] for a in expired] == [pending.approval_id]
