"""`make sam-local`: the template's functions in Lambda containers (`sam local`) against moto.

Usage: python scripts/sam_local.py [--short] [--aws-images]

1. The engine and the image (`scripts/sam_image.py`; `--aws-images`: SAM pulls AWS's own).
2. A Docker network made for this session; the moto store and the fake payments/email/tickets
   services listen on its gateway address only (and the store answers only its session key), so
   the containers reach them and nothing else does. Tables, bus, bucket, queues and secrets are
   provisioned from template.yaml as local mode does.
3. `sam build` of the overlay (`scripts/sam_local_overlay.py`), then every `sam local invoke`
   line of docs/deploy.md's "sam local" section: each function with each of its events in
   events/, each answer checked (`EXPECTED`), not only the exit status. `--short` (what
   `make test` runs) stops after one invoke per function.
4. The whole run (not with `--short`): `sam local start-lambda` serves the StepRunner,
   `sam local start-api` the Api (SAM's API Gateway emulation); `scripts/sam_local_bridge.py`
   delivers each `Step Ready` from the bus to start-lambda. The support agent's run goes
   POST /runs -> StepRunner containers (a sub-agent, a tool call waiting for a person) -> a
   signed link minted and decided over the SAM-served Api (a duplicate `Step Ready` on the way)
   -> SUCCEEDED, with exactly one refund payout in the payments service's ledger.
5. Every container, network and process started here is stopped and removed at the end, also
   when something fails or on Ctrl-C / SIGTERM (the engine too, if this started it).

Exit status: 0 when every check held; 1 otherwise (what failed is printed); 2 when something it
needs cannot be set up here (Docker's engine, the image, the store: the reason is printed); 130
when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

from sam_image import SetupError, ensure_engine, ensure_image, machine_architecture
from sam_local_bridge import StartLambdaFunction, deliver
from sam_local_overlay import overlay, write_overlay

from durable_agents_local.aws import LocalSession
from durable_agents_local.functions import FunctionSpec, make_resolver, read_functions
from durable_agents_local.moto_server import free_port, is_listening
from durable_agents_local.provision import Clients, RuleQueue, provision
from durable_agents_local.secrets import create_secrets
from durable_agents_local.store_key import KEY_VARIABLE, RUNTIME_DIR_VARIABLE, new_key
from durable_agents_local.template import load_template
from durable_agents_local.verify import refund_payouts
from durable_agents_local.worker_environment import services_environment

log = logging.getLogger("sam_local")

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".aws-sam" / "sam-local"
DOCS = ROOT / "docs" / "deploy.md"
REGION = "us-east-1"
CALLER_ARN = "arn:aws:iam::123456789012:user/sam-local"
NETWORK_LABEL = "durable-agents.sam-local"
VISIBILITY_TIMEOUT = 300  # above the StepRunner's Timeout (240 s): no redelivery mid-invocation
RUN_TIMEOUT = 600.0

# The documented commands are run as written, with $SAM_LOCAL_FLAGS replaced by the session's.
INVOKE_BLOCK = re.compile(r"<!-- sam-local-invokes -->\s*```bash\n(.*?)```", re.DOTALL)


class CheckFailedError(Exception):
    """An answer was not what the function must answer; the message says which and why."""


def _body(answer: Mapping[str, Any]) -> Any:
    return json.loads(answer.get("body") or "null")


def _check_started(answer: Mapping[str, Any]) -> str | None:
    run = (_body(answer) or {}).get("run") or {}
    if answer.get("statusCode") != 201 or not str(run.get("run_id", "")).startswith("run-"):
        return f"POST /runs must answer 201 with the new run, not {answer}"
    if (run.get("agent"), run.get("status")) != ("example-research", "RUNNING"):
        return f"POST /runs must start example-research RUNNING, not {run}"
    return None


def _check_not_found(answer: Mapping[str, Any]) -> str | None:
    body = _body(answer)
    if answer.get("statusCode") != 404 or "error" not in body:
        return f"GET /runs/run-demo-1 of no such run must answer 404, not {answer}"
    return None


def _check_step(answer: Mapping[str, Any]) -> str | None:
    if answer != {"run_id": "run-demo-1", "outcome": "not_found", "executed": []}:
        return f"a Step Ready of no such run must execute nothing and say so, not {answer}"
    return None


def _check_sweep(answer: Mapping[str, Any]) -> str | None:
    counts = ("timers_fired", "stalled_redriven", "examined", "suspended_examined")
    if not isinstance(answer, Mapping) or any(answer.get(k) != 0 for k in counts):
        return f"the sweep of an empty journal must report every count 0, not {answer}"
    return None


def _check_wait_due(answer: Mapping[str, Any]) -> str | None:
    if answer != {"wait_id": "apr-0123456789abcdef01234567", "expired": False}:
        return f"a due wait that does not exist must expire nothing, not {answer}"
    return None


def _check_relayed(answer: Mapping[str, Any]) -> str | None:
    if answer != {"batchItemFailures": []}:
        return f"the relay must publish the emitted event (no batch item failures), not {answer}"
    return None


EXPECTED: dict[tuple[str, str], Callable[[Mapping[str, Any]], str | None]] = {
    ("StepRunnerFunction", "events/step_ready.json"): _check_step,
    ("ApiFunction", "events/api_start_run.json"): _check_started,
    ("ApiFunction", "events/api_get_run.json"): _check_not_found,
    ("ReconcilerFunction", "events/reconciler_schedule.json"): _check_sweep,
    ("ReconcilerFunction", "events/reconciler_wait_due.json"): _check_wait_due,
    ("RelayFunction", "events/relay_stream.json"): _check_relayed,
}
"""Every (function, event) the docs' block must invoke, and what its answer must be."""


