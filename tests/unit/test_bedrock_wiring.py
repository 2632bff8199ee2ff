"""How the deployment wires the Bedrock provider (and the scripted one) from its settings."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from durable_agents import AgentRegistry, ConfigurationError
from durable_agents.aws.bedrock import BedrockProvider
from durable_agents.aws.deployment import Settings, build_providers, build_runtime
from durable_agents.llm import ScriptedProvider

# -- wiring -------------------------------------------------------------------------------------

BASE_ENV = {"JOURNAL_TABLE": "journal", "EVENT_BUS_NAME": "bus"}
SCRIPT = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "weather.json"


def test_settings_read_model_variables() -> None:
    settings = Settings.from_env(
        {
            **BASE_ENV,
            "SCRIPTED_MODEL_FILE": str(SCRIPT),
            "BEDROCK_REGION": "eu-west-1",
            "BEDROCK_READ_TIMEOUT": "300",
        }
    )
    assert settings.scripted_model_file == str(SCRIPT)
    assert settings.bedrock_region == "eu-west-1"
    assert settings.bedrock_read_timeout_seconds == 300
    plain = Settings.from_env(BASE_ENV)
    assert (plain.scripted_model_file, plain.bedrock_region) == (None, None)
    with pytest.raises(ConfigurationError):
        Settings.from_env({**BASE_ENV, "BEDROCK_READ_TIMEOUT": "soon"})


def test_providers_bedrock_always_scripted_when_configured() -> None:
    session = boto3.session.Session(region_name="us-east-1")
    providers = build_providers(Settings.from_env(BASE_ENV), session)
    assert set(providers) == {"bedrock"}
    bedrock = providers["bedrock"]
    assert isinstance(bedrock, BedrockProvider)
    client = bedrock._client
    assert client.meta.region_name == "us-east-1"
    assert client.meta.config.read_timeout == 120

    settings = Settings.from_env(
        {**BASE_ENV, "SCRIPTED_MODEL_FILE": str(SCRIPT), "BEDROCK_REGION": "eu-west-1"}
    )
    providers = build_providers(settings, session)
    assert set(providers) == {"bedrock", "scripted"}
    assert isinstance(providers["scripted"], ScriptedProvider)
    assert providers["bedrock"]._client.meta.region_name == "eu-west-1"


def test_a_bad_script_file_fails_at_wiring() -> None:
    settings = Settings.from_env({**BASE_ENV, "SCRIPTED_MODEL_FILE": "/nonexistent/script.json"})
    with pytest.raises(ConfigurationError, match="not found"):
        build_providers(settings, boto3.session.Session(region_name="us-east-1"))


def test_build_runtime_wires_the_providers(aws: None) -> None:
    settings = Settings.from_env({**BASE_ENV, "SCRIPTED_MODEL_FILE": str(SCRIPT)})
    runtime = build_runtime(settings, registry=AgentRegistry())
    assert set(runtime.providers) == {"bedrock", "scripted"}
