"""Prompts and model configurations by name, version and content hash.

A run pins, when it starts, the version of every prompt and model configuration its agent
declares (``@agent(prompts=..., model_configs=...)``), with the content's SHA-256, in its
version bundle (``prompt/<name>`` and ``model_config/<name>`` entries of the run header's
``versions``). Every later invocation — after a three-day approval, a redeploy, a replay —
gets exactly that text and that configuration from ``ctx.prompt(name)`` and
``ctx.model_config(name)``, however many newer versions were registered since. A pinned
version that is no longer deployed, or whose content changed under the same version number,
puts the run in ``VERSION_UNAVAILABLE`` (naming it) until it is deployed again.

Example:
    >>> from durable_agents.prompts import Prompt, PromptRegistry
    >>> registry = PromptRegistry()
    >>> v1 = registry.add_prompt(Prompt(name="greet", version="1", text="Hello {who}."))
    >>> registry.add_prompt(Prompt(name="greet", version="2", text="Hi {who}!")).version
    '2'
    >>> pins = registry.pin(["greet"], [])  # what a new run records: the latest version
    >>> pins["prompt/greet"].split("#")[0]
    '2'
    >>> registry.pin(["greet@1"], [])["prompt/greet"] == f"1#{v1.sha256}"
    True
    >>> registry.pinned_prompt("greet", pins["prompt/greet"], agent="demo").format(who="Ada")
    'Hi Ada!'
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from durable_agents.core.ids import check_name
from durable_agents.errors import ConfigurationError, VersionUnavailableError
from durable_agents.llm.types import FLOW_FIELDS, ModelConfig

PROMPT_KEY = "prompt/"
MODEL_CONFIG_KEY = "model_config/"


class Prompt(BaseModel):
    """One version of a prompt.

    Attributes:
        name: The prompt's name (``support-system``).
        version: Its version; register a changed text as a new version.
        text: The prompt text; ``format`` fills ``{placeholders}``.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    text: str

    @functools.cached_property
    def sha256(self) -> str:
        """The SHA-256 of the text (hex): what a run pins next to the version.

        Computed once per prompt: every invocation checks its run's pins.
        """
        return hashlib.sha256(self.text.encode()).hexdigest()

    def format(self, **values: Any) -> str:
        """Returns the text with ``{name}`` placeholders filled in.

        Raises:
            KeyError: If a placeholder has no value.
        """
        return self.text.format_map(values)


@functools.lru_cache(maxsize=256)  # a frozen model: hashable; checked on every invocation
def config_sha256(config: ModelConfig) -> str:
    """The SHA-256 of a model configuration's canonical JSON."""
    # Without its limits and prices (FLOW_FIELDS): the hash a run pinned before they existed,
    # or before they changed, still matches.
    content = config.model_dump(mode="json", exclude=set(FLOW_FIELDS))
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def content_sha256(item: Prompt | ModelConfig) -> str:
    """The SHA-256 a run pins next to a prompt's or a model configuration's version."""
    return item.sha256 if isinstance(item, Prompt) else config_sha256(item)


def _split_pin(pin: str) -> tuple[str, str]:
    version, _, digest = pin.partition("#")
    return version, digest


def _split_ref(ref: str) -> tuple[str, str | None]:
    name, _, version = ref.partition("@")
    return check_name(name, "prompt"), (version or None)


