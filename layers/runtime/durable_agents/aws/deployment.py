"""Wiring for the Lambda handlers: settings read once from the environment, clients made once."""

from __future__ import annotations

import importlib.resources
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from durable_agents.agent import (
    AgentDefinition,
    AgentModuleError,
    AgentRegistry,
    default_registry,
)
from durable_agents.aws.bedrock import BedrockProvider
from durable_agents.aws.deferred import DeferredClient
from durable_agents.aws.eventbridge import EventBridgePublisher
from durable_agents.aws.memory_table import DynamoDBMemoryStore
from durable_agents.aws.scheduler import EventBridgeWaitScheduler
from durable_agents.core.clock import Clock
from durable_agents.core.log_context import install_log_context
from durable_agents.core.scrub import install_log_scrubbing
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.carriers import (
    CARRIERS,
    CarrierKind,
    check_carrier,
    default_carrier,
)
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.errors import ConfigurationError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.llm.streams import DynamoDBStreamCache
from durable_agents.llm.types import LlmProvider
from durable_agents.plugins import Plugin


@dataclass(frozen=True, slots=True)
class Settings:
    """What a function needs to know about its deployment.

    Attributes:
        journal_table: ``JOURNAL_TABLE``: the journal table name.
        event_bus_name: ``EVENT_BUS_NAME``: the bus for ``Step Ready`` and friends.
        payload_bucket: ``PAYLOAD_BUCKET``: where oversized values spill (optional).
        agent_modules: ``AGENT_MODULES``: comma-separated modules whose agents to register.
        stall_after_seconds: ``STALL_AFTER_SECONDS``: when the reconciler re-drives a quiet
            RUNNING run.
        stream_table: ``STREAM_TABLE``: the stream cache table (streamed model text).
        memory_table: ``MEMORY_TABLE``: the long-term memory table behind ``ctx.memory``.
        sticky_runs: ``STICKY_RUNS``: how many runs' agents one container keeps parked at
            their frontier between invocations (sticky continuation, ADR 0017). 0, the
            default, is off: with Lambda's routing it pays only on a StepRunner of a few warm
            containers (ADR 0021); 16 opts in.
        sticky_carrier: ``STICKY_CARRIER``: what they park on, ``greenlet`` (the default:
            Lambda runs every invocation of a container on one thread) or ``thread`` (for a
            process whose invocations run on several threads, as local mode's consumers).
        header_echo_reads: ``HEADER_ECHO_READS``: ``on`` (the default) or ``off``: whether a
            warm load trusts the header echo and reads the journal's tail alone (ADR 0019).
            ``off`` while functions from before header echoes may still change runs (an
            upgrade: docs/operations.md).
        schedule_group: ``SCHEDULE_GROUP``: EventBridge Scheduler group for wait deadlines.
        scheduler_role_arn: ``SCHEDULER_ROLE_ARN``: the role Scheduler assumes.
        scheduler_target_arn: ``SCHEDULER_TARGET_ARN``: the Reconciler it invokes. The three
            together enable precise deadlines; without them the minute sweep expires waits.
        scripted_model_file: ``SCRIPTED_MODEL_FILE``: model scripts, comma-separated, each
            ``[CONFIG=]file`` (``load_model_scripts``); when set, the ``scripted`` provider
            answers ``ModelConfig(provider="scripted")`` calls.
        bedrock_region: ``BEDROCK_REGION``: the region of the ``bedrock-runtime`` client (the
            function's own region if unset).
        bedrock_read_timeout_seconds: ``BEDROCK_READ_TIMEOUT``: how long one model call may
            take to answer (botocore's default of 60 s cuts off long generations).
    """

    journal_table: str
    event_bus_name: str
    payload_bucket: str | None
    agent_modules: tuple[str, ...]
    stall_after_seconds: int = 300
    scripted_model_file: str | None = None
    stream_table: str | None = None
    schedule_group: str | None = None
    scheduler_role_arn: str | None = None
    scheduler_target_arn: str | None = None
    bedrock_region: str | None = None
    bedrock_read_timeout_seconds: int = 120
    memory_table: str | None = None
    sticky_runs: int = 0
    sticky_carrier: CarrierKind = field(default_factory=default_carrier)
    header_echo_reads: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Reads the settings (call it at the handler edge, not at import time).

        Raises:
            ConfigurationError: If a required variable is missing or malformed.
        """
        env = os.environ if env is None else env
        missing = [name for name in ("JOURNAL_TABLE", "EVENT_BUS_NAME") if not env.get(name)]
        if missing:
            raise ConfigurationError(f"missing environment variables: {', '.join(missing)}")
        try:
            stall = int(env.get("STALL_AFTER_SECONDS", "300"))
        except ValueError as exc:
            raise ConfigurationError("STALL_AFTER_SECONDS must be an integer") from exc
        try:
            read_timeout = int(env.get("BEDROCK_READ_TIMEOUT", "120"))
        except ValueError as exc:
            raise ConfigurationError("BEDROCK_READ_TIMEOUT must be an integer") from exc
        try:
            sticky_runs = int(env.get("STICKY_RUNS", "0"))
        except ValueError as exc:
            raise ConfigurationError("STICKY_RUNS must be an integer") from exc
        if sticky_runs < 0:
            raise ConfigurationError("STICKY_RUNS must be 0 (off) or more")
        try:
            sticky_carrier = check_carrier(env.get("STICKY_CARRIER") or default_carrier())
        except ValueError as exc:
            raise ConfigurationError(
                f"STICKY_CARRIER must be one of {', '.join(CARRIERS)}"
            ) from exc
        echo_reads = (env.get("HEADER_ECHO_READS") or "on").strip().lower()
        if echo_reads not in ("on", "off"):
            raise ConfigurationError("HEADER_ECHO_READS must be on or off")
        return cls(
            journal_table=env["JOURNAL_TABLE"],
            event_bus_name=env["EVENT_BUS_NAME"],
            payload_bucket=env.get("PAYLOAD_BUCKET") or None,
            stream_table=env.get("STREAM_TABLE") or None,
            schedule_group=env.get("SCHEDULE_GROUP") or None,
            scheduler_role_arn=env.get("SCHEDULER_ROLE_ARN") or None,
            scheduler_target_arn=env.get("SCHEDULER_TARGET_ARN") or None,
            agent_modules=agent_modules_from_env(env),
            stall_after_seconds=stall,
            scripted_model_file=env.get("SCRIPTED_MODEL_FILE") or None,
            bedrock_region=env.get("BEDROCK_REGION") or None,
            bedrock_read_timeout_seconds=read_timeout,
            memory_table=env.get("MEMORY_TABLE") or None,
            sticky_runs=sticky_runs,
            sticky_carrier=sticky_carrier,
            header_echo_reads=echo_reads == "on",
        )


def agent_modules_from_env(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The modules ``AGENT_MODULES`` lists (comma-separated; blanks ignored)."""
    env = os.environ if env is None else env
    return tuple(m.strip() for m in env.get("AGENT_MODULES", "").split(",") if m.strip())


