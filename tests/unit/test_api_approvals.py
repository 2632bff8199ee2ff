"""Approvals over the Api: IAM callers, people with a JWT, signed links — and every rejection.

An agent waits in ``ctx.wait_for_approval`` (faithful runner, DynamoDB journal on moto); the
test decides through the Api handler with API Gateway REST proxy events, then resumes the run
and checks the agent received exactly that decision. The Api's runtime uses the runner's
skip-clock, so deadlines are crossed by ``runner.clock.advance``.
"""

from __future__ import annotations

import copy
import json
import logging
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, Runtime, agent
from durable_agents.events import CollectingPublisher
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.local.template import create_journal_table
from durable_agents.testing import AgentTestRunner
from durable_agents.waits.approval import ApprovalTimeoutError
from durable_agents.waits.auth import JwtVerifier
from durable_agents.waits.links import LinkSigner
from tests.conftest import TEMPLATE
from tests.unit.conftest import TABLE, Deployment, FakeLambdaContext
from tests.unit.test_auth import AUDIENCE, ISSUER, Keys, claims

EVENTS = Path(__file__).resolve().parents[2] / "events"
OPERATOR = "arn:aws:sts::123456789012:assumed-role/durable-agents-operator/alice"
OUTSIDER = "arn:aws:iam::123456789012:user/mallory"
# The service that delivers links (LINK_MINTERS): the only caller that may mint them.
NOTIFIER = "arn:aws:sts::123456789012:assumed-role/durable-agents-notifier/relay"
APPROVERS = [
    "iam:arn:aws:sts::123456789012:assumed-role/durable-agents-operator/*",
    "user:ada@example.com",
    "group:finance",
]
SUMMARY = "Refund <b>42 EUR</b> to order #7 <script>alert(1)</script>"
TIMEOUT_S = 3600
_DEFAULT = object()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        assert self.headers.get("Content-Type", "").startswith("application/json"), self.headers
        return json.loads(self.text)

    @property
    def html(self) -> str:
        assert self.headers.get("Content-Type", "").startswith("text/html"), self.headers
        return self.text


def request(
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
    raw_body: str | None = None,
    user_arn: Any = _DEFAULT,
) -> Reply:
    """Calls the Api handler with the event API Gateway would send (``user_arn=None``: no IAM)."""
    from api.app import handler

    event = copy.deepcopy(json.loads((EVENTS / "api_start_run.json").read_text()))
    event.update(
        httpMethod=method,
        path=path,
        resource=path,
        pathParameters=None,
        queryStringParameters=query,
        multiValueQueryStringParameters={k: [v] for k, v in query.items()} if query else None,
        body=raw_body if raw_body is not None else (None if body is None else json.dumps(body)),
    )
    base = {k: v for k, v in event["headers"].items() if k not in ("Authorization", "Accept")}
    event["headers"] = {**base, **(headers or {})}
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    event["requestContext"]["httpMethod"] = method
    event["requestContext"]["path"] = f"/dev{path}"
    event["requestContext"]["identity"]["userArn"] = OPERATOR if user_arn is _DEFAULT else user_arn
    response = handler(event, FakeLambdaContext())
    merged = {**(response.get("headers") or {})}
    for key, values in (response.get("multiValueHeaders") or {}).items():
        merged.setdefault(key, values[-1])
    return Reply(response["statusCode"], merged, response["body"])


# ----------------------------------------------------------------------------------- the agent
def _refund(ctx: DurableContext, amount: int) -> dict[str, Any]:
    try:
        decision = ctx.wait_for_approval(
            "refund",
            request={"order": 7, "amount": amount, "currency": "EUR"},
            approvers=APPROVERS,
            summary=SUMMARY,
            timeout=TIMEOUT_S,
        )
    except ApprovalTimeoutError as exc:
        return {"expired": exc.approval_id}
    return {
        "approved": decision.approved,
        "by": decision.decided_by,
        "via": decision.via,
        "comment": decision.comment,
        "request": json.loads(decision.request),
        **({"minted_by": decision.minted_by} if decision.via == "link" else {}),
    }


refund = agent(name="refund-approval", version="1", registry=AgentRegistry())(_refund)


@dataclass
class Pending:
    runner: AgentTestRunner
    run_id: str
    approval_id: str
    deployment: Deployment | None = None

    def finish(self) -> Any:
        result = self.runner.resume(self.run_id)
        assert result.status == "SUCCEEDED", result.error
        return result.output


def start_approval(runner: AgentTestRunner, amount: int = 42) -> tuple[str, str]:
    result = runner.run(amount)
    assert result.status == "SUSPENDED"
    waiting = result.header.waiting_on or {}
    assert waiting["kind"] == "approval"
    return result.run_id, str(waiting["approval_id"])


KEYS = Keys("api-key-1")


@pytest.fixture
def api(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """The Api with a link key in (moto) Secrets Manager and a JWT issuer with a local JWKS."""
    from api.app import get_runtime
    from api.routes import approvals

    arn = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="approval-link-key", SecretString=secrets.token_urlsafe(48)
    )["ARN"]
    monkeypatch.setenv("APPROVAL_LINK_SECRET_ARN", arn)
    monkeypatch.setenv("JWT_ISSUER", ISSUER)
    monkeypatch.setenv("JWT_AUDIENCE", AUDIENCE)
    monkeypatch.delenv("PUBLIC_BASE_URL", raising=False)
    monkeypatch.setenv(
        "LINK_MINTERS", "iam:arn:aws:sts::123456789012:assumed-role/durable-agents-notifier/*"
    )
    monkeypatch.setattr(approvals, "_link_signer", None)
    monkeypatch.setattr(
        approvals, "_jwt_verifier", JwtVerifier(ISSUER, AUDIENCE, jwks={"keys": [KEYS.jwk]})
    )
    get_runtime()
    yield deployment