class PromptRegistry:
    """The prompts and model configurations a deployment carries, every version side by side."""

    def __init__(self) -> None:
        self._prompts: dict[str, dict[str, Prompt]] = {}
        self._configs: dict[str, dict[str, ModelConfig]] = {}
        self._latest_prompt: dict[str, str] = {}
        self._latest_config: dict[str, str] = {}

    def add_prompt(self, prompt: Prompt) -> Prompt:
        """Registers one version of a prompt; the last version added is what new runs pin.

        Returns:
            The prompt.

        Raises:
            ConfigurationError: If that name and version is registered with another text.
            InvalidNameError: If the name or version is not a valid name.
        """
        self._add(self._prompts, self._latest_prompt, "prompt", prompt)
        return prompt

    def add_model_config(self, config: ModelConfig) -> ModelConfig:
        """Registers one version of a model configuration (same rules as ``add_prompt``).

        Returns:
            The configuration.

        Raises:
            ConfigurationError: If that name and version is registered with other settings.
            InvalidNameError: If the name or version is not a valid name.
        """
        self._add(self._configs, self._latest_config, "model configuration", config)
        return config

    def model_configs(self) -> list[ModelConfig]:
        """The latest version of every registered model configuration, by name."""
        return [self._configs[name][self._latest_config[name]] for name in sorted(self._configs)]

    @staticmethod
    def _add(
        table: dict[str, dict[str, Any]],
        latest: dict[str, str],
        what: str,
        item: Prompt | ModelConfig,
    ) -> None:
        check_name(item.name, what)
        check_name(item.version, f"{what} version")
        versions = table.setdefault(item.name, {})
        existing = versions.get(item.version)
        if existing is not None and content_sha256(existing) != content_sha256(item):
            raise ConfigurationError(
                f"{what} {item.name!r} version {item.version!r} is registered twice with "
                "different content; runs pinned to it would change: register a new version"
            )
        versions[item.version] = item
        latest[item.name] = item.version

    def pin(self, prompts: Iterable[str], model_configs: Iterable[str]) -> dict[str, str]:
        """Returns the bundle entries a new run records for the declared names.

        Args:
            prompts: Prompt names (the latest version) or ``name@version`` (that version).
            model_configs: Model configuration names, the same way.

        Raises:
            ConfigurationError: If a declared name or version is not registered.
        """
        pins: dict[str, str] = {}
        for ref in prompts:
            name, version = _split_ref(ref)
            prompt = self._lookup(self._prompts, self._latest_prompt, "prompt", name, version)
            pins[PROMPT_KEY + name] = f"{prompt.version}#{prompt.sha256}"
        for ref in model_configs:
            name, version = _split_ref(ref)
            config = self._lookup(
                self._configs, self._latest_config, "model configuration", name, version
            )
            pins[MODEL_CONFIG_KEY + name] = f"{config.version}#{config_sha256(config)}"
        return pins

    @staticmethod
    def _lookup(
        table: Mapping[str, Mapping[str, Any]],
        latest: Mapping[str, str],
        what: str,
        name: str,
        version: str | None,
    ) -> Any:
        versions = table.get(name)
        if not versions:
            raise ConfigurationError(f"no {what} {name!r} is registered; add it to the registry")
        chosen = version or latest[name]
        if chosen not in versions:
            raise ConfigurationError(
                f"{what} {name!r} has no version {chosen!r}; registered: {sorted(versions)}"
            )
        return versions[chosen]

    def pinned_prompt(self, name: str, pin: str, *, agent: str) -> Prompt:
        """Returns exactly the prompt a run pinned (``pin`` is ``<version>#<sha256>``).

        Raises:
            VersionUnavailableError: If that version is not deployed or its text changed.
        """
        found = self._pinned(self._prompts, f"prompt {name}", name, pin, agent)
        assert isinstance(found, Prompt)
        return found

    def pinned_model_config(self, name: str, pin: str, *, agent: str) -> ModelConfig:
        """Returns exactly the model configuration a run pinned.

        Raises:
            VersionUnavailableError: If that version is not deployed or its settings changed.
        """
        found = self._pinned(self._configs, f"model_config {name}", name, pin, agent)
        assert isinstance(found, ModelConfig)
        return found

    @staticmethod
    def _pinned(
        table: Mapping[str, Mapping[str, Prompt | ModelConfig]],
        component: str,
        name: str,
        pin: str,
        agent: str,
    ) -> Prompt | ModelConfig:
        version, digest = _split_pin(pin)
        versions = table.get(name, {})
        found = versions.get(version)
        PromptRegistry._check(agent, component, version, digest, found, sorted(versions))
        assert found is not None
        return found

    @staticmethod
    def _check(
        agent: str,
        component: str,
        version: str,
        digest: str,
        found: Prompt | ModelConfig | None,
        deployed: list[str],
    ) -> None:
        if found is None:
            raise VersionUnavailableError(agent, component, version, deployed)
        actual = content_sha256(found)
        if digest and actual != digest:
            raise VersionUnavailableError(
                agent,
                component,
                version,
                deployed,
                f"run of {agent!r} is pinned to {component} {version!r} with sha256 "
                f"{digest[:12]}…, but the deployed {version!r} has sha256 {actual[:12]}…: "
                "its content changed under the same version (deploy the original again, "
                "and register the change as a new version)",
            )

    def check_pins(self, agent: str, versions: Mapping[str, str]) -> None:
        """Verifies every prompt and model configuration a run pinned is deployed unchanged.

        Raises:
            VersionUnavailableError: For the first pin that is not.
        """
        for key, pin in sorted(versions.items()):
            if key.startswith(PROMPT_KEY):
                self.pinned_prompt(key[len(PROMPT_KEY) :], pin, agent=agent)
            elif key.startswith(MODEL_CONFIG_KEY):
                self.pinned_model_config(key[len(MODEL_CONFIG_KEY) :], pin, agent=agent)


class NotPinnedError(ConfigurationError):
    """Agent code asked for a prompt or model configuration its run did not pin at start.

    The agent does not declare it (``@agent(prompts=..., model_configs=...)``), or the run
    started on code that did not: the run pauses for a person rather than guess a version.
    """

    def __init__(self, agent: str, what: str, name: str, pinned: list[str]):
        self.agent = agent
        self.what = what
        self.name = name
        self.pinned = pinned
        super().__init__(
            f"agent {agent!r} asked for {what} {name!r}, which its run did not pin when it "
            f"started (pinned: {pinned or 'none'}); declare it in @agent({what}s=[...]) and "
            "bump the agent's version"
        )


def pinned_for_run(
    registry: PromptRegistry, agent: str, versions: Mapping[str, str], what: str, name: str
) -> Prompt | ModelConfig:
    """Returns the prompt (``what="prompt"``) or model configuration a run pinned.

    Raises:
        NotPinnedError: If the run did not pin ``name``.
        VersionUnavailableError: If the pinned version is not deployed unchanged.
    """
    prefix = PROMPT_KEY if what == "prompt" else MODEL_CONFIG_KEY
    pin = versions.get(prefix + name)
    if pin is None:
        pinned = sorted(k[len(prefix) :] for k in versions if k.startswith(prefix))
        raise NotPinnedError(agent, what, name, pinned)
    if what == "prompt":
        return registry.pinned_prompt(name, pin, agent=agent)
    return registry.pinned_model_config(name, pin, agent=agent)
