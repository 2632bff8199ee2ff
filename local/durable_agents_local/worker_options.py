"""``WorkerOptions``: how to run local mode (the ``durable-agents local`` flags)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from durable_agents_local import moto_server
from durable_agents_local.aws import DEFAULT_REGION
from durable_agents_local.crash import CrashSpec
from durable_agents_local.http_api import DEFAULT_PORT
from durable_agents_local.identity import LOCAL_CALLER_ARN
from durable_agents_local.provision import DEFAULT_VISIBILITY_TIMEOUT


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How to run local mode (the ``durable-agents local`` flags).

    Attributes:
        template: The SAM template.
        moto_endpoint: Attach to this moto server instead of starting one.
        moto_port: Port of the moto server to start.
        state_dir: Where the started moto server keeps its state (it survives a SIGKILL of
            every local process); None: in memory only (``--ephemeral``).
        api_port: Port of the Api server (loopback only).
        schedule_interval: Seconds between Schedule invocations.
        function_timeouts: Timeout overrides by function logical id; the key ``"*"`` applies
            to every other function. The StepRunner derives its claim lease from its timeout.
        stall_after: ``STALL_AFTER_SECONDS`` for the reconciler.
        visibility_timeout: Seconds before an event taken by a dead worker is redelivered.
        concurrency: Consumer threads per rule queue (>= 2 lets duplicates race).
        region: The local region.
        log_level: ``LOG_LEVEL`` of the handlers' Powertools loggers (they print JSON).
        quiet: Only warnings and errors on stderr.
        keep_moto: Leave the moto process this worker started running on exit.
        crash_at: SIGKILL this process once, at this point of this operation.
        services_url: Base URL of the fake services (``python -m
            durable_agents_local.services``): sets ``PAYMENTS_URL``, ``EMAIL_URL`` and
            ``TICKETS_URL`` for the handlers.
        agents: ``--agents``: the agent modules, over ``AGENT_MODULES`` (``local.agents_loading``).
        caller_arn: ``--caller-arn``: the IAM caller of Api requests without an
            ``X-Local-Caller-Arn`` header; it also mints links and decides reviews.
        act_as: ``--act-as``: approver and reviewer patterns (``group:finance``, ``*``) the
            IAM caller decides as (dev only: a deployed Api never honours it).
        model_scripts: ``--model-script``: ``[CONFIG=]file`` model scripts added to the
            template's ``SCRIPTED_MODEL_FILE``.
        oidc_port: ``--local-oidc [--oidc-port]``: run a local OIDC issuer on this port and
            point ``JWT_*`` at it (``local.oidc``); None: none.
        store: ``embedded`` (the journal in SQLite in ``state_dir``, events delivered in this
            process: ADR 0026) or ``moto`` (the journal in the moto store, events through SQS).
    """

    template: Path = Path("template.yaml")
    moto_endpoint: str | None = None
    moto_port: int = moto_server.DEFAULT_PORT
    state_dir: Path | None = moto_server.DEFAULT_STATE_DIR
    api_port: int = DEFAULT_PORT
    schedule_interval: float = 1.0
    function_timeouts: dict[str, float] = field(default_factory=dict)
    stall_after: int = 5
    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT
    concurrency: int = 4
    region: str = DEFAULT_REGION
    log_level: str = "WARNING"
    quiet: bool = False
    keep_moto: bool = False
    crash_at: CrashSpec | None = None
    services_url: str | None = None
    agents: tuple[str, ...] = ()
    caller_arn: str = LOCAL_CALLER_ARN
    act_as: tuple[str, ...] = ()
    model_scripts: tuple[str, ...] = ()
    oidc_port: int | None = None
    store: str = "embedded"
