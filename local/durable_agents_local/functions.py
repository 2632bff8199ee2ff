"""What local mode needs from ``template.yaml``: functions, their events and environment.

The worker runs exactly what the template declares: the same handlers, the same EventBridge
patterns, the same Api paths, the same environment (with ``!Ref`` resolved to local names).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_agents.errors import ConfigurationError
from durable_agents_local.lambda_context import LOCAL_ACCOUNT_ID

STACK_NAME = "durable-agents-local"
DEFAULT_REGION = "us-east-1"
LAMBDA_DEFAULT_TIMEOUT = 3
LAMBDA_DEFAULT_MEMORY = 128
LAMBDA_DEFAULT_RETRIES = 2

# Resource types local mode creates in moto, and the fixed local names of the usual ones.
# A secret's ``!Ref`` (its ARN on AWS) resolves to its local name until the worker has created
# it in moto and knows its ARN (``local.secrets``); Secrets Manager accepts either.
log = logging.getLogger("durable_agents_local")

PROVISIONED_TYPES = (
    "AWS::DynamoDB::Table",
    "AWS::S3::Bucket",
    "AWS::Events::EventBus",
    "AWS::SecretsManager::Secret",
)
KNOWN_NAMES = {
    "JournalTable": f"{STACK_NAME}-journal",
    "PayloadBucket": f"{STACK_NAME}-payloads",
    "EventBus": f"{STACK_NAME}-bus",
}


def kebab(name: str) -> str:
    """``StepRunnerFunction`` -> ``step-runner-function``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower()


def local_name(logical_id: str) -> str:
    """The fixed local physical name of a provisioned resource."""
    return KNOWN_NAMES.get(logical_id, f"{STACK_NAME}-{kebab(logical_id)}")


@dataclass(frozen=True, slots=True)
class RuleEvent:
    """An ``EventBridgeRule`` event of a function.

    Attributes:
        event_id: The event's key under ``Events``.
        bus_name: The resolved bus name (``default`` when the template names none).
        pattern: The event pattern, as declared.
    """

    event_id: str
    bus_name: str
    pattern: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ScheduleEvent:
    """A ``Schedule`` event (locally it fires every ``--schedule-interval`` seconds).

    Attributes:
        event_id: The event's key under ``Events``.
        expression: The declared ``rate(...)``/``cron(...)`` (shown, not interpreted).
    """

    event_id: str
    expression: str


