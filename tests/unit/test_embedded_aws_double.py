"""The embedded store's AWS double: moto in process, the template's secrets kept in the file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
import pytest

from durable_agents_local.embedded.aws_double import InProcessAws
from durable_agents_local.functions import local_name

TEMPLATE: dict[str, Any] = {
    "Resources": {
        "ApprovalLinkSecret": {
            "Type": "AWS::SecretsManager::Secret",
            "Properties": {"GenerateSecretString": {"PasswordLength": 40}},
        },
        "Fixed": {
            "Type": "AWS::SecretsManager::Secret",
            "Properties": {"SecretString": "declared-in-the-template"},
        },
    }
}


def read(logical_id: str) -> str:
    client = boto3.session.Session(region_name="us-east-1").client("secretsmanager")
    value = client.get_secret_value(SecretId=local_name(logical_id))["SecretString"]
    return str(value)


def test_a_secrets_value_is_the_same_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "local.sqlite3"
    first = InProcessAws(path, "us-east-1")
    try:
        arns = first.create_secrets(TEMPLATE)
        assert set(arns) == {"ApprovalLinkSecret", "Fixed"}
        assert all(arn.startswith("arn:aws:secretsmanager:us-east-1:") for arn in arns.values())
        generated = read("ApprovalLinkSecret")
        assert len(generated) == 40
        assert read("Fixed") == "declared-in-the-template"
    finally:
        first.stop()

    again = InProcessAws(path, "us-east-1")  # a new mock: it holds nothing until given them
    try:
        again.create_secrets(TEMPLATE)
        assert read("ApprovalLinkSecret") == generated
    finally:
        again.stop()


def test_a_fresh_store_gets_a_new_value(tmp_path: Path) -> None:
    values = []
    for name in ("a.sqlite3", "b.sqlite3"):
        aws = InProcessAws(tmp_path / name, "us-east-1")
        try:
            aws.create_secrets(TEMPLATE)
            values.append(read("ApprovalLinkSecret"))
        finally:
            aws.stop()
    assert values[0] != values[1]


def test_an_endpoint_in_the_shell_cannot_send_the_handlers_calls_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", "http://127.0.0.1:9")
    aws = InProcessAws(tmp_path / "local.sqlite3", "us-east-1")
    try:
        assert not [k for k in os.environ if k.startswith("AWS_ENDPOINT_URL")]
        aws.create_secrets(TEMPLATE)  # would fail to connect to port 9
        assert read("Fixed") == "declared-in-the-template"
    finally:
        aws.stop()
