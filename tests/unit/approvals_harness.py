"""Approvals over the Api: the agent, the API Gateway events and the fixtures the suites share.

An agent waits in ``ctx.wait_for_approval`` (faithful runner, DynamoDB journal on moto); the
tests decide through the Api handler with API Gateway REST proxy events, then resume the run
and check the agent received exactly that decision. The Api's runtime uses the runner's
skip-clock, so deadlines are crossed by ``runner.clock.advance``. Used by the
``test_api_approvals*.py`` files and the other Api suites (through ``test_api_approvals``).
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.auth.jwt import JwtVerifier
from durable_agents.engine.operations.approval import ApprovalTimeoutError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.testing import AgentTestRunner
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
    from api.routes import approvals
    from api.services import get_runtime

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
    from api.services import get_runtime

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