def documented_invokes(text: str | None = None) -> list[tuple[str, str, list[str]]]:
    """The `sam local invoke` lines of docs/deploy.md's "sam local" section.

    Returns:
        ``(function, event file, argv)`` per line, in order; ``$SAM_LOCAL_FLAGS`` is left in
        argv as one item for the caller to expand.

    Raises:
        CheckFailedError: If the block is missing or a line is not ``sam local invoke FN -e EV``.
    """
    text = DOCS.read_text(encoding="utf-8") if text is None else text
    found = INVOKE_BLOCK.search(text)
    if found is None:
        raise CheckFailedError("docs/deploy.md has no <!-- sam-local-invokes --> bash block")
    commands = []
    for line in found.group(1).splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        argv = shlex.split(line)
        if argv[:3] != ["sam", "local", "invoke"] or "-e" not in argv:
            raise CheckFailedError(f"not a `sam local invoke FN -e EVENT` line: {line!r}")
        commands.append((argv[3], argv[argv.index("-e") + 1], argv))
    return commands


@dataclass
class Session:
    """What this session started: each is stopped and removed by ``cleanups`` in reverse."""

    session_id: str = field(default_factory=lambda: secrets.token_hex(4))
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    store_key: str = field(default_factory=new_key)
    cleanups: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    network: str = ""
    gateway: str = ""
    endpoint: str = ""
    services_url: str = ""
    image: str | None = None
    template: Path = WORK / "build" / "template.yaml"

    @property
    def env_file(self) -> Path:
        """The session's ``--env-vars`` file (it holds the session's token: mode 0600)."""
        return WORK / f"env-{self.session_id}.json"

    def aws_environment(self) -> dict[str, str]:
        """The environment `sam` runs with: the store's key as the only credentials.

        SAM hands the containers the credentials it finds; these reach the store and nothing
        else (no profile, no session token of a real account).
        """
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_", "DURABLE_AGENTS_")) or k == "AWS_SAM_STACK_NAME"
        }
        env.update(
            AWS_ACCESS_KEY_ID=self.store_key,
            AWS_SECRET_ACCESS_KEY="sam-local",
            AWS_REGION=REGION,
            AWS_DEFAULT_REGION=REGION,
            SAM_CLI_TELEMETRY="0",
            AWS_CONFIG_FILE=os.devnull,
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        )
        return env

    def flags(self) -> list[str]:
        """What every `sam local` command of the session adds (``$SAM_LOCAL_FLAGS``)."""
        flags = [
            "--template",
            str(self.template),
            "--env-vars",
            str(self.env_file),
            "--docker-network",
            self.network,
        ]
        if self.image is not None:
            flags += ["--invoke-image", self.image, "--skip-pull-image"]
        return flags