@pytest.fixture
def pending(api: Deployment, monkeypatch: pytest.MonkeyPatch) -> Pending:
    from api.app import get_runtime

    journal = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    runner = AgentTestRunner(refund, journal=journal, mode="faithful")
    monkeypatch.setattr(get_runtime(), "clock", runner.clock)
    run_id, approval_id = start_approval(runner)
    requested = [e for e in runner.publisher.events if e.detail_type == "Approval Requested"]
    assert [e.detail["approval_id"] for e in requested] == [approval_id]
    assert "token" not in json.dumps(requested[0].detail)  # links are minted on request only
    api.published()
    return Pending(runner, run_id, approval_id, api)


def jwt(runner: AgentTestRunner, **overrides: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS.sign(claims(runner.clock, **overrides))}"}


def step_ready(deployment: Deployment | None) -> list[str]:
    assert deployment is not None
    return [
        e["detail"]["run_id"] for e in deployment.published() if e["detail-type"] == "Step Ready"
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
    assert page.headers["Referrer-Policy"] == "no-referrer"
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


# ------------------------------------------------------------------------------------- JWT
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


# ---------------------------------------------------------------------------- signed links
def mint(pending: Pending, approver: str = "user:ada@example.com", ttl: int = 600) -> str:
    reply = request(
        "POST",
        f"/approvals/{pending.approval_id}/links",
        {"approver": approver, "ttl_seconds": ttl},
        user_arn=NOTIFIER,
    )
    assert reply.status == 201, reply.text
    assert reply.headers["Cache-Control"] == "no-store"
    url: str = reply.json["url"]
    assert reply.json["approver"] == approver and len(reply.json["link_id"]) == 8
    return url


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["token"][0]


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
    assert page.headers["Referrer-Policy"] == "no-referrer"
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
        (use(aid, f"{payload}.{signature[:-3]}xyz"), 401, "does not match"),
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


# ----------------------------------------------------------------------------- concurrency
DECIDERS = 10


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from durable_agents.local.isolated_moto import IsolatedMotoServer as ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_ten_concurrent_decisions_exactly_one_wins(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten people press Approve at the same moment: one 200, nine 409 showing the winner."""
    from api import app as api_app

    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    table = f"journal-race-{secrets.token_hex(4)}"
    create_journal_table(client, table, TEMPLATE)
    journal = DynamoDBJournal(client, table)
    runner = AgentTestRunner(refund, journal=journal, mode="faithful")
    run_id, aid = start_approval(runner)
    # The Api's own runtime on the same table and clock (a separate client, as in Lambda).
    api_client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    publisher = CollectingPublisher()
    monkeypatch.setattr(
        api_app,
        "_runtime",
        Runtime(DynamoDBJournal(api_client, table), publisher=publisher, clock=runner.clock),
    )
    barrier = threading.Barrier(DECIDERS)

    def decide(i: int) -> Reply:
        barrier.wait()
        return request("POST", f"/approvals/{aid}", {"decision": "approve", "comment": f"n{i}"})

    with ThreadPoolExecutor(DECIDERS) as pool:
        replies = list(pool.map(decide, range(DECIDERS)))
    statuses = sorted(r.status for r in replies)
    assert statuses == [200] + [409] * (DECIDERS - 1), [r.text for r in replies]
    (winner,) = [(i, r) for i, r in enumerate(replies) if r.status == 200]
    index, reply = winner
    assert reply.json["decision"]["comment"] == f"n{index}"  # each thread saw its own request
    for other in replies:
        if other.status == 409:
            assert other.json["error"]["current"]["decision"] == reply.json["decision"]
    assert [e.detail["run_id"] for e in publisher.events] == [run_id]
    assert runner.resume(run_id).output["comment"] == f"n{index}"


def test_requests_resolved_in_threads_keep_their_own_event(
    api: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Powertools keeps the current event on a class attribute; the Api's resolver does not.

    While one request is in flight (its route blocked), another is resolved in this thread;
    the first must still answer from its own event (its Accept header asks for HTML).
    """
    from api.routes import approvals

    entered, release = threading.Event(), threading.Event()
    original = approvals.find_wait

    def slow_find(kind: str, wait_id: str) -> Any:
        if wait_id == "apr-slow":
            entered.set()
            release.wait(5)
        return original(kind, wait_id)

    monkeypatch.setattr(approvals, "find_wait", slow_find)
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(request, "GET", "/approvals/apr-slow", headers={"Accept": "text/html"})
        assert entered.wait(5)
        fast = request("GET", "/approvals/apr-fast", headers={"Accept": "application/json"})
        release.set()
        slow_reply = slow.result()
    assert fast.status == 404 and "apr-fast" in fast.json["error"]["message"]
    assert slow_reply.status == 404 and "apr-slow" in slow_reply.html


def test_every_route_is_ready_before_threads_share_the_resolver() -> None:
    """Powertools builds a route's middleware lazily and unguarded; the Api builds all first."""
    from api.app import ThreadSafeRestResolver, app

    app.build_route_stacks()
    routes = app._static_routes + app._dynamic_routes
    assert len(routes) >= 18 and all(r._middleware_stack_built for r in routes)

    fresh = ThreadSafeRestResolver()

    @fresh.get("/ping")
    def ping() -> dict[str, str]:
        return {"ok": fresh.current_event.path}

    event = json.loads((EVENTS / "api_get_run.json").read_text())
    event.update(path="/ping", resource="/ping", httpMethod="GET", pathParameters=None)
    barrier = threading.Barrier(8)

    def call(_: int) -> int:
        barrier.wait()
        return int(fresh.resolve(event, FakeLambdaContext())["statusCode"])

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(call, range(8))) == [200] * 8
