"""The prompt and model-configuration registry: versions side by side, content pinned."""

from __future__ import annotations

import doctest

import pytest

from durable_agents import prompts
from durable_agents.errors import ConfigurationError, VersionUnavailableError
from durable_agents.llm.types import ModelConfig
from durable_agents.prompts import Prompt, PromptRegistry


def config(temperature: float) -> ModelConfig:
    return ModelConfig(name="m", version="1", provider="p", model_id="x", temperature=temperature)


def test_the_module_examples_run() -> None:
    results = doctest.testmod(prompts)
    assert results.attempted > 0 and results.failed == 0


def test_one_version_cannot_be_registered_with_other_content() -> None:
    registry = PromptRegistry()
    registry.add_prompt(Prompt(name="s", version="1", text="a"))
    registry.add_prompt(Prompt(name="s", version="1", text="a"))  # the same again: harmless
    with pytest.raises(ConfigurationError, match="prompt 's' version '1' is registered twice"):
        registry.add_prompt(Prompt(name="s", version="1", text="b"))
    registry.add_model_config(config(0.0))
    with pytest.raises(ConfigurationError, match="model configuration 'm' version '1'"):
        registry.add_model_config(config(0.5))


def test_pins_name_what_is_missing_or_changed() -> None:
    registry = PromptRegistry()
    registry.add_prompt(Prompt(name="s", version="2", text="b"))
    with pytest.raises(ConfigurationError, match="no prompt 'x' is registered"):
        registry.pin(["x"], [])
    with pytest.raises(ConfigurationError, match=r"has no version '1'; registered: \['2'\]"):
        registry.pin(["s@1"], [])
    with pytest.raises(VersionUnavailableError, match="content changed under the same version"):
        registry.pinned_prompt("s", "2#" + "0" * 64, agent="a")
