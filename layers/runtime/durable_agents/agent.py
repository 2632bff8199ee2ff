"""Registering agents: plain Python functions ``(ctx, input) -> output``."""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from durable_agents.core.ids import check_name
from durable_agents.core.invocation_budget import ONE_OPERATION, InvocationBudget
from durable_agents.core.versions import VersionBundle
from durable_agents.errors import AgentNotFoundError, ConfigurationError, VersionNotDeployedError
from durable_agents.flow_control import Budget, Concurrency
from durable_agents.journal.retention import retention_seconds
from durable_agents.llm.types import ModelConfig
from durable_agents.prompts import Prompt, PromptRegistry

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass(frozen=True)
class AgentDefinition(Generic[In, Out]):
    """A registered agent.

    Attributes:
        name: The agent's name (used in ``POST /runs``).
        versions: The version bundle every run of this definition is pinned to.
        fn: The agent function ``fn(ctx, input)``.
        input_type: The input's type (from the annotation), or ``None`` for plain JSON.
        output_type: The output's type (from the annotation), or ``None`` for plain JSON.
        prompts: The prompts its runs pin at start (``name`` = the latest, ``name@version``).
        model_configs: The model configurations its runs pin at start (the same way).
        execution_timeout_ms: How long a run may take from its start (None: no limit); past
            it the run ends ``TIMED_OUT`` (``durable_agents.engine.cancellation``).
        retention_s: How long a finished run is kept (None: the deployment's default;
            ``durable_agents.journal.retention``).
        invocation_budget: How much of a run one StepRunner invocation advances
            (``durable_agents.core.invocation_budget``; one operation by default).
        concurrency: How many of its runs may execute at once (``durable_agents.flow_control``;
            None: no limit).
        budget: The budget of tokens and money each run it starts as a root gets, shared with
            the sub-agents it starts (None: no budget, unless ``POST /runs`` gives one).
    """

    name: str
    versions: VersionBundle
    fn: Callable[..., Out]
    input_type: Any = None
    output_type: Any = None
    prompts: tuple[str, ...] = ()
    model_configs: tuple[str, ...] = ()
    execution_timeout_ms: int | None = None
    retention_s: int | None = None
    invocation_budget: InvocationBudget = ONE_OPERATION
    concurrency: Concurrency | None = None
    budget: Budget | None = None

    @property
    def version(self) -> str:
        """The workflow version."""
        return self.versions.workflow_version

    def __call__(self, ctx: Any, value: In) -> Out:
        """Calls the agent function (what the runtime does on every invocation)."""
        return self.fn(ctx, value)


class RegisteredMigration(Protocol):
    """What the registry keeps of a migration (``durable_agents.migrations.Migration``)."""

    @property
    def agent(self) -> str:
        """The agent whose runs it moves."""
        ...

    @property
    def from_version(self) -> str:
        """The version runs are moved from."""
        ...

    @property
    def to_version(self) -> str:
        """The version runs are moved to."""
        ...

    @property
    def fn(self) -> Callable[[Any], Any]:
        """The plan: ``RecordedRun`` -> ``MigrationPlan``."""
        ...