def import_agent_modules(
    env: Mapping[str, str] | None = None, registry: AgentRegistry | None = None
) -> list[AgentDefinition[Any, Any]]:
    """Imports the agent modules of ``AGENT_MODULES`` now: call it when a handler module loads.

    On Lambda that is the execution environment's init, so a deployment whose agent module
    does not import fails its init with this message (in the function's log, and as the
    invocation's error) instead of answering every request with an error later.

    Args:
        env: The environment (``os.environ`` by default).
        registry: Where the agents register (the default registry by default).

    Returns:
        The agents those modules registered.

    Raises:
        AgentModuleError: If a module cannot be imported (it names the module and the error).
    """
    registry = registry or default_registry
    try:
        return registry.import_modules(agent_modules_from_env(env))
    except AgentModuleError as exc:
        raise AgentModuleError(exc.module, exc.cause, source="AGENT_MODULES") from exc.cause


def build_providers(settings: Settings, session: Any) -> dict[str, LlmProvider]:
    """The model providers: ``bedrock`` always, ``scripted`` when a script file is configured.

    The ``bedrock-runtime`` client is made once per process, by the first model call that
    Bedrock answers (``DeferredClient``): a process whose agents call no Bedrock model never
    loads its service model. A real boto3 session gets the region and read timeout from the
    settings (the region is checked here); other sessions (the local one) are asked for a
    plain client.

    Args:
        settings: The deployment settings.
        session: A boto3 session, or anything with ``client(service_name)``.

    Raises:
        ConfigurationError: If the model script cannot be read or is invalid.
    """
    import boto3  # noqa: PLC0415 - keep boto3 out of the import path of pure library use
    from botocore.config import Config  # noqa: PLC0415
    from botocore.utils import validate_region_name  # noqa: PLC0415

    if isinstance(session, boto3.session.Session):
        # What making the client would refuse, refused now (InvalidRegionError), not by a
        # model call.
        if settings.bedrock_region:
            validate_region_name(settings.bedrock_region)
        config = Config(
            read_timeout=settings.bedrock_read_timeout_seconds,
            connect_timeout=5,
            retries={"mode": "standard", "max_attempts": 3},
        )
        client = DeferredClient(
            lambda: session.client(
                "bedrock-runtime", region_name=settings.bedrock_region, config=config
            )
        )
    else:
        client = DeferredClient(lambda: session.client("bedrock-runtime"))
    providers: dict[str, LlmProvider] = {"bedrock": BedrockProvider(client)}
    if settings.scripted_model_file:
        providers["scripted"] = load_model_scripts(settings.scripted_model_file)
    return providers


_SCOPED_SCRIPT = re.compile(r"([A-Za-z0-9_.@-]+)=(.+)")


