"""The Api client: SigV4 signing, --stack resolution (moto CloudFormation), error mapping."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from moto import mock_aws

from durable_agents_local.cli.api_client import (
    ApiClient,
    ApiConfigError,
    ApiNotAllowedError,
    ApiNotFoundError,
    ApiRefusedError,
    ApiUnreachableError,
    connect,
    is_local,
    region_of,
    stack_api_url,
)
from durable_agents_local.identity import CALLER_HEADER
from durable_agents_local.moto_server import free_port
from tests.unit.api_standin import StandIn, stand_in_api

CREDENTIALS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
API = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod"


@pytest.fixture
def api() -> Iterator[StandIn]:
    with stand_in_api() as stand_in:
        yield stand_in


def _resign(method: str, url: str, data: bytes | None, headers: dict[str, str]) -> str:
    """botocore's own signature of the same request at the same instant."""
    at = datetime.strptime(headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    unsigned = {k: v for k, v in headers.items() if k not in ("Authorization", "X-Amz-Date")}
    request = AWSRequest(method=method, url=url, data=data, headers=unsigned)
    with mock.patch("botocore.auth.get_current_datetime", return_value=at.replace(tzinfo=None)):
        SigV4Auth(CREDENTIALS, "execute-api", "eu-west-1").add_auth(request)
    return str(request.headers["Authorization"])


def test_a_request_is_signed_with_sigv4_for_execute_api_in_the_urls_region() -> None:
    client = ApiClient(API, credentials=CREDENTIALS, region="eu-west-1")
    url = f"{API}/runs?limit=5&status=RUNNING"
    data = json.dumps({"reason": "x"}).encode()
    headers = client.headers("POST", url, data)
    authorization = headers["Authorization"]
    day = headers["X-Amz-Date"][:8]
    assert authorization.startswith(
        f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{day}/eu-west-1/execute-api/aws4_request, "
    )
    assert "SignedHeaders=" in authorization and "host" in authorization
    assert authorization == _resign("POST", url, data, headers)
    # The signature covers the body: another body, another signature.
    assert authorization != _resign("POST", url, b'{"reason": "y"}', headers)
    assert CALLER_HEADER not in headers


def test_session_credentials_send_their_token() -> None:
    temporary = Credentials("ASIAEXAMPLE", "secret", token="session-token")
    headers = ApiClient(API, credentials=temporary, region="eu-west-1").headers(
        "GET", f"{API}/runs", None
    )
    assert headers["X-Amz-Security-Token"] == "session-token"


def test_local_mode_is_unsigned_and_names_the_caller(api: StandIn) -> None:
    api.answers[("GET", "/runs")] = (200, {"runs": [], "cursor": None})
    caller = "arn:aws:iam::000000000000:user/ops"
    ApiClient(api.url, caller_arn=caller).call("GET", "/runs", query={"agent": "a", "x": None})
    (received,) = api.received
    assert "Authorization" not in received.headers
    assert received.headers[CALLER_HEADER] == caller
    assert received.query == {"agent": "a"}


def test_a_signed_request_reaches_the_server_with_its_signature(api: StandIn) -> None:
    api.answers[("POST", "/runs/run-1/cancel")] = (202, {"run_id": "run-1"})
    client = ApiClient(api.url, credentials=CREDENTIALS, region="eu-west-1")
    assert client.call("POST", "/runs/run-1/cancel", body={"reason": "r"}) == {"run_id": "run-1"}
    (received,) = api.received
    assert received.headers["Authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert received.body == {"reason": "r"}


def test_urls_say_whether_they_are_local_and_which_region() -> None:
    assert is_local("http://127.0.0.1:3000") and is_local("http://localhost:3000/")
    assert not is_local("https://127.0.0.1:3000") and not is_local(API)
    assert region_of(API) == "eu-west-1"
    assert region_of("https://api.example.com/prod") is None


# -------------------------------------------------------------------------- error mapping


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        (403, {"message": "User: arn:aws:iam::1:user/x is not authorized"}, ApiNotAllowedError,
         "not allowed: User: arn:aws:iam::1:user/x is not authorized (GET /runs/run-1)"),
        (403, {"error": {"message": "not an approver"}}, ApiNotAllowedError,
         "not allowed: not an approver"),
        (404, {"error": {"message": "run 'run-1' not found"}}, ApiNotFoundError,
         "no such run run-1 (run 'run-1' not found)"),
        (409, {"error": {"message": "run run-1 is SUCCEEDED"}}, ApiRefusedError,
         "GET /runs/run-1 answered 409: run run-1 is SUCCEEDED"),
        (502, b"<html>Bad\nGateway</html>", ApiRefusedError,
         "GET /runs/run-1 answered 502: <html>Bad Gateway</html>"),
    ],
)  # fmt: skip
def test_error_statuses_become_one_line_errors(
    api: StandIn, status: int, body: object, error: type[Exception], message: str
) -> None:
    api.answers[("GET", "/runs/run-1")] = (status, body)
    with pytest.raises(error) as raised:
        ApiClient(api.url).call("GET", "/runs/run-1", missing="run run-1")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert raised.value.status == status  # type: ignore[attr-defined]


def test_nothing_answering_is_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ApiUnreachableError, match=f"cannot reach {url}"):
        ApiClient(url, timeout=2).call("GET", "/runs")


# --------------------------------------------------------------- connect() and --stack

TEMPLATE = {
    "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
    "Outputs": {"ApiUrl": {"Value": f"{API}/"}, "Other": {"Value": "x"}},
}


@pytest.fixture
def cloudformation() -> Iterator[object]:
    with mock_aws():
        client = boto3.client("cloudformation", region_name="eu-west-1")
        client.create_stack(StackName="agents-prod", TemplateBody=json.dumps(TEMPLATE))
        bare = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
        client.create_stack(StackName="bare", TemplateBody=json.dumps(bare))
        yield client


def test_a_stack_names_its_api_url(cloudformation: object) -> None:
    assert stack_api_url(cloudformation, "agents-prod") == API
    with pytest.raises(ApiConfigError, match="stack 'bare' has no output 'ApiUrl'"):
        stack_api_url(cloudformation, "bare")
    with pytest.raises(ApiConfigError, match="cannot read stack 'gone'"):
        stack_api_url(cloudformation, "gone")


def test_connect_to_a_stack_signs_for_its_region(cloudformation: object) -> None:
    client = connect(stack="agents-prod", region="eu-west-1")
    assert client.base_url == API
    assert client.region == "eu-west-1"
    assert client.credentials is not None  # the test environment's (conftest)


def test_connect_defaults_to_local_mode_unsigned() -> None:
    client = connect()
    assert (client.base_url, client.credentials) == ("http://127.0.0.1:3000", None)
    local = connect(api_url="http://127.0.0.1:4000/", caller_arn="arn:aws:iam::1:user/a")
    assert (local.base_url, local.credentials, local.caller_arn) == (
        "http://127.0.0.1:4000",
        None,
        "arn:aws:iam::1:user/a",
    )
    with pytest.raises(ApiConfigError, match="not both"):
        connect(api_url=API, stack="agents-prod")


def test_connect_without_credentials_or_region_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ApiConfigError, match="no AWS credentials found"):
        connect(api_url=API)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert connect(api_url=API).region == "eu-west-1"  # from the host name
    with pytest.raises(ApiConfigError, match="pass --region"):
        connect(api_url="https://api.example.com/prod")
    assert connect(api_url="https://api.example.com/prod", region="ap-south-1").region == (
        "ap-south-1"
    )
    with pytest.raises(ApiConfigError, match="AWS configuration"):
        connect(api_url=API, profile="no-such-profile")
