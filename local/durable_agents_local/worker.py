"""``durable-agents local``: the template's functions, run in one process on your machine.

Start-up, on the embedded store (the default, ADR 0026): take the state directory's lock and
open its SQLite file, start moto's in-process mock with the template's secrets, set the
functions' environment, import their handlers, install the embedded store as their runtime's
backend; then deliver events on the in-process bus, relay the outbox, fire Schedule events and
serve the Api routes on ``http://127.0.0.1:3000``. On the moto store (``--store moto``):
start (or attach to) the moto server process and provision what ``template.yaml`` declares
instead, and deliver EventBridge events from the rules' SQS queues. SIGTERM/SIGINT stop it
cleanly: no new work is taken, running handlers finish, the HTTP server closes, the store is
closed, and the moto process it started is stopped (unless ``keep_moto``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from types import FrameType
from typing import Protocol
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from durable_agents.errors import ConfigurationError, InfrastructureError
from durable_agents_local import leftover_store, moto_server
from durable_agents_local.agents_loading import VARIABLE as AGENTS_VARIABLE
from durable_agents_local.agents_loading import (
    choose_agent_modules,
    describe,
    load_agents,
    model_scripts_setting,
    put_on_path,
)
from durable_agents_local.allocator import return_large_buffers
from durable_agents_local.aws import LocalSession
from durable_agents_local.crash import CrashHooks, install
from durable_agents_local.embedded.aws_double import InProcessAws
from durable_agents_local.embedded.mode import EmbeddedMode
from durable_agents_local.embedded.store import EmbeddedStore
from durable_agents_local.event_router import QueueConsumers
from durable_agents_local.functions import FunctionSpec, make_resolver, read_functions
from durable_agents_local.http_api import HOST, ApiServer, Route
from durable_agents_local.invoke import LocalFunction, load_handler
from durable_agents_local.oidc import LocalIssuer
from durable_agents_local.provision import Clients, RuleQueue, provision
from durable_agents_local.reattach import store_watch
from durable_agents_local.scheduler import ScheduleLoop
from durable_agents_local.secrets import create_secrets
from durable_agents_local.store_key import (
    KEY_VARIABLE,
    StoreKeyError,
    key_file,
    key_for,
    port_of,
)
from durable_agents_local.stream_router import StreamPoller, StreamRoute
from durable_agents_local.template import load_template
from durable_agents_local.terminal import StampFormatter, show_agent_lines
from durable_agents_local.wal import StateDirLockedError
from durable_agents_local.worker_environment import (
    SERVICE_URL_VARIABLES,
    apply_environment,
    function_environment,
    services_environment,
)
from durable_agents_local.worker_options import WorkerOptions

__all__ = [
    "EXIT_SETUP_FAILED",
    "SERVICE_URL_VARIABLES",
    "Worker",
    "WorkerOptions",
    "apply_environment",
    "configure_logging",
    "function_environment",
    "run_local",
    "services_environment",
]

log = logging.getLogger("durable_agents_local")

EXIT_SETUP_FAILED = 2


class _Part(Protocol):
    """A worker thread group: event consumers, a stream poller, a schedule loop."""

    def start(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...


def configure_logging(quiet: bool, log_level: str = "WARNING") -> None:
    """Sends local mode's own log lines to stderr (one per invocation unless ``quiet``).

    Args:
        quiet: Only warnings and errors.
        log_level: The handlers' ``--log-level``: at DEBUG (unless ``quiet``) a failed
            invocation's line is followed by its traceback (``durable_agents_local.invoke``).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StampFormatter())
    log.handlers[:] = [handler]
    verbose = logging.DEBUG if log_level == "DEBUG" else logging.INFO
    log.setLevel(logging.WARNING if quiet else verbose)
    log.propagate = False