@dataclass(frozen=True, slots=True)
class ApiEvent:
    """An ``Api`` event: one method on one path (``{param}`` templates allowed).

    Attributes:
        event_id: The event's key under ``Events``.
        method: The HTTP method, upper case (``ANY`` matches every method).
        path: The resource path, e.g. ``/runs/{run_id}``.
        iam: Whether API Gateway authenticates the caller (False for ``Authorizer: NONE``).
    """

    event_id: str
    method: str
    path: str
    iam: bool = True


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """A ``DynamoDB`` event: the function reads a table's stream in batches.

    Attributes:
        event_id: The event's key under ``Events``.
        table_id: Logical id of the table whose stream is read (``!GetAtt T.StreamArn``).
        starting_position: ``TRIM_HORIZON`` or ``LATEST`` (where a fresh reader starts).
        batch_size: Records per invocation at most.
        max_retries: Retries of a failed batch before it is given up on (-1: until it works).
        filters: Filter patterns (a record is delivered if any matches; none: all records).
        report_failures: Whether the handler returns ``batchItemFailures``.
    """

    event_id: str
    table_id: str
    starting_position: str = "TRIM_HORIZON"
    batch_size: int = 100
    max_retries: int = -1
    filters: tuple[dict[str, Any], ...] = ()
    report_failures: bool = False


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """One ``AWS::Serverless::Function`` as local mode runs it.

    Attributes:
        logical_id: The resource's logical id.
        handler: The ``module.function`` handler string.
        code_dir: The absolute CodeUri directory (added to ``sys.path``).
        timeout_seconds: Timeout (function, else Globals, else Lambda's 3 s).
        memory_mb: MemorySize (function, else Globals, else 128).
        max_retries: Lambda's async retries (EventInvokeConfig, else 2).
        environment: Globals and function variables, resolved to local values.
        rules: EventBridgeRule events.
        schedules: Schedule events.
        apis: Api events.
        streams: DynamoDB stream events.
        unsupported: ``EventId (Type)`` of events local mode does not run (logged at start).
    """

    logical_id: str
    handler: str
    code_dir: Path
    timeout_seconds: float
    memory_mb: int
    max_retries: int
    environment: dict[str, str]
    rules: tuple[RuleEvent, ...] = ()
    schedules: tuple[ScheduleEvent, ...] = ()
    apis: tuple[ApiEvent, ...] = ()
    streams: tuple[StreamEvent, ...] = ()
    unsupported: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Resolver:
    """Resolves intrinsic functions to local values.

    Attributes:
        refs: Logical id (resource or parameter) -> local value.
        region: The local region (``AWS::Region``).
    """

    refs: dict[str, str] = field(default_factory=dict)
    region: str = DEFAULT_REGION

    def pseudo(self) -> dict[str, str]:
        """The pseudo parameters' local values."""
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": LOCAL_ACCOUNT_ID,
            "AWS::StackName": STACK_NAME,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
        }

    def ref(self, name: str) -> str:
        """Resolves ``!Ref name``.

        Raises:
            ConfigurationError: If local mode has no value for it.
        """
        value = self.refs.get(name, self.pseudo().get(name))
        if value is None:
            raise ConfigurationError(
                f"local mode cannot resolve !Ref {name}: only tables, buckets, event buses, "
                "secrets and parameters with a Default are available locally"
            )
        return value

    def resolve(self, value: Any) -> str:
        """Resolves a plain value, ``!Ref`` or a simple ``!Sub`` to a string.

        Raises:
            ConfigurationError: For other intrinsic functions.
        """
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str | int | float):
            return str(value)
        if isinstance(value, dict) and set(value) == {"Ref"}:
            return self.ref(str(value["Ref"]))
        if (
            isinstance(value, dict)
            and set(value) == {"Fn::Sub"}
            and isinstance(value["Fn::Sub"], str)
        ):
            return re.sub(r"\$\{([^}!.]+)\}", lambda m: self.ref(m.group(1)), value["Fn::Sub"])
        raise ConfigurationError(f"local mode cannot resolve {value!r}")


def _local_environment(variables: Mapping[str, Any], resolver: Resolver) -> dict[str, str]:
    """Resolves a function's variables; ``!GetAtt`` of AWS-only resources is left out.

    Those (the Scheduler role and target, for example) configure AWS features that local mode
    replaces itself; every other variable must resolve, so a typo still fails loudly.
    """
    env: dict[str, str] = {}
    for key, value in variables.items():
        if isinstance(value, Mapping) and set(value) == {"Fn::GetAtt"}:
            log.debug("%s=%r is AWS-only: not set in local mode", key, value)
            continue
        env[key] = resolver.resolve(value)
    return env


def make_resolver(template: Mapping[str, Any], region: str = DEFAULT_REGION) -> Resolver:
    """Builds the resolver: provisioned resources get local names, parameters their Default.

    Raises:
        ConfigurationError: If a parameter has no Default.
    """
    refs: dict[str, str] = {}
    for name, param in (template.get("Parameters") or {}).items():
        if "Default" not in param:
            raise ConfigurationError(f"parameter {name} needs a Default for local mode")
        refs[name] = str(param["Default"])
    for logical_id, res in (template.get("Resources") or {}).items():
        if res.get("Type") in PROVISIONED_TYPES:
            refs[logical_id] = local_name(logical_id)
    return Resolver(refs, region)


def provisioned(template: Mapping[str, Any], resource_type: str) -> list[str]:
    """Logical ids of the template's resources of ``resource_type``."""
    return [
        lid
        for lid, res in (template.get("Resources") or {}).items()
        if res.get("Type") == resource_type
    ]


