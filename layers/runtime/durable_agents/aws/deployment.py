"""Wiring for the Lambda handlers: the runtime on DynamoDB, S3 and EventBridge, clients made once.

``build_runtime(Settings.from_env())`` is what a handler's first invocation calls; the
settings and the agent modules are ``durable_agents.aws.settings``'s, which handlers import at
init without loading the journal and the adapters imported here.
"""

from __future__ import annotations

import importlib.resources
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from durable_agents._moved import moved_attribute
from durable_agents.agent import (
    AgentRegistry,
    default_registry,
)
from durable_agents.aws.bedrock import BedrockProvider
from durable_agents.aws.deferred import DeferredClient
from durable_agents.aws.eventbridge import EventBridgePublisher
from durable_agents.aws.memory_table import DynamoDBMemoryStore
from durable_agents.aws.scheduler import EventBridgeWaitScheduler
from durable_agents.aws.settings import Settings
from durable_agents.core.clock import Clock
from durable_agents.core.log_context import install_log_context
from durable_agents.core.scrub import install_log_scrubbing
from durable_agents.engine.events import EventPublisher
from durable_agents.engine.memory_store import MemoryStore
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.errors import ConfigurationError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents.journal.store import JournalStore
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.llm.streams import DynamoDBStreamCache, StreamCache
from durable_agents.llm.types import LlmProvider
from durable_agents.plugins import Plugin


def __getattr__(name: str) -> Any:
    """Names that moved to ``durable_agents.aws.settings`` resolve, with a warning, for a release.

    Raises:
        AttributeError: For any other unknown name.
    """
    return moved_attribute(__name__, name)


@dataclass(frozen=True, slots=True)
class Backend:
    """Where a runtime keeps its runs and sends its events, instead of DynamoDB and EventBridge.

    Local mode's embedded store installs one (``use_backend``) so that the same handlers run on
    a SQLite journal and an in-process bus (docs/adr/0026-embedded-local-store.md). A Lambda
    never installs one: ``build_runtime`` then wires the AWS services named by the settings.

    Attributes:
        journal: The journal (runs, entries, side effects, waits).
        publisher: Where ``Step Ready`` and the other runtime events go.
        memory: The long-term memory store (None: agents that use memory fail clearly).
        streams: The stream cache streamed model text goes to (None: not cached).
    """

    journal: JournalStore
    publisher: EventPublisher
    memory: MemoryStore | None = None
    streams: StreamCache | None = None


# Process-wide: the three handlers of one local-mode process share one journal and one bus.
_backend: Backend | None = None


def use_backend(backend: Backend | None) -> None:
    """Makes every later ``build_runtime`` of this process use ``backend`` (None: AWS again).

    Call it before the handlers build their runtime (their first invocation, or
    ``get_runtime()``); runtimes built earlier keep what they were built with.
    """
    global _backend  # noqa: PLW0603 - one backend per process, set once by local mode
    _backend = backend


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

    On the installed ``Backend`` instead, if there is one (``use_backend``): its journal,
    publisher, memory and stream cache; no wait scheduler (the reconciler's sweep wakes due
    timers).

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
    registry = registry or default_registry
    registry.import_modules(settings.agent_modules)
    # Agents parked between invocations of this container (ADR 0017); 0 turns it off.
    sticky = (
        StickyRuns(settings.sticky_runs, settings.sticky_carrier) if settings.sticky_runs else None
    )
    if _backend is not None:
        return Runtime(
            _backend.journal,
            registry=registry,
            publisher=_backend.publisher,
            clock=clock,
            logger=logger,
            providers=build_providers(settings, session),
            stream_sink=_backend.streams,
            memory=_backend.memory,
            plugins=plugins,
            sticky=sticky,
        )
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
        index_shards=settings.index_shards,
    )
    streams = (
        DynamoDBStreamCache(dynamodb, settings.stream_table, clock=clock)
        if (settings.stream_table)
        else None
    )
    publisher = EventBridgePublisher(session.client("events"), settings.event_bus_name)
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
        sticky=sticky,
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
