"""The process environment local mode gives the template's functions (``local.worker``).

All functions share the worker's process, so their variables are merged; local settings (the
moto endpoint, the store's session key as the access key id, the Api's base URL, the fake
services' URLs) are added, and what could reach a real AWS account is dropped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

from durable_agents_local.aws import DUMMY_SECRET
from durable_agents_local.functions import FunctionSpec
from durable_agents_local.http_api import HOST
from durable_agents_local.services import SERVICE_NAMES
from durable_agents_local.store_key import KEY_VARIABLE
from durable_agents_local.worker_options import WorkerOptions

log = logging.getLogger("durable_agents_local")

# The example tools' base URLs (``functions/agents/tools.py``); see ``services_environment``.
SERVICE_URL_VARIABLES = {f"{name.upper()}_URL": name for name in SERVICE_NAMES}


def services_environment(
    services_url: str | None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``PAYMENTS_URL``, ``EMAIL_URL`` and ``TICKETS_URL`` for the handlers.

    Args:
        services_url: The fake services' base URL (``--services-url``): each variable
            becomes ``<url>/<service>``.
        environ: Without a URL, those of the three variables set here (the worker's own
            environment by default) are passed on, over any value the template declares.

    Returns:
        The variables to set (possibly none).
    """
    if services_url:
        base = services_url.rstrip("/")
        return {name: f"{base}/{service}" for name, service in SERVICE_URL_VARIABLES.items()}
    source = os.environ if environ is None else environ
    return {name: source[name] for name in SERVICE_URL_VARIABLES if source.get(name)}


def function_environment(
    specs: Sequence[FunctionSpec],
    options: WorkerOptions,
    endpoint: str | None,
    store_key: str | None,
) -> dict[str, str]:
    """The process environment for the functions: theirs, resolved, plus local settings.

    All functions share this process, so their variables are merged; a variable declared
    with different values by two functions is reported and the later one wins. The services'
    URLs (``services_environment``) come last.

    Args:
        specs: The template's functions.
        options: How local mode runs.
        endpoint: The moto store's URL (``AWS_ENDPOINT_URL``); None with the embedded store,
            whose in-process mock answers AWS's own endpoints.
        store_key: The moto store's session key: ``AWS_ACCESS_KEY_ID`` (so that the
            handlers' clients, with default credentials, reach the store) and
            ``DURABLE_AGENTS_STORE_KEY``; None with the embedded store (a dummy key).
    """
    env: dict[str, str] = {}
    for spec in specs:
        for key, value in spec.environment.items():
            if key in env and env[key] != value:
                log.warning(
                    "%s sets %s=%s, another function %s; using %s",
                    spec.logical_id,
                    key,
                    value,
                    env[key],
                    value,
                )
            env[key] = value
    if endpoint is not None:
        env["AWS_ENDPOINT_URL"] = endpoint
    env.update(
        AWS_ACCESS_KEY_ID=store_key or "local",
        AWS_SECRET_ACCESS_KEY=DUMMY_SECRET,
        AWS_DEFAULT_REGION=options.region,
        AWS_REGION=options.region,
        STALL_AFTER_SECONDS=str(options.stall_after),
        LOG_LEVEL=options.log_level,
        POWERTOOLS_TRACE_DISABLED="1",
        POWERTOOLS_METRICS_DISABLED="true",
        # Signed approval links must point at this local server (no https, no stage).
        PUBLIC_BASE_URL=f"http://{HOST}:{options.api_port}",
    )
    if store_key is not None:
        env[KEY_VARIABLE] = store_key
    env.setdefault("POWERTOOLS_METRICS_NAMESPACE", "DurableAgentsLocal")
    # Each rule's queue has several consumer threads here, and an agent parked on a greenlet
    # goes on only on the thread that parked it: park on threads, which any consumer resumes.
    if options.concurrency > 1:
        env.setdefault("STICKY_CARRIER", "thread")
    # Locally the IAM caller (--caller-arn) delivers links and reviews calls, unless the
    # template's parameters name someone else.
    for key in ("LINK_MINTERS", "REVIEW_OPERATORS"):
        env[key] = env.get(key) or f"iam:{options.caller_arn}"
    env.update(services_environment(options.services_url))
    return env


def apply_environment(env: dict[str, str]) -> None:
    """Sets ``env`` in this process and drops what could reach a real AWS account."""
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        os.environ.pop(key, None)
    os.environ.update(env)
