"""AgentTestRunner runs agents that pin prompts and model configs (``ctx.prompt``)."""

from __future__ import annotations

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.agent import register_model_config, register_prompt
from durable_agents.llm.types import ModelConfig
from durable_agents.prompts import Prompt, PromptRegistry
from durable_agents_local.testing import AgentTestRunner


def greeter(ctx: DurableContext, who: str) -> str:
    model = ctx.model_config("runner-test-model")
    return f"{ctx.prompt('runner-test-greeting').format(who=who)} ({model.model_id})"


def declare(registry: AgentRegistry) -> object:
    return agent(
        name="runner-test-greeter",
        version="1",
        prompts=["runner-test-greeting"],
        model_configs=["runner-test-model"],
        registry=registry,
    )(greeter)


MODEL = ModelConfig(name="runner-test-model", version="1", provider="scripted", model_id="m-1")


def test_the_runner_uses_the_prompts_registered_in_the_default_registry() -> None:
    """The pattern of the example agents: ``register_prompt`` at import, then the runner."""
    register_prompt("runner-test-greeting", "1", "Hello {who}.")
    register_model_config(MODEL)
    definition = declare(AgentRegistry())  # its own registry: the default's agents stay as is
    result = AgentTestRunner(definition).run("Ada")  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED", result.error
    assert result.output == "Hello Ada. (m-1)"


def test_the_runner_takes_another_prompt_registry() -> None:
    prompts = PromptRegistry()
    prompts.add_model_config(MODEL)
    prompts.add_prompt(Prompt(name="runner-test-greeting", version="1", text="Hi {who}!"))
    runner = AgentTestRunner(declare(AgentRegistry()), prompts=prompts)  # type: ignore[arg-type]
    assert runner.run("Bob").output == "Hi Bob! (m-1)"
