"""A function's deployment settings, read once from its environment, and its agent modules.

What a handler reads at its init: ``Settings.from_env`` (call it at the handler's edge) and
``import_agent_modules`` (at init, so that a module that does not import fails the
deployment at once). Building the runtime from them is ``durable_agents.aws.deployment``'s:
it loads the DynamoDB journal and the AWS adapters, which a handler needs only by its first
invocation (docs/benchmarks.md, "Cold start").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from durable_agents.agent import (
    AgentDefinition,
    AgentModuleError,
    AgentRegistry,
    default_registry,
)
from durable_agents.engine.sticky.carriers import (
    CARRIERS,
    CarrierKind,
    check_carrier,
    default_carrier,
)
from durable_agents.errors import ConfigurationError
from durable_agents.journal.index_shards import DEFAULT_INDEX_SHARDS, MAX_INDEX_SHARDS, IndexShards


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
        index_shards: ``INDEX_SHARDS``: the partitions each deployment-wide index listing is
            spread over (ADR 0029; 1 to 256, default 8). It may grow while the stack serves;
            lowering it needs ``scripts/backfill_index_layout.py`` first.
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
    index_shards: int = DEFAULT_INDEX_SHARDS

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
        try:
            index_shards = IndexShards(int(env.get("INDEX_SHARDS") or DEFAULT_INDEX_SHARDS)).count
        except ValueError as exc:
            raise ConfigurationError(
                f"INDEX_SHARDS must be an integer from 1 to {MAX_INDEX_SHARDS}"
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
            index_shards=index_shards,
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