class AgentRegistry:
    """Agents by name and version; several versions of one agent may be deployed together."""

    def __init__(self) -> None:
        self._agents: dict[str, dict[str, AgentDefinition[Any, Any]]] = {}
        self._latest: dict[str, str] = {}
        self.prompts = PromptRegistry()
        """The prompts and model configurations runs of these agents pin."""
        self._migrations: dict[tuple[str, str, str], RegisteredMigration] = {}

    def add_migration(self, migration: RegisteredMigration) -> None:
        """Registers an explicit migration of runs between two versions of an agent.

        Raises:
            ConfigurationError: If another migration is registered for the same versions.
        """
        key = (migration.agent, migration.from_version, migration.to_version)
        existing = self._migrations.get(key)
        if existing is not None and existing.fn is not migration.fn:
            raise ConfigurationError(
                f"two migrations of {migration.agent!r} from {migration.from_version!r} to "
                f"{migration.to_version!r} are registered"
            )
        self._migrations[key] = migration

    def migration(
        self, agent: str, from_version: str, to_version: str
    ) -> RegisteredMigration | None:
        """Returns the migration registered between two versions, if any."""
        return self._migrations.get((agent, from_version, to_version))

    def migrations_from(self, agent: str, from_version: str) -> list[RegisteredMigration]:
        """Every migration registered from ``from_version`` of ``agent``."""
        return [
            m
            for (a, f, _), m in sorted(self._migrations.items())
            if (a, f) == (agent, from_version)
        ]

    def deployed_versions(self, name: str) -> list[str]:
        """The versions of ``name`` this deployment carries (empty when none)."""
        return sorted(self._agents.get(name, {}))

    def add(self, definition: AgentDefinition[Any, Any]) -> None:
        """Registers ``definition``; the last version added is the one new runs use.

        Raises:
            ConfigurationError: If the same name and version are registered twice with
                different functions.
        """
        versions = self._agents.setdefault(definition.name, {})
        existing = versions.get(definition.version)
        if existing is not None and existing.fn is not definition.fn:
            same_code = getattr(existing.fn, "__qualname__", None) == getattr(
                definition.fn, "__qualname__", None
            ) and getattr(existing.fn, "__module__", None) == getattr(
                definition.fn, "__module__", None
            )
            if not same_code:  # a module re-import re-registers the same function: harmless
                raise ConfigurationError(
                    f"agent {definition.name!r} version {definition.version!r} is registered "
                    "twice with different functions; bump the version"
                )
        versions[definition.version] = definition
        self._latest[definition.name] = definition.version

    def latest(self, name: str) -> AgentDefinition[Any, Any]:
        """Returns the version new runs of ``name`` start with.

        Raises:
            AgentNotFoundError: If no agent has that name.
        """
        if name not in self._latest:
            raise AgentNotFoundError(name, known=self.names())
        return self._agents[name][self._latest[name]]

    def pinned(self, name: str, version: str) -> AgentDefinition[Any, Any]:
        """Returns the exact version a run is pinned to.

        Raises:
            AgentNotFoundError: If no agent has that name.
            VersionNotDeployedError: If that version is not deployed.
        """
        versions = self._agents.get(name)
        if not versions:
            raise AgentNotFoundError(name, version, known=self.names())
        if version not in versions:
            raise VersionNotDeployedError(name, version, sorted(versions))
        return versions[version]

    def names(self) -> list[str]:
        """Returns the registered agent names."""
        return sorted(self._agents)

    def definitions(self) -> list[AgentDefinition[Any, Any]]:
        """Every registered definition (each deployed version), by name then version."""
        return [
            self._agents[name][version]
            for name in sorted(self._agents)
            for version in sorted(self._agents[name])
        ]

    def import_modules(self, modules: Iterable[str]) -> list[AgentDefinition[Any, Any]]:
        """Imports agent modules so their ``@agent`` decorators register here.

        Returns:
            The definitions registered here whose function lives in one of the modules (or a
            module under it), whether this call or an earlier import registered them.

        Raises:
            AgentModuleError: If a module cannot be imported, or raises while it is imported.
        """
        names = [m.strip() for m in modules if m.strip()]
        for module in names:
            try:
                importlib.import_module(module)
            except Exception as exc:  # the module's own code may raise anything at import
                raise AgentModuleError(module, exc) from exc
        return [
            d
            for d in self.definitions()
            if any(_in_module(getattr(d.fn, "__module__", ""), m) for m in names)
        ]


def _in_module(name: str, module: str) -> bool:
    return name == module or name.startswith(f"{module}.")


class AgentModuleError(ConfigurationError):
    """An agent module could not be imported (a typo, a missing dependency, a bug at import).

    Attributes:
        module: The module as configured.
        cause: The exception its import raised.
    """

    def __init__(self, module: str, cause: BaseException, *, source: str | None = None):
        self.module = module
        self.cause = cause
        self.source = source
        origin = f" (from {source})" if source else ""
        super().__init__(
            f"cannot import agent module {module!r}{origin}: {type(cause).__name__}: {cause}"
        )


default_registry = AgentRegistry()


def register_prompt(
    name: str, version: str, text: str, *, registry: AgentRegistry | None = None
) -> Prompt:
    """Registers one version of a prompt for the agents of ``registry`` (the default one).

    Returns:
        The prompt.

    Raises:
        ConfigurationError: If that version is already registered with another text.

    Example:
        >>> reg = AgentRegistry()
        >>> register_prompt("support-system", "1", "You are a support agent.", registry=reg).version
        '1'
    """
    return (registry or default_registry).prompts.add_prompt(
        Prompt(name=name, version=version, text=text)
    )


def register_model_config(
    config: ModelConfig, *, registry: AgentRegistry | None = None
) -> ModelConfig:
    """Registers one version of a model configuration (see ``register_prompt``).

    Returns:
        The configuration.

    Raises:
        ConfigurationError: If that version is already registered with other settings.
    """
    return (registry or default_registry).prompts.add_model_config(config)