def hold_work_directory(session: Session) -> None:
    """One session at a time per checkout: they share WORK's build and its cache.

    Raises:
        SetupError: If another session holds it (its pid is named).
    """
    lock_path = WORK / "session.lock"
    handle = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the session
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise SetupError(
            f"another `make sam-local` (pid {holder}) is using {WORK}; wait for it to end"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    session.cleanups.callback(handle.close)


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=False, text=True, capture_output=True, **kwargs)


def _docker(*args: str) -> str:
    done = _run(["docker", *args])
    if done.returncode != 0:
        raise SetupError(f"docker {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def remove_network(name: str) -> None:
    """Removes the containers on network ``name`` (SAM's, if it was killed), then the network."""
    ids = _run(["docker", "ps", "-aq", "--filter", f"network={name}"]).stdout.split()
    if ids:
        _run(["docker", "rm", "-f", *ids])
    _run(["docker", "network", "rm", name])


def create_network(session: Session) -> None:
    """A bridge network of this session's own; the store and the services use its gateway."""
    name = f"durable-agents-sam-{session.session_id}"
    _docker("network", "create", "--driver", "bridge", "--label", f"{NETWORK_LABEL}=1", name)
    session.cleanups.callback(remove_network, name)
    session.network = name
    session.gateway = _docker(
        "network", "inspect", "--format", "{{(index .IPAM.Config 0).Gateway}}", name
    )


def stop_process(process: subprocess.Popen[bytes], first: int = signal.SIGTERM) -> None:
    """Stops ``process`` and its process group: ``first``, then SIGKILL after 20 s."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, first)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def start_process(
    session: Session,
    argv: list[str],
    *,
    name: str,
    ready: Callable[[], bool],
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    stop_signal: int = signal.SIGTERM,
) -> subprocess.Popen[bytes]:
    """Starts ``argv`` in its own process group, logged to WORK/<name>.log; waits for ``ready``.

    Raises:
        SetupError: If it exits or is not ready within ``timeout`` (its log's tail says why).
    """
    log_path = WORK / f"{name}.log"
    with open(log_path, "wb") as output:
        process = subprocess.Popen(
            argv,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            cwd=ROOT,
        )
    session.cleanups.callback(stop_process, process, stop_signal)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SetupError(f"{name} exited ({process.returncode}):\n{_tail(log_path)}")
        if ready():
            return process
        time.sleep(0.2)
    raise SetupError(f"{name} was not ready within {timeout:.0f} s:\n{_tail(log_path)}")


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def start_store(session: Session) -> None:
    """The moto store and the fake services, on the network's gateway only."""
    python = sys.executable
    runtime_dir = WORK / "run"
    runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    store_port = free_port(session.gateway)
    env = {**os.environ, KEY_VARIABLE: session.store_key, RUNTIME_DIR_VARIABLE: str(runtime_dir)}
    start_process(
        session,
        [
            python,
            "-m",
            "durable_agents_local.moto_server",
            "--host",
            session.gateway,
            "--port",
            str(store_port),
            "--ephemeral",
        ],
        name="moto",
        env=env,
        ready=lambda: is_listening(session.gateway, store_port),
    )
    session.endpoint = f"http://{session.gateway}:{store_port}"
    services_port = free_port(session.gateway)
    start_process(
        session,
        [
            python,
            "-m",
            "durable_agents_local.services",
            "--host",
            session.gateway,
            "--port",
            str(services_port),
        ],
        name="services",
        ready=lambda: is_listening(session.gateway, services_port),
    )
    session.services_url = f"http://{session.gateway}:{services_port}"


def provision_store(session: Session) -> tuple[list[FunctionSpec], list[RuleQueue], LocalSession]:
    """Tables, bus, bucket, rule queues and secrets in the store, from template.yaml."""
    template = load_template(ROOT / "template.yaml")
    aws = LocalSession(session.endpoint, REGION, store_key=session.store_key)
    resolver = make_resolver(template, REGION)
    arns = create_secrets(template, aws)
    resolver = replace(resolver, refs={**resolver.refs, **arns})
    specs = read_functions(template, ROOT, resolver)
    queues, _ = provision(Clients(aws), template, specs, visibility_timeout=VISIBILITY_TIMEOUT)
    return specs, queues, aws


def function_variables(
    session: Session, specs: list[FunctionSpec], api_url: str
) -> dict[str, dict[str, str]]:
    """Each function's ``--env-vars`` entry: its own variables with local values, plus moto's.

    ``AWS_ENDPOINT_URL`` sends every SDK call to the store; the example tools' services are
    the fake ones; the Api gets the session's caller and token (``api.sam_emulator``), links
    pointing at start-api's address, and the caller as link minter and review operator.
    """
    variables: dict[str, dict[str, str]] = {}
    for spec in specs:
        env = dict(spec.environment)
        env.update(
            AWS_ENDPOINT_URL=session.endpoint,
            POWERTOOLS_TRACE_DISABLED="1",
            **services_environment(session.services_url),
        )
        if spec.apis:
            env.update(
                SAM_LOCAL_TOKEN=session.token,
                SAM_LOCAL_CALLER_ARN=CALLER_ARN,
                PUBLIC_BASE_URL=api_url,
            )
            for key in ("LINK_MINTERS", "REVIEW_OPERATORS"):
                env[key] = env.get(key) or f"iam:{CALLER_ARN}"
        variables[spec.logical_id] = env
    return variables


def python313_environment() -> dict[str, str]:
    """What `sam build` needs to find a python3.13 (pyenv's, if none is on PATH)."""
    if shutil.which("python3.13") is not None and _run(["python3.13", "--version"]).returncode == 0:
        return {}
    versions = _run(["pyenv", "versions", "--bare"]).stdout.split() if shutil.which("pyenv") else []
    found = [v for v in versions if re.fullmatch(r"3\.13(\.\d+)?", v)]
    if not found:
        return {}
    current = _run(["pyenv", "version-name"]).stdout.strip()
    return {"PYENV_VERSION": f"{current}:{found[-1]}" if current else found[-1]}


def build(session: Session, sam: str, specs: list[FunctionSpec], architecture: str) -> None:
    """`sam build` of the overlay into WORK/build (cached between sessions)."""
    template = load_template(ROOT / "template.yaml")
    declared = {spec.logical_id: sorted(session_names(spec)) for spec in specs}
    path = write_overlay(
        overlay(template, template_dir=ROOT, architecture=architecture, declared=declared),
        WORK / "template.json",
    )
    env = {**os.environ, "LAYER_ARCHITECTURE": architecture, **python313_environment()}
    started = time.monotonic()
    done = _run(
        [
            sam,
            "build",
            "--template",
            str(path),
            "--build-dir",
            str(WORK / "build"),
            "--cache-dir",
            str(WORK / "cache"),
            "--cached",
            "--parallel",
        ],
        env=env,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise CheckFailedError(f"sam build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    print(f"==> sam build ({architecture}) in {time.monotonic() - started:.0f} s", flush=True)


def session_names(spec: FunctionSpec) -> set[str]:
    """The variable names ``function_variables`` sets for ``spec`` (declared by the overlay)."""
    names = set(spec.environment) | {"AWS_ENDPOINT_URL", "POWERTOOLS_TRACE_DISABLED"}
    names |= set(services_environment("http://x"))
    if spec.apis:
        names |= {
            "SAM_LOCAL_TOKEN",
            "SAM_LOCAL_CALLER_ARN",
            "PUBLIC_BASE_URL",
            "LINK_MINTERS",
            "REVIEW_OPERATORS",
        }
    return names


def invoke_all(session: Session, sam: str, *, short: bool) -> None:
    """Runs the documented `sam local invoke` lines and checks each answer.

    Raises:
        CheckFailedError: If a line fails, an answer is wrong, or a (function, event) pair of
            ``EXPECTED`` is not documented.
    """
    commands = documented_invokes()
    missing = set(EXPECTED) - {(fn, ev) for fn, ev, _ in commands}
    if missing:
        raise CheckFailedError(f"docs/deploy.md does not invoke {sorted(missing)}")
    done_functions: set[str] = set()
    for function, event, argv in commands:
        if short and function in done_functions:
            continue
        done_functions.add(function)
        # The documented line as written: `sam` is the pinned one, $SAM_LOCAL_FLAGS the session's.
        expanded = [sam] + [
            part for a in argv[1:] for part in (session.flags() if a == "$SAM_LOCAL_FLAGS" else [a])
        ]
        started = time.monotonic()
        done = _run(expanded, env=session.aws_environment(), cwd=ROOT, timeout=600)
        took = time.monotonic() - started
        answer = _last_json(done.stdout)
        check = EXPECTED.get((function, event))
        if done.returncode != 0:
            problem: str | None = f"exit status {done.returncode}"
        elif not isinstance(answer, dict):
            problem = "no JSON object answered on stdout"
        else:
            problem = check(answer) if check is not None else None
        if problem:
            raise CheckFailedError(
                f"sam local invoke {function} -e {event}: {problem}\n"
                f"stdout: {done.stdout[-1500:]}\nstderr: {done.stderr[-3000:]}"
            )
        print(f"==> {function} {event}: ok in {took:.1f} s: {json.dumps(answer)[:160]}", flush=True)


def _last_json(text: str) -> Any:
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(ValueError):
            return json.loads(line)
    return None


def whole_run(
    session: Session,
    sam: str,
    specs: list[FunctionSpec],
    queues: list[RuleQueue],
    aws: LocalSession,
    api_port: int,
) -> None:
    """The support agent's run through start-api, start-lambda and the bridge (see module doc).

    Raises:
        CheckFailedError: If the run does not reach SUCCEEDED with exactly one refund payout.
    """
    lambda_port = free_port()
    env = session.aws_environment()
    common = ["--host", "127.0.0.1", "--warm-containers", "LAZY", *session.flags()]
    # SAM's two servers; SIGINT at the end, on which SAM removes its warm containers.
    for command, port in (("start-lambda", lambda_port), ("start-api", api_port)):
        start_process(
            session,
            [sam, "local", command, "--port", str(port), *common],
            name=command,
            env=env,
            ready=functools.partial(is_listening, "127.0.0.1", port),
            stop_signal=signal.SIGINT,
        )
    stop = threading.Event()
    step_runner = StartLambdaFunction(
        f"http://127.0.0.1:{lambda_port}", "StepRunnerFunction", timeout_seconds=300, region=REGION
    )
    consumers = deliver(
        aws.client("sqs"),
        queues,
        {"StepRunnerFunction": step_runner},
        region=REGION,
        visibility_timeout=VISIBILITY_TIMEOUT,
        stop=stop,
    )

    def _stop_bridge() -> None:
        stop.set()
        for consumer in consumers:
            consumer.join(timeout=330)

    session.cleanups.callback(_stop_bridge)
    api = f"http://127.0.0.1:{api_port}"
    bus = next(s.environment["EVENT_BUS_NAME"] for s in specs if s.apis)
    drive_support_run(session, api, aws, bus)
    print(f"==> StepRunner invocations through start-lambda: {step_runner.invocations}")


def http_json(
    session: Session, method: str, url: str, body: Any = None, *, signed: bool = True
) -> tuple[int, Any]:
    """One request to the SAM-served Api; ``signed`` adds the session's token (the IAM caller)."""
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    if signed:
        headers["X-Sam-Local-Token"] = session.token
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def _wait(what: str, probe: Callable[[], Any], timeout: float = RUN_TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(1.0)
    raise CheckFailedError(f"{what} did not happen within {timeout:.0f} s")


def step_ready(aws: LocalSession, bus: str, run_id: str) -> None:
    """Puts one more ``Step Ready`` of ``run_id`` on the bus (a duplicate delivery)."""
    aws.client("events").put_events(
        Entries=[
            {
                "Source": "durable-agents",
                "DetailType": "Step Ready",
                "Detail": json.dumps({"run_id": run_id}),
                "EventBusName": bus,
            }
        ]
    )


def drive_support_run(session: Session, api: str, aws: LocalSession, bus: str) -> None:
    """Starts the support agent's run, approves its refund over the Api, checks the outcome.

    Two more ``Step Ready`` events of the run are put on the bus, one while it waits for the
    approval and one after the decision: duplicates must neither pass the wait nor pay twice.
    """
    status, refused = http_json(session, "POST", f"{api}/runs", {"agent": "x"}, signed=False)
    if status != 401:
        raise CheckFailedError(
            f"POST /runs without the session's token must be 401: {status} {refused}"
        )
    status, started = http_json(
        session,
        "POST",
        f"{api}/runs",
        {
            "agent": "example-support",
            "input": {
                "customer": "cus-ada",
                "message": "Hi! My order A-1001 arrived damaged. Could I get a refund, please?",
            },
            "idempotency_key": f"sam-local-{session.session_id}",
        },
    )
    if status != 201:
        raise CheckFailedError(f"POST /runs answered {status}: {started}")
    run_id = started["run"]["run_id"]
    print(f"==> POST /runs (start-api) -> 201 {run_id}", flush=True)

    def pending() -> Any:
        _, listing = http_json(session, "GET", f"{api}/approvals?status=pending")
        found = [a for a in listing.get("approvals", []) if a.get("run_id") == run_id]
        if not found:
            _, run = http_json(session, "GET", f"{api}/runs/{run_id}")
            if run.get("status") in ("FAILED", "CANCELLED", "SUCCEEDED"):
                raise CheckFailedError(f"the run is {run.get('status')} before any approval: {run}")
        return found[0] if found else None

    approval = _wait("an approval of the refund", pending)
    approval_id = approval["approval_id"]
    print(f"==> the run waits for {approval_id} ({approval['summary']})", flush=True)
    status, link = http_json(
        session,
        "POST",
        f"{api}/approvals/{approval_id}/links",
        {"approver": "group:support-leads", "ttl_seconds": 3600},
    )
    if status != 201:
        raise CheckFailedError(f"POST /approvals/{approval_id}/links answered {status}: {link}")
    # A Step Ready while the run waits (a duplicate, or a stray one): nothing passes the wait.
    step_ready(aws, bus, run_id)
    decision = {"decision": "approve", "comment": "approved under sam local"}
    status, decided = http_json(session, "POST", link["url"], decision, signed=False)
    if status != 200:
        raise CheckFailedError(f"POST {link['url']} (the signed link) answered {status}: {decided}")
    print(f"==> approved through the signed link (start-api) -> {decided['status']}", flush=True)
    # A duplicate delivery after the decision: the refund must still be paid once.
    step_ready(aws, bus, run_id)

    def finished() -> Any:
        _, run = http_json(session, "GET", f"{api}/runs/{run_id}")
        return run if run.get("status") in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    run = _wait("the run's end", finished)
    if run["status"] != "SUCCEEDED":
        raise CheckFailedError(f"the run ended {run['status']}: {run}")
    with urllib.request.urlopen(
        f"{session.services_url}/_control/ledger/payments", timeout=30
    ) as response:
        ledger = json.loads(response.read())
    payouts = refund_payouts(ledger, "A-1001")
    if len(payouts) != 1:
        raise CheckFailedError(f"expected exactly one refund payout, the ledger has {payouts}")
    print(
        f"==> {run_id} SUCCEEDED; one refund payout ({payouts[0]['charge_id']})",
        flush=True,
    )


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so the cleanups run."""

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {s: signal.signal(s, _raise) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `make sam-local` (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="one invoke per function only")
    parser.add_argument(
        "--aws-images",
        action="store_true",
        help="let SAM pull AWS's Lambda images (needs a registry) instead of building one",
    )
    parser.add_argument("--sam", default=str(ROOT / ".venv-sam" / "bin" / "sam"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="    %(message)s")
    logging.getLogger("botocore").setLevel(logging.WARNING)
    WORK.mkdir(parents=True, exist_ok=True)
    session = Session()
    started = time.monotonic()
    with _signals_unwind():
        try:
            with session.cleanups:
                hold_work_directory(session)
                engine = ensure_engine()
                session.cleanups.callback(engine.stop_if_started)
                architecture = machine_architecture()
                session.image = None if args.aws_images else ensure_image(architecture)
                create_network(session)
                start_store(session)
                specs, queues, aws = provision_store(session)
                api_port = free_port()
                write_env(
                    session, function_variables(session, specs, f"http://127.0.0.1:{api_port}")
                )
                build(session, args.sam, specs, architecture)
                invoke_all(session, args.sam, short=args.short)
                if not args.short:
                    whole_run(session, args.sam, specs, queues, aws, api_port)
        except SetupError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except CheckFailedError as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
        except Exception:  # the cleanups ran; say what broke
            traceback.print_exc()
            return 1
        except KeyboardInterrupt:
            print("interrupted: everything this started was stopped and removed", file=sys.stderr)
            return 130
    print(
        f"==> sam local: every check held in {time.monotonic() - started:.0f} s; "
        "its containers, network and processes are gone"
    )
    return 0


def write_env(session: Session, variables: dict[str, dict[str, str]]) -> None:
    """The ``--env-vars`` file (mode 0600: it holds the session's token); removed at the end."""
    session.env_file.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(session.env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(variables, handle, indent=1)
    session.cleanups.callback(session.env_file.unlink, missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
