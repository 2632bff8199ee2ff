"""The AWS credential sources on moto: STS AssumeRole sessions and Secrets Manager values.

moto's STS backend records the session name, duration and ExternalId of every AssumeRole but
not its session tags: those are asserted on the request itself (botocore's Stubber).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto.backends import get_backend

from durable_agents.aws.credentials import (
    SESSION_SECONDS,
    AssumeRoleCredentials,
    SecretsManagerCredentials,
    assume_role,
    boto3_session,
    secret,
    session_name,
)
from durable_agents.core.credentials import CallScope
from durable_agents.errors import ConfigurationError

ROLE = "arn:aws:iam::123456789012:role/payments-tool"
SCOPE = CallScope("pay", "run-7", "run-7:pay:3", 1)


def sts_client() -> Any:
    return boto3.client("sts", region_name="us-east-1")


def assumed_roles() -> list[Any]:
    return list(get_backend("sts")["123456789012"]["aws"].assumed_roles)


def test_assume_role_mints_a_15_minute_session_named_after_the_operation(aws: None) -> None:
    source = AssumeRoleCredentials(ROLE, external_id="ext-1", client=sts_client)
    before = time.time()  # noqa: TID251 - moto stamps the session with the wall clock
    minted = source.mint(SCOPE)
    (role,) = assumed_roles()
    assert role.role_arn == ROLE
    assert role.session_name == "da-run-7.pay.3"
    assert role.external_id == "ext-1"
    lifetime = role.expiration.replace(tzinfo=UTC).timestamp() - before
    assert SESSION_SECONDS - 5 <= lifetime <= SESSION_SECONDS + 5
    assert sorted(minted) == ["aws.access_key_id", "aws.secret_access_key", "aws.session_token"]
    assert minted["aws.secret_access_key"].reveal() == role.secret_access_key
    assert minted["aws.session_token"].reveal() == role.session_token
    expires = minted["aws.session_token"].expires_at_ms
    assert expires == int(role.expiration.replace(tzinfo=UTC).timestamp() * 1000)
    assert repr(minted["aws.secret_access_key"]) == "Secret('***')"  # expiry shown, value not
    session = boto3_session(minted)
    assert session.get_credentials().token == role.session_token


def test_assume_role_tags_the_session_with_the_run_and_operation_ids() -> None:
    client = boto3.client("sts", region_name="us-east-1")
    stub = Stubber(client)
    expiration = datetime(2030, 1, 1, tzinfo=UTC)
    stub.add_response(
        "assume_role",
        {
            "Credentials": {
                "AccessKeyId": "ASIAEXAMPLEEXAMPLE",
                "SecretAccessKey": "s" * 40,
                "SessionToken": "t" * 64,
                "Expiration": expiration,
            }
        },
        {
            "RoleArn": ROLE,
            "RoleSessionName": "da-run-7.pay.3",
            "DurationSeconds": 900,
            "Tags": [
                {"Key": "run_id", "Value": "run-7"},
                {"Key": "operation_id", "Value": "run-7:pay:3"},
            ],
        },
    )
    with stub:
        minted = AssumeRoleCredentials(ROLE, client=lambda: client).mint(SCOPE)
    stub.assert_no_pending_responses()
    assert minted["aws.session_token"].reveal() == "t" * 64


def test_every_call_gets_its_own_session(aws: None) -> None:
    """Never cached: each call's session carries that call's tags and name."""
    source = AssumeRoleCredentials(ROLE, client=sts_client)
    first = source.mint(SCOPE)
    second = source.mint(CallScope("pay", "run-7", "run-7:pay:4", 1))
    assert [r.session_name for r in assumed_roles()] == ["da-run-7.pay.3", "da-run-7.pay.4"]
    assert first["aws.session_token"] != second["aws.session_token"]


def test_a_long_operation_id_gives_a_valid_distinct_session_name() -> None:
    run = "run-" + "x" * 100
    names = {session_name(CallScope("t", run, f"{run}/branch#1:pay:{n}", 1)) for n in range(1, 4)}
    assert len(names) == 3
    for name in names:
        assert 2 <= len(name) <= 64
        assert all(c.isalnum() or c in "_+=,.@-" for c in name), name


def test_the_role_arn_can_come_from_the_environment(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = assume_role(env="PAYMENTS_ROLE_ARN")
    with pytest.raises(ConfigurationError, match="PAYMENTS_ROLE_ARN"):
        source.mint(SCOPE)
    monkeypatch.setenv("PAYMENTS_ROLE_ARN", ROLE)
    source.mint(SCOPE)
    assert [r.role_arn for r in assumed_roles()] == [ROLE]
    with pytest.raises(ValueError):
        AssumeRoleCredentials()


def test_secrets_manager_value_is_a_secret_cached_for_max_age(aws: None) -> None:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

    sm = boto3.client("secretsmanager", region_name="us-east-1")
    sm.create_secret(Name="payments/api-key", SecretString="sk-old-value-1234")
    cached = SecretsManagerCredentials(
        "payments/api-key", name="api_key", provider=SecretsProvider(boto3_client=sm)
    )
    fresh = SecretsManagerCredentials(
        "payments/api-key", max_age_seconds=0, provider=SecretsProvider(boto3_client=sm)
    )
    assert cached.mint(SCOPE)["api_key"].reveal() == "sk-old-value-1234"
    assert fresh.mint(SCOPE)["payments/api-key"].reveal() == "sk-old-value-1234"
    sm.put_secret_value(SecretId="payments/api-key", SecretString="sk-rotated-5678")
    time.sleep(0.01)
    assert cached.mint(SCOPE)["api_key"].reveal() == "sk-old-value-1234"  # within 60 s
    assert fresh.mint(SCOPE)["payments/api-key"].reveal() == "sk-rotated-5678"


def test_secret_declaration_reads_through_powertools_default_client(aws: None) -> None:
    sm = boto3.client("secretsmanager", region_name="us-east-1")
    sm.create_secret(Name="vault/token", SecretString="vault-token-0042")
    source = secret("vault/token", name="token", max_age_seconds=5)
    assert source.max_age_seconds == 5
    minted = source.mint(SCOPE)
    assert repr(minted) == "{'token': Secret('***')}"
    assert minted["token"].reveal() == "vault-token-0042"


def test_the_module_examples_run() -> None:
    import doctest

    from durable_agents.aws import credentials as aws_credentials

    results = doctest.testmod(aws_credentials)
    assert results.failed == 0 and results.attempted >= 3


def test_the_docs_example_runs_and_mints_per_call(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/credentials.md's example, executed: the tool gets a session and the key."""
    import re
    from pathlib import Path

    from durable_agents.tools import ToolCall

    doc = Path(__file__).resolve().parents[2] / "docs" / "credentials.md"
    (block,) = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "docs_credentials"}
    exec(compile(block, str(doc), "exec"), namespace)
    monkeypatch.setenv("PAYMENTS_ROLE_ARN", ROLE)
    boto3.client("secretsmanager").create_secret(
        Name="payments/api-key", SecretString="sk-docs-example-0001"
    )
    refund = namespace["issue_refund"]
    scope = CallScope("issue-refund", "run-9", "run-9:issue-refund:1", 1)
    credentials: dict[str, Any] = {}
    for source in refund.credentials:
        credentials.update(source.mint(scope))
    call = ToolCall(scope.operation_id, scope.operation_id, 1, credentials)
    request = refund.request_model(order="o-1", cents=250)
    assert refund.fn(request, call) == "refunded 250 on o-1"
    assert credentials["api_key"].reveal() == "sk-docs-example-0001"
    assert [r.session_name for r in assumed_roles()] == ["da-run-9.issue-refund.1"]
