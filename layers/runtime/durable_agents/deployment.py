"""Wiring for the Lambda handlers: settings read once from the environment, clients made once."""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from durable_agents.agent import AgentRegistry, default_registry
from durable_agents.clock import Clock
from durable_agents.errors import ConfigurationError
from durable_agents.events import EventBridgePublisher
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents.llm.bedrock import BedrockProvider
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.llm.types import LlmProvider
from durable_agents.runtime import Runtime
from durable_agents.scrub import install_log_scrubbing
from durable_agents.streams import DynamoDBStreamCache
from durable_agents.waits.schedules import EventBridgeWaitScheduler


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
        schedule_group: ``SCHEDULE_GROUP``: EventBridge Scheduler group for wait deadlines.
        scheduler_role_arn: ``SCHEDULER_ROLE_ARN``: the role Scheduler assumes.
        scheduler_target_arn: ``SCHEDULER_TARGET_ARN``: the Reconciler it invokes. The three
            together enable precise deadlines; without them the minute sweep expires waits.
        scripted_model_file: ``SCRIPTED_MODEL_FILE``: a model script; when set, the
            ``scripted`` provider answers ``ModelConfig(provider="scripted")`` calls.
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
        return cls(
            journal_table=env["JOURNAL_TABLE"],
            event_bus_name=env["EVENT_BUS_NAME"],
            payload_bucket=env.get("PAYLOAD_BUCKET") or None,
            stream_table=env.get("STREAM_TABLE") or None,
            schedule_group=env.get("SCHEDULE_GROUP") or None,
            scheduler_role_arn=env.get("SCHEDULER_ROLE_ARN") or None,
            scheduler_target_arn=env.get("SCHEDULER_TARGET_ARN") or None,
            agent_modules=tuple(
                m.strip() for m in env.get("AGENT_MODULES", "").split(",") if m.strip()
            ),
            stall_after_seconds=stall,
            scripted_model_file=env.get("SCRIPTED_MODEL_FILE") or None,
            bedrock_region=env.get("BEDROCK_REGION") or None,
            bedrock_read_timeout_seconds=read_timeout,
        )


def build_providers(settings: Settings, session: Any) -> dict[str, LlmProvider]:
    """The model providers: ``bedrock`` always, ``scripted`` when a script file is configured.

    The ``bedrock-runtime`` client is made here, once per process; making it sends no request.
    A real boto3 session gets the region and read timeout from the settings; other sessions
    (the local one) are asked for a plain client.

    Args:
        settings: The deployment settings.
        session: A boto3 session, or anything with ``client(service_name)``.

    Raises:
        ConfigurationError: If the model script cannot be read or is invalid.
    """
    import boto3  # noqa: PLC0415 - keep boto3 out of the import path of pure library use
    from botocore.config import Config  # noqa: PLC0415

    if isinstance(session, boto3.session.Session):
        client = session.client(
            "bedrock-runtime",
            region_name=settings.bedrock_region,
            config=Config(
                read_timeout=settings.bedrock_read_timeout_seconds,
                connect_timeout=5,
                retries={"mode": "standard", "max_attempts": 3},
            ),
        )
    else:
        client = session.client("bedrock-runtime")
    providers: dict[str, LlmProvider] = {"bedrock": BedrockProvider(client)}
    if settings.scripted_model_file:
        path = resolve_resource(settings.scripted_model_file)
        providers["scripted"] = ScriptedProvider.from_file(path)
    return providers


def build_runtime(
    settings: Settings,
    *,
    session: Any = None,
    registry: AgentRegistry | None = None,
    clock: Clock | None = None,
    logger: Any = None,
) -> Runtime:
    """Builds a Runtime on DynamoDB, S3 and EventBridge, with the model providers.

    Args:
        settings: The deployment settings.
        session: A boto3 session (a default one if omitted); its clients are made here once.
        registry: The agent registry (the default one if omitted).
        clock: The time source.
        logger: The base logger for agents.

    Raises:
        ConfigurationError: If an agent module cannot be imported or the model script is
            invalid.
    """
    import boto3  # noqa: PLC0415 - keep boto3 out of the import path of pure library use

    # The library's own loggers (durable_agents.reconciler, .llm, .streams, ...) propagate to
    # the root logger, whose handler is Lambda's, not the Powertools handler the functions
    # filter: mask revealed secrets there too (a failed reconciler unit logs its traceback).
    install_log_scrubbing()
    session = session or boto3.session.Session()
    payloads = (
        S3PayloadStore(session.client("s3"), settings.payload_bucket)
        if settings.payload_bucket
        else None
    )
    dynamodb = session.client("dynamodb")
    store = DynamoDBJournal(dynamodb, settings.journal_table, payloads=payloads)
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
