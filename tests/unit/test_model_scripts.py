"""Model scripts per model config, beside the example's, and the test runner's constructor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.aws.deployment import Settings, build_providers
from durable_agents.errors import ConfigurationError
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.llm.types import LlmRequest, Message, ModelConfig
from durable_agents_local.testing import AgentTestRunner

GREETER = ModelConfig(name="greeter", version="1", provider="scripted", model_id="script")
SUPPORT = ModelConfig(name="support-model", version="1", provider="scripted", model_id="m")
registry = AgentRegistry()


@agent(name="greeter", version="1", model_config_version="greeter@1", registry=registry)
def greeter(ctx: DurableContext, name: str) -> str:
    answer = ctx.llm("greet", LlmRequest(messages=[Message.user(f"greet {name}")]), config=GREETER)
    return answer.text


def _ask(provider: ScriptedProvider, config: ModelConfig, text: str) -> str:
    return provider.converse(config, LlmRequest(messages=[Message.user(text)])).text


def _settings(scripts: str) -> Settings:
    return Settings.from_env(
        {"JOURNAL_TABLE": "t", "EVENT_BUS_NAME": "b", "SCRIPTED_MODEL_FILE": scripts}
    )


class _Session:
    def client(self, name: str) -> object:
        return object()


def test_a_deployment_adds_its_script_beside_the_examples(tmp_path: Path) -> None:
    mine = tmp_path / "greeter.json"
    mine.write_text(json.dumps([{"text": "Hello from my script"}]))
    settings = _settings(f"agents:scripts/support.json, greeter={mine}")
    provider = build_providers(settings, _Session())["scripted"]
    assert isinstance(provider, ScriptedProvider)
    # The example's unscoped fallback does not answer for the config a file is scoped to ...
    assert _ask(provider, GREETER, "greet Ada") == "Hello from my script"
    # ... and the example's scripts still answer the example's model configs.
    assert _ask(provider, SUPPORT, "hi") == "I can help with refunds and order questions."


def test_scoped_scripts_win_whatever_the_order(tmp_path: Path) -> None:
    mine = tmp_path / "greeter.json"
    mine.write_text(json.dumps([{"text": "mine"}]))
    provider = build_providers(_settings(f"greeter={mine},agents:scripts/support.json"), _Session())
    assert _ask(provider["scripted"], GREETER, "greet Ada") == "mine"  # type: ignore[arg-type]


def test_two_unscoped_fallbacks_are_refused(tmp_path: Path) -> None:
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    for path in (one, two):
        path.write_text(json.dumps([{"text": path.stem}]))
    with pytest.raises(ConfigurationError, match=r"two\.json.*one\.json"):
        build_providers(_settings(f"{one},{two}"), _Session())


def test_the_test_runner_takes_a_script() -> None:
    runner = AgentTestRunner(greeter, model_script=[{"text": "Hello, Ada!"}])
    assert runner.run("Ada").output == "Hello, Ada!"
    assert runner.scripted.calls_by_turn() == {0: 1}


def test_the_test_runner_takes_a_script_file(tmp_path: Path) -> None:
    path = tmp_path / "greeter.json"
    path.write_text(json.dumps({"scripts": [{"name": "g", "turns": [{"text": "from a file"}]}]}))
    assert AgentTestRunner(greeter, model_script=path).run("Ada").output == "from a file"


def test_local_mode_adds_model_scripts_to_the_templates(tmp_path: Path) -> None:
    from durable_agents_local.agents_loading import model_scripts_setting
    from durable_agents_local.cli.main import build_parser

    mine = tmp_path / "greeter.json"
    mine.write_text(json.dumps([{"text": "mine"}]))
    args = build_parser().parse_args(["local", "--model-script", f"greeter={mine}"])
    assert args.model_script == [f"greeter={mine}"]
    setting = model_scripts_setting("agents:scripts/support.json", args.model_script)
    assert setting == f"agents:scripts/support.json,greeter={mine}"
    with pytest.raises(ConfigurationError, match="nowhere"):
        model_scripts_setting("", [str(tmp_path / "nowhere.json")])