def load_model_scripts(specs: str) -> ScriptedProvider:
    """The scripted provider of ``SCRIPTED_MODEL_FILE``: one or more script files.

    ``specs`` is comma-separated; each entry is a file (a path or ``package:relative/path``),
    optionally ``CONFIG=file`` to make every script of that file answer only
    ``ModelConfig(name=CONFIG)`` requests. So each agent (or model config) keeps its own
    script beside the example's: ``agents:scripts/support.json,greeter=mymod:greeter.json``.
    Scripts scoped to a config answer it before unscoped ones.

    Raises:
        ConfigurationError: If a file cannot be read or is invalid, or two files conflict
            (a script name twice, two fallbacks for the same config).
    """
    sources = []
    for raw in specs.split(","):
        spec = raw.strip()
        if not spec:
            continue
        scoped = _SCOPED_SCRIPT.fullmatch(spec)
        config, target = (scoped.group(1), scoped.group(2)) if scoped else (None, spec)
        provider = ScriptedProvider.from_file(resolve_resource(target.strip()))
        sources.append((target.strip(), provider.scoped(config) if config else provider))
    return ScriptedProvider.merge(sources)


def build_runtime(
    settings: Settings,
    *,
    session: Any = None,
    registry: AgentRegistry | None = None,
    clock: Clock | None = None,
    logger: Any = None,
    plugins: Sequence[Plugin] = (),
) -> Runtime:
    """Builds a Runtime on DynamoDB, S3 and EventBridge, with the model providers.

    Args:
        settings: The deployment settings.
        session: A boto3 session (a default one if omitted); its clients are made here once.
        registry: The agent registry (the default one if omitted).
        clock: The time source.
        logger: The base logger for agents.
        plugins: Instrumentation hooks (``durable_agents.plugins``).

    Raises:
        ConfigurationError: If an agent module cannot be imported (``AgentModuleError``) or
            the model script is invalid.
    """
    import boto3  # noqa: PLC0415 - keep boto3 out of the import path of pure library use

    # The library's own loggers (durable_agents.admin.reconciler, .llm, .streams, ...) propagate to
    # the root logger, whose handler is Lambda's, not the Powertools handler the functions
    # filter: mask revealed secrets there too (a failed reconciler unit logs its traceback).
    install_log_scrubbing()
    # And name the run, agent and operation on their lines (durable_agents.core.log_context).
    install_log_context()
    session = session or boto3.session.Session()
    # Made by the first value that spills or is read back (DeferredClient): most never do.
    payloads = (
        S3PayloadStore(DeferredClient(lambda: session.client("s3")), settings.payload_bucket)
        if settings.payload_bucket
        else None
    )
    dynamodb = session.client("dynamodb")
    store = DynamoDBJournal(
        dynamodb,
        settings.journal_table,
        payloads=payloads,
        header_echo_reads=settings.header_echo_reads,
    )
    streams = (
        DynamoDBStreamCache(dynamodb, settings.stream_table, clock=clock)
        if (settings.stream_table)
        else None
    )
    publisher = EventBridgePublisher(session.client("events"), settings.event_bus_name)
    registry = registry or default_registry
    registry.import_modules(settings.agent_modules)
    return Runtime(
        store,
        registry=registry,
        publisher=publisher,
        clock=clock,
        logger=logger,
        providers=build_providers(settings, session),
        stream_sink=streams,
        wait_scheduler=build_wait_scheduler(settings, session),
        memory=DynamoDBMemoryStore(dynamodb, settings.memory_table)
        if settings.memory_table
        else None,
        plugins=plugins,
        # Agents parked between invocations of this container (ADR 0017); 0 turns it off.
        sticky=StickyRuns(settings.sticky_runs, settings.sticky_carrier)
        if settings.sticky_runs
        else None,
    )


def build_wait_scheduler(settings: Settings, session: Any) -> EventBridgeWaitScheduler | None:
    """The Scheduler-backed wait scheduler, when the deployment configures one."""
    if not (
        settings.schedule_group and settings.scheduler_role_arn and settings.scheduler_target_arn
    ):
        return None
    return EventBridgeWaitScheduler(
        session.client("scheduler"),
        group=settings.schedule_group,
        target_arn=settings.scheduler_target_arn,
        role_arn=settings.scheduler_role_arn,
    )


def resolve_resource(spec: str) -> str:
    """Resolves a file path, or ``package:relative/path`` inside an importable package.

    The package form works the same in Lambda (``/var/task``) and in local mode (the repo),
    whatever the working directory.

    Raises:
        ConfigurationError: If neither form names an existing file.
    """
    if os.path.exists(spec):
        return spec
    package, sep, relative = spec.partition(":")
    if sep and package and relative:
        try:
            candidate = importlib.resources.files(package).joinpath(relative)
        except ModuleNotFoundError as exc:
            raise ConfigurationError(f"no package {package!r} for {spec!r}") from exc
        if candidate.is_file():
            return str(candidate)
    raise ConfigurationError(f"file {spec!r} not found (use a path or package:relative/path)")