def read_functions(
    template: Mapping[str, Any], template_dir: Path, resolver: Resolver
) -> list[FunctionSpec]:
    """Reads every ``AWS::Serverless::Function`` of the template.

    Args:
        template: The parsed template.
        template_dir: Where the template lives (CodeUri is relative to it).
        resolver: Resolves ``!Ref`` and friends.

    Returns:
        The functions, in template order.

    Raises:
        ConfigurationError: If a function has no Handler/CodeUri or an unresolvable value.
    """
    globals_fn = (template.get("Globals") or {}).get("Function") or {}
    specs = []
    for logical_id, res in (template.get("Resources") or {}).items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        props = res.get("Properties") or {}
        merged = {**globals_fn, **props}
        if "Handler" not in merged or "CodeUri" not in merged:
            raise ConfigurationError(f"{logical_id} needs a Handler and a CodeUri locally")
        variables = {
            **((globals_fn.get("Environment") or {}).get("Variables") or {}),
            **((props.get("Environment") or {}).get("Variables") or {}),
        }
        events = _Events()
        for event_id, event in (props.get("Events") or {}).items():
            events.add(event_id, event, resolver)
        invoke_config = merged.get("EventInvokeConfig") or {}
        specs.append(
            FunctionSpec(
                logical_id=logical_id,
                handler=str(merged["Handler"]),
                code_dir=(template_dir / str(merged["CodeUri"])).resolve(),
                timeout_seconds=float(merged.get("Timeout", LAMBDA_DEFAULT_TIMEOUT)),
                memory_mb=int(merged.get("MemorySize", LAMBDA_DEFAULT_MEMORY)),
                max_retries=int(invoke_config.get("MaximumRetryAttempts", LAMBDA_DEFAULT_RETRIES)),
                environment=_local_environment(variables, resolver),
                rules=tuple(events.rules),
                schedules=tuple(events.schedules),
                apis=tuple(events.apis),
                streams=tuple(events.streams),
                unsupported=tuple(events.unsupported),
            )
        )
    return specs


@dataclass
class _Events:
    rules: list[RuleEvent] = field(default_factory=list)
    schedules: list[ScheduleEvent] = field(default_factory=list)
    apis: list[ApiEvent] = field(default_factory=list)
    streams: list[StreamEvent] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)

    def add(self, event_id: str, event: Mapping[str, Any], resolver: Resolver) -> None:
        kind = event.get("Type")
        props = event.get("Properties") or {}
        if kind == "EventBridgeRule":
            bus = props.get("EventBusName")
            self.rules.append(
                RuleEvent(
                    event_id, resolver.resolve(bus) if bus else "default", dict(props["Pattern"])
                )
            )
        elif kind == "Schedule":
            self.schedules.append(ScheduleEvent(event_id, str(props.get("Schedule", ""))))
        elif kind == "Api":
            public = (props.get("Auth") or {}).get("Authorizer") == "NONE"
            method, path = str(props["Method"]).upper(), str(props["Path"])
            self.apis.append(ApiEvent(event_id, method, path, iam=not public))
        elif kind == "DynamoDB" and _stream_table(props.get("Stream")):
            self.streams.append(_stream_event(event_id, props))
        else:
            self.unsupported.append(f"{event_id} ({kind})")


def _stream_table(stream: Any) -> str | None:
    """The table of ``!GetAtt Table.StreamArn`` (None for any other stream reference)."""
    if isinstance(stream, Mapping) and set(stream) == {"Fn::GetAtt"}:
        target = stream["Fn::GetAtt"]
        if isinstance(target, list) and len(target) == 2 and target[1] == "StreamArn":
            return str(target[0])
    return None


def _stream_event(event_id: str, props: Mapping[str, Any]) -> StreamEvent:
    filters = ((props.get("FilterCriteria") or {}).get("Filters")) or []
    return StreamEvent(
        event_id=event_id,
        table_id=str(_stream_table(props["Stream"])),
        starting_position=str(props.get("StartingPosition", "TRIM_HORIZON")),
        batch_size=int(props.get("BatchSize", 100)),
        max_retries=int(props.get("MaximumRetryAttempts", -1)),
        filters=tuple(
            json.loads(f["Pattern"]) if isinstance(f["Pattern"], str) else dict(f["Pattern"])
            for f in filters
        ),
        report_failures="ReportBatchItemFailures" in (props.get("FunctionResponseTypes") or []),
    )