class Worker:
    """Local mode, started and stopped (see the module docstring).

    Args:
        options: How to run.
    """

    def __init__(self, options: WorkerOptions):
        self.options = options
        self.stop_event = threading.Event()
        self._moto: moto_server.MotoProcess | None = None
        self._adopted: leftover_store.Leftover | None = None  # an ephemeral store taken over
        self._parts: list[_Part] = []
        self._api: ApiServer | None = None
        self._api_thread: threading.Thread | None = None
        self.endpoint = ""
        self.store_key = ""
        self._crash_modules: list[str] = []
        self._agents_line = ""
        self._issuer: LocalIssuer | None = None
        self._store: EmbeddedStore | None = None
        self._aws: InProcessAws | None = None
        self._embedded: EmbeddedMode | None = None

    # -- start -------------------------------------------------------------------------------

    def _start_moto(self) -> tuple[str, str]:
        """Starts the store (or finds the one to attach to).

        Returns:
            Its endpoint and its session key (the started store's; an attached store's from
            ``DURABLE_AGENTS_STORE_KEY`` or its key file).
        """
        if self.options.moto_endpoint:
            url = urlsplit(self.options.moto_endpoint)
            if not moto_server.is_listening(url.hostname or HOST, url.port or 80):
                raise ConfigurationError(f"no moto server answers at {self.options.moto_endpoint}")
            endpoint = self.options.moto_endpoint.rstrip("/")
            try:
                return endpoint, key_for(endpoint)
            except (StoreKeyError, OSError, ValueError) as exc:
                raise ConfigurationError(f"cannot attach to the store: {exc}") from exc
        port, state_dir = self.options.moto_port, self.options.state_dir
        leftover = leftover_store.find(port)
        if leftover is not None and leftover_store.same_store(leftover, state_dir):
            return self._take_over(leftover)
        self._moto = moto_server.MotoProcess(port, state_dir)
        try:
            self._moto.start()
        except moto_server.PortInUseError as exc:
            serving = ""
            if leftover is not None:
                what = leftover.state_dir or "an ephemeral store"
                serving = f" (a store left running there, pid {leftover.pid}, serves {what})"
            raise ConfigurationError(
                f"{exc}{serving}: stop what runs there, pick another --moto-port, or attach to "
                f"a running moto server with --moto-endpoint {self._moto.endpoint}"
            ) from exc
        return self._moto.endpoint, self._moto.store_key

    def _take_over(self, leftover: leftover_store.Leftover) -> tuple[str, str]:
        """Goes on with the store an earlier local mode left running on this port.

        A durable store is stopped and started again (its journal is on disk), so that this
        process owns it and revives it if it dies; an ephemeral one is kept as it is (stopping
        it would lose its journal) and stopped when this process stops.
        """
        port = self.options.moto_port
        if leftover.state_dir is None:
            log.warning(
                "the ephemeral store an earlier local mode left running on port %s (pid %s) "
                "is taken over: it stops when this local mode stops",
                port,
                leftover.pid,
            )
            self._adopted = leftover
            return moto_server.endpoint_url(port), leftover.key
        log.warning(
            "the store an earlier local mode left running on port %s (pid %s, state in %s) "
            "is restarted under this local mode",
            port,
            leftover.pid,
            leftover.state_dir,
        )
        try:
            leftover_store.stop(leftover)
        except TimeoutError as exc:
            raise ConfigurationError(f"{exc}: stop it (kill -9 {leftover.pid})") from exc
        # The same key: clients of the earlier local mode (a CLI, a test) go on working.
        self._moto = moto_server.MotoProcess(port, self.options.state_dir, store_key=leftover.key)
        self._moto.start()
        return self._moto.endpoint, self._moto.store_key

    def _functions(self, specs: Sequence[FunctionSpec]) -> dict[str, LocalFunction]:
        timeouts = self.options.function_timeouts
        for spec in specs:
            for unsupported in spec.unsupported:
                log.warning("%s: event %s is not run locally", spec.logical_id, unsupported)
        return {
            spec.logical_id: LocalFunction(
                spec,
                load_handler(spec),
                region=self.options.region,
                timeout_seconds=timeouts.get(spec.logical_id, timeouts.get("*")),
            )
            for spec in specs
        }

    def _open_embedded(
        self,
        specs: Sequence[FunctionSpec],
        functions: dict[str, LocalFunction],
        env: dict[str, str],
    ) -> EmbeddedMode:
        opts = self.options
        assert self._store is not None  # opened first by start()
        return EmbeddedMode(
            self._store,
            specs,
            functions,
            env,
            region=opts.region,
            concurrency=opts.concurrency,
            redelivery_seconds=opts.visibility_timeout,
            stop=self.stop_event,
        )

    def _open_store(self) -> None:
        """Opens the embedded store, first of all.

        Its lock refuses a second local mode on the directory before anything (the first
        one's moto store) is touched.
        """
        try:
            self._store = EmbeddedStore(self.options.state_dir)
        except StateDirLockedError as exc:
            raise ConfigurationError(str(exc)) from exc

    def _install_crash(self, specs: Sequence[FunctionSpec]) -> None:
        spec = self.options.crash_at
        if spec is None:
            return
        modules = [sys.modules[s.handler.rpartition(".")[0]] for s in specs]
        installed = install(dict.fromkeys(modules), CrashHooks(spec))
        if not installed:
            raise ConfigurationError(
                "--crash-at needs a handler module with get_runtime() (the StepRunner's)"
            )
        self._crash_modules = installed

    def _check(self, specs: Sequence[FunctionSpec]) -> None:
        opts = self.options
        if opts.store not in ("embedded", "moto"):
            raise ConfigurationError(f"unknown store {opts.store!r}: embedded or moto")
        if opts.moto_endpoint and opts.store == "embedded":
            raise ConfigurationError(
                "the embedded store keeps the journal in the state directory; attaching to a "
                "moto server (moto_endpoint) needs store='moto'"
            )
        unknown = set(opts.function_timeouts) - {"*"} - {s.logical_id for s in specs}
        if unknown:
            raise ConfigurationError(f"--function-timeout names unknown functions: {unknown}")
        if not moto_server.port_is_free(opts.api_port):
            raise ConfigurationError(
                f"{HOST}:{opts.api_port} is already in use; pick another --port"
            )

    def start(self) -> None:
        """Starts everything; returns once the Api server accepts requests.

        Raises:
            ConfigurationError: If the template, a handler, the store or a port is unusable.
        """
        opts = self.options
        template = load_template(opts.template)
        template_dir = opts.template.resolve().parent
        resolver = make_resolver(template, opts.region)
        specs = read_functions(template, template_dir, resolver)
        self._check(specs)
        embedded = opts.store == "embedded"
        stop = self.stop_event
        queues: list[RuleQueue] = []
        streams: list[StreamRoute] = []
        watches: list[_Part] = []
        clients: Clients | None = None  # the moto store's
        if embedded:
            # One process (ADR 0026): the store's lock first, then moto's in-process mock for
            # what the handlers still ask AWS for (secrets).
            self._open_store()
            assert self._store is not None
            self._aws = InProcessAws(self._store.path, opts.region)
            arns = self._aws.create_secrets(template)
        else:
            self.endpoint, self.store_key = self._start_moto()
            session = LocalSession(self.endpoint, opts.region, store_key=self.store_key)
            arns = create_secrets(template, session)
        # ``!Ref`` of a secret is its ARN, known once it has been created: read them again.
        if arns:
            resolver = replace(resolver, refs={**resolver.refs, **arns})
            specs = read_functions(template, template_dir, resolver)
        if not embedded:
            moto_clients = clients = Clients(session)

            def reprovision() -> tuple[list[RuleQueue], list[StreamRoute]]:
                create_secrets(template, session)
                return provision(
                    moto_clients, template, specs, visibility_timeout=opts.visibility_timeout
                )

            queues, streams = reprovision()
            revive = self._moto.revive if self._moto else None
            watches = list(store_watch(clients, queues, reprovision, stop, revive))
        env = function_environment(specs, opts, self.endpoint or None, self.store_key or None)
        chosen = choose_agent_modules(opts.agents, os.environ, env)
        env[AGENTS_VARIABLE] = ",".join(chosen.modules)
        # The template names scripts inside the functions' packages: make those importable first.
        put_on_path([s.code_dir for s in specs])
        scripts = model_scripts_setting(env.get("SCRIPTED_MODEL_FILE", ""), opts.model_scripts)
        if scripts:
            env["SCRIPTED_MODEL_FILE"] = scripts
        if opts.oidc_port is not None:
            self._issuer = LocalIssuer(opts.oidc_port)
            self._issuer.start()
            env.update(self._issuer.environment())
        apply_environment(env)
        # Imported here, before the handlers and before "ready": a bad module stops the start.
        self._agents_line = describe(load_agents(chosen, [s.code_dir for s in specs]), chosen)
        functions = self._functions(specs)
        if embedded:
            # Before any handler builds its runtime (the crash hooks below build the
            # StepRunner's): every runtime of this process is on the embedded store.
            self._embedded = self._open_embedded(specs, functions, env)
        # The handlers made their agents' loggers: what agents say reads as lines, not JSON.
        show_agent_lines(quiet=opts.quiet)
        self._install_crash(specs)
        routes = [
            Route(a.method, a.path, functions[s.logical_id], iam=a.iam)
            for s in specs
            for a in s.apis
        ]
        try:
            self._api = ApiServer(
                routes, opts.api_port, caller_arn=opts.caller_arn, acting_as=opts.act_as
            )
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve the Api on {HOST}:{opts.api_port}: {exc.strerror}; "
                "pick another --port"
            ) from exc
        # Event delivery: the embedded store's bus and relay, or the moto store's queues and
        # stream pollers.
        delivery: list[_Part] = []
        if self._embedded is not None:
            delivery = list(self._embedded.parts)
        elif clients is not None:
            delivery = [
                *(
                    QueueConsumers(
                        clients.sqs,
                        q,
                        functions[q.function_id],
                        region=opts.region,
                        concurrency=opts.concurrency,
                        visibility_timeout=opts.visibility_timeout,
                        stop=stop,
                    )
                    for q in queues
                ),
                *(StreamPoller(clients, r, functions[r.function_id], stop) for r in streams),
            ]
        self._parts = [
            *delivery,
            *watches,
            *(
                ScheduleLoop(
                    functions[s.logical_id],
                    e,
                    interval=opts.schedule_interval,
                    region=opts.region,
                    stop=stop,
                )
                for s in specs
                for e in s.schedules
            ),
        ]
        for part in self._parts:
            part.start()
        self._api_thread = threading.Thread(
            target=self._api.serve_forever, name="api-server", daemon=True
        )
        self._api_thread.start()
        self._banner(
            specs,
            routes,
            self._embedded.bus.rule_names if self._embedded else [q.rule_name for q in queues],
            ["outbox relay (in process)"]
            if self._embedded
            else [f"{r.function_id}.{r.event.event_id}" for r in streams],
        )

    def _banner(
        self,
        specs: Sequence[FunctionSpec],
        routes: Sequence[Route],
        rules: Iterable[str],
        streams: Iterable[str],
    ) -> None:
        opts = self.options
        kept = f"state in {opts.state_dir}/" if opts.state_dir else "ephemeral"
        if self._moto:
            moto = f"{self.endpoint} (started, pid {self._moto.pid}, {kept})"
        elif self._adopted:
            moto = f"{self.endpoint} (taken over, pid {self._adopted.pid}, ephemeral)"
        else:
            moto = f"{self.endpoint} (attached)"
        if self._store is not None:
            where = "ephemeral" if self._store.ephemeral else str(self._store.path)
            store_lines = [
                f"  journal   embedded SQLite ({where})",
                "  aws       what the handlers call through boto3 (secrets): moto, in process",
            ]
        else:
            store_lines = [
                f"  journal   moto at {moto}",
                f"  key       the store's session key: {key_file(port_of(self.endpoint))} "
                f"(or {KEY_VARIABLE})",
            ]
        lines = [
            "durable-agents local mode",
            *store_lines,
            f"  agents    {self._agents_line}",
            f"  api       {self.api_url}  {len(routes)} routes "
            f"(GET {self.api_url}/openapi.json describes them)",
            f"  console   {self.api_url}/console",
            "  act-as    "
            + (
                f"{', '.join(opts.act_as)}: you decide approvals and reviews as them (dev only)"
                if opts.act_as
                else "nobody (--act-as group:NAME, or '*', decides approvals and reviews as them)"
            ),
            f"  events    {', '.join(rules) or 'none'}: {opts.concurrency} consumers per rule, "
            f"redelivery after {opts.visibility_timeout} s",
            f"  streams   {', '.join(streams) or 'none'}",
            f"  schedules {', '.join(f'{s.logical_id}.{e.event_id}' for s in specs for e in s.schedules) or 'none'}"  # noqa: E501
            f" every {opts.schedule_interval:g} s; stall after {opts.stall_after} s",
        ]
        for name, seconds in sorted(opts.function_timeouts.items()):
            target = "every function" if name == "*" else name
            lines.append(f"  timeout   {seconds:g} s for {target}")
        if self._issuer is not None:
            lines.append(
                f"  oidc      {self._issuer.url} (local issuer for /people/...: "
                "durable-agents token USER --group GROUP prints a token)"
            )
        services = services_environment(opts.services_url)
        if services:
            lines.append("  services  " + ", ".join(f"{k}={v}" for k, v in services.items()))
        if opts.crash_at is not None:
            lines.append(
                f"  crash-at  {opts.crash_at}: SIGKILL to this process, once "
                f"(hooks in {', '.join(self._crash_modules)})"
            )
        lines.append("ready (Ctrl-C stops)")
        log.info("\n".join(lines))

    @property
    def api_url(self) -> str:
        """The Api server's base URL."""
        port = self._api.server_address[1] if self._api else self.options.api_port
        return f"http://{HOST}:{port}"

    # -- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stops taking work, lets running handlers finish, closes the server and moto."""
        self.stop_event.set()
        if self._api is not None:
            if self._api_thread is not None:  # shutdown() waits for serve_forever to end
                self._api.shutdown()
            self._api.server_close()
        for part in self._parts:
            part.join()
        if self._embedded is not None:
            self._embedded.close()
        if self._aws is not None:
            self._aws.stop()
        if self._store is not None:
            self._store.close()
        if self._issuer is not None:
            self._issuer.stop()
        if self._moto is not None and not self.options.keep_moto:
            self._moto.stop()
        elif self._moto is not None:
            log.info("moto server left running at %s (pid %s)", self.endpoint, self._moto.pid)
        if self._adopted is not None and not self.options.keep_moto:
            try:
                leftover_store.stop(self._adopted)
            except TimeoutError as exc:
                log.error("%s", exc)

    def handle_signals(self) -> None:
        """Makes SIGTERM/SIGINT stop the worker (call from the main thread)."""

        def _on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("%s received: stopping", signal.Signals(signum).name)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)

    def wait(self) -> None:
        """Blocks until ``stop_event`` is set (by a signal or another thread)."""
        while not self.stop_event.wait(0.5):
            pass


def run_local(options: WorkerOptions) -> int:
    """Runs local mode until SIGTERM/SIGINT.

    Returns:
        0 after a clean stop, 2 if it could not start.
    """
    configure_logging(options.quiet, options.log_level)
    # Large request bodies would otherwise stay with the process once freed (allocator.py).
    return_large_buffers()
    worker = Worker(options)
    worker.handle_signals()
    try:
        try:
            worker.start()
        except (
            ConfigurationError,
            OSError,
            RuntimeError,
            BotoCoreError,
            ClientError,
            InfrastructureError,
        ) as exc:
            log.error("cannot start local mode: %s", exc)
            return EXIT_SETUP_FAILED
        worker.wait()
    finally:
        worker.stop()
    return 0