def timeout_to_ms(timeout: float | timedelta | None) -> int | None:
    """An execution timeout (seconds or a timedelta) in milliseconds.

    Raises:
        ValueError: If it is not positive.
    """
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if not seconds > 0:
        raise ValueError(f"an execution timeout must be positive, not {timeout!r}")
    return int(seconds * 1000)


def agent(
    *,
    name: str,
    version: str,
    prompt_version: str = "none",
    model_config_version: str = "none",
    tool_schema_version: str = "none",
    state_schema_version: str = "1",
    prompts: Iterable[str] = (),
    model_configs: Iterable[str] = (),
    registry: AgentRegistry | None = None,
    execution_timeout: float | timedelta | None = None,
    retention: float | timedelta | None = None,
    invocation_budget: InvocationBudget = ONE_OPERATION,
    concurrency: Concurrency | None = None,
    budget: Budget | None = None,
) -> Callable[[Callable[..., Out]], AgentDefinition[Any, Out]]:
    """Registers a function as a durable agent.

    The function takes ``(ctx, input)``. Input and output are pydantic models or JSON values;
    annotate them and the runtime validates the input and round-trips the output.

    Args:
        name: The agent name clients start runs with.
        version: The workflow version; runs are pinned to it.
        prompt_version: Version of the prompts the agent uses.
        model_config_version: Version of the model configuration.
        tool_schema_version: Version of the tool schemas.
        state_schema_version: Version of the state the agent records.
        prompts: Registered prompts its runs use (``ctx.prompt``): ``name`` pins the latest
            version when a run starts, ``name@version`` that version.
        model_configs: Registered model configurations (``ctx.model_config``), the same way.
        registry: Where to register (the process-wide default registry if omitted).
        execution_timeout: How long a run may take, from its start to its end, in seconds
            or a timedelta (None: no limit). A run still going then ends ``TIMED_OUT`` even
            while it waits (for a person, say); ``POST /runs`` may set a run's own.
        retention: How long a finished run and everything it wrote are kept, in seconds or
            a timedelta (None: the deployment's ``RETENTION_DAYS``, 30 days by default).
        invocation_budget: How much one StepRunner invocation may advance a run: up to
            ``operations`` operations, none started after ``seconds``
            (``InvocationBudget``; one operation per invocation by default).
        concurrency: How many of its runs may execute at once, overall and per key
            (``durable_agents.flow_control.Concurrency``; docs/flow-control.md).
        budget: The tokens and money a run may spend with its sub-agents
            (``durable_agents.flow_control.Budget``).

    Returns:
        A decorator producing an ``AgentDefinition``.

    Raises:
        InvalidNameError: If ``name`` is not a valid name.
        ValueError: If ``execution_timeout`` is not positive, or ``retention`` is under one
            day or over ten years.

    Example:
        >>> from durable_agents import agent
        >>> @agent(name="greeter", version="1", registry=AgentRegistry())
        ... def greeter(ctx, who: str) -> str:
        ...     return ctx.step(lambda: f"hello {who}", name="greet")
        >>> greeter.name, greeter.version
        ('greeter', '1')
    """
    check_name(name, "agent")
    check_name(version, "version")
    timeout_ms = timeout_to_ms(execution_timeout)
    retention_s = retention_seconds(retention)
    bundle = VersionBundle(
        workflow_version=version,
        state_schema_version=state_schema_version,
        prompt_version=prompt_version,
        model_config_version=model_config_version,
        tool_schema_version=tool_schema_version,
    )

    def decorate(fn: Callable[..., Out]) -> AgentDefinition[Any, Out]:
        hints = typing.get_type_hints(fn)
        params = [p for p in fn.__code__.co_varnames[: fn.__code__.co_argcount]]
        input_type = hints.get(params[1]) if len(params) >= 2 else None
        definition: AgentDefinition[Any, Out] = AgentDefinition(
            name=name,
            versions=bundle,
            fn=fn,
            input_type=input_type,
            output_type=hints.get("return"),
            prompts=tuple(prompts),
            model_configs=tuple(model_configs),
            execution_timeout_ms=timeout_ms,
            retention_s=retention_s,
            invocation_budget=invocation_budget,
            concurrency=concurrency,
            budget=budget,
        )
        (registry or default_registry).add(definition)
        return definition

    return decorate
