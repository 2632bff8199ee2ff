"""api.sam_emulator: the IAM caller SAM's API Gateway emulation leaves out (`make sam-local`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from api.sam_emulator import CALLER_VARIABLE, TOKEN_HEADER, TOKEN_VARIABLE, authenticate
from tests.unit.conftest import Deployment, FakeLambdaContext

EVENTS = Path(__file__).resolve().parents[2] / "events"

CALLER = "arn:aws:iam::123456789012:user/sam-local"
EMULATED = {"AWS_SAM_LOCAL": "true", TOKEN_VARIABLE: "s3cret-token", CALLER_VARIABLE: CALLER}


def _event(
    headers: dict[str, str] | None = None, identity: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "httpMethod": "POST",
        "path": "/runs",
        "headers": headers,
        "requestContext": {
            "apiId": "1234567890",
            "identity": identity or {"sourceIp": "127.0.0.1"},
        },
    }


def _caller(event: dict[str, Any]) -> Any:
    return event["requestContext"]["identity"].get("userArn")


def test_the_sessions_token_makes_the_request_the_sessions_iam_caller() -> None:
    event = _event({TOKEN_HEADER.lower(): "s3cret-token"})
    authenticate(event, EMULATED)
    assert _caller(event) == CALLER


@pytest.mark.parametrize(
    "headers",
    [None, {}, {TOKEN_HEADER: "wrong"}, {TOKEN_HEADER: ""}, {TOKEN_HEADER: "s3cret-token "}],
)
def test_without_the_token_the_request_names_no_caller(headers: dict[str, str] | None) -> None:
    # As an unsigned request on AWS: api.authn then refuses it on every IAM route (401).
    event = _event(headers)
    authenticate(event, EMULATED)
    assert _caller(event) is None


@pytest.mark.parametrize(
    "environ",
    [
        {},  # a deployed Api: Lambda never sets AWS_SAM_LOCAL
        {TOKEN_VARIABLE: "s3cret-token", CALLER_VARIABLE: CALLER},  # variables set, not in SAM
        {"AWS_SAM_LOCAL": "true"},  # plain `sam local` without make sam-local's overlay
        {"AWS_SAM_LOCAL": "true", TOKEN_VARIABLE: "s3cret-token", CALLER_VARIABLE: ""},
        {"AWS_SAM_LOCAL": "true", TOKEN_VARIABLE: "s3cret-token", CALLER_VARIABLE: "alice"},
        {"AWS_SAM_LOCAL": "TRUE", TOKEN_VARIABLE: "s3cret-token", CALLER_VARIABLE: CALLER},
    ],
)
def test_outside_the_emulation_it_does_nothing(environ: dict[str, str]) -> None:
    event = _event({TOKEN_HEADER: "s3cret-token"})
    before = copy.deepcopy(event)
    authenticate(event, environ)
    assert event == before


def test_a_caller_already_named_is_left_as_it_is() -> None:
    event = _event({TOKEN_HEADER: "s3cret-token"}, {"userArn": "arn:aws:iam::1:user/bob"})
    authenticate(event, EMULATED)
    assert _caller(event) == "arn:aws:iam::1:user/bob"


def test_an_event_without_a_request_context_gets_one() -> None:
    event: dict[str, Any] = {"headers": {TOKEN_HEADER: "s3cret-token"}}
    authenticate(event, EMULATED)
    assert _caller(event) == CALLER


def _start_run(headers: dict[str, str]) -> dict[str, Any]:
    from api.app import handler

    event = copy.deepcopy(json.loads((EVENTS / "api_start_run.json").read_text()))
    event["requestContext"]["identity"] = {"sourceIp": "127.0.0.1"}  # as SAM's start-api sends
    event["headers"] = {"Content-Type": "application/json", **headers}
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    return dict(handler(event, FakeLambdaContext()))


def test_the_handler_applies_it_before_routing(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in EMULATED.items():
        monkeypatch.setenv(key, value)
    unsigned = _start_run({})
    assert unsigned["statusCode"] == 401, unsigned
    signed = _start_run({TOKEN_HEADER: "s3cret-token"})
    assert signed["statusCode"] == 201, signed
    assert "s3cret-token" not in json.dumps([unsigned, signed])
    (published,) = deployment.published()
    assert published["detail-type"] == "Step Ready"


def test_a_deployed_api_ignores_the_token(deployment: Deployment) -> None:
    assert _start_run({TOKEN_HEADER: "s3cret-token"})["statusCode"] == 401
