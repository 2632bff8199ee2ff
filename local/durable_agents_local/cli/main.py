"""The ``durable-agents`` command: local mode, the moto server, and reading runs.

* ``durable-agents local``: run the template's functions against moto (see ``local.worker``).
* ``durable-agents moto``: only the moto server, in the foreground.
* ``durable-agents runs list|show|history|timeline|redrive|cancel|terminate|send-event|watch``,
  ``approvals list|decide``, ``reviews list|decide``: through the Api (``cli_remote``), local
  mode's by default, a deployed stack's with ``--stack NAME`` or ``--api-url URL`` (SigV4).
* ``durable-agents runs start``: ``POST /runs`` through the Api, local mode's or a deployed
  stack's (the same connection options), then it waits for the run.
* ``durable-agents runs migrate``, ``runs rerun``: through the Api (it has the agents).
* ``durable-agents console --api-url URL``: a deployed Api's run console (``console_proxy``).
* ``durable-agents init DIR``: a new SAM app of your own in DIR (``durable_agents_local.scaffold``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from durable_agents_local import moto_server, runs_flow
from durable_agents_local.cli import console_proxy
from durable_agents_local.cli import remote as cli_remote
from durable_agents_local.cli.tables import escape_controls, escape_strings
from durable_agents_local.crash import CRASH_POINTS, CrashSpec
from durable_agents_local.identity import LOCAL_CALLER_ARN, check_caller_arn

OIDC_PORT = 3001  # durable_agents_local.oidc.DEFAULT_PORT (not imported: it loads cryptography)

EXIT_ERROR = 1
EXIT_USAGE = 2
# 128 + SIGPIPE: what a shell reports for a writer its reader left (`yes | head -1`).
EXIT_BROKEN_PIPE = 141
STATUSES = cli_remote.STATUSES


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _timeout(text: str) -> tuple[str, float]:
    name, _, seconds = text.rpartition("=")
    return name or "*", _positive_float(seconds)


def _crash_spec(text: str) -> CrashSpec:
    try:
        return CrashSpec.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _http_url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected an http:// URL, got {text!r}")
    return text.rstrip("/")


def _act_as(text: str) -> str:
    if text == "*" or re.fullmatch(r"(?:user|group|iam):\S+", text):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not an approver pattern: use group:NAME, user:EMAIL, iam:ARN or '*'"
    )


def _caller_arn(text: str) -> str:
    try:
        return check_caller_arn(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _add_local(commands: Any) -> None:
    local = commands.add_parser(
        "local",
        help="run the template's functions on your machine, Api on 127.0.0.1",
        description="Run template.yaml's functions in this process: the journal in an "
        "embedded SQLite store in --state-dir (or, with --store moto, in a moto server), "
        "EventBridge rules delivered in the process (or through SQS), Schedule events every "
        "--schedule-interval seconds, Api events served on http://127.0.0.1:PORT.",
    )
    local.add_argument(
        "--template",
        type=Path,
        help="the SAM template (default: ./template.yaml, else the project's own)",
    )
    local.add_argument(
        "--agents",
        action="append",
        default=[],
        metavar="MODULE[,MODULE]",
        help="agent modules to import (repeatable), over AGENT_MODULES in the environment, "
        "over template.yaml's; imported from functions/, PYTHONPATH or the working directory",
    )
    local.add_argument("--port", type=int, default=3000, help="Api port (default 3000)")
    moto = local.add_mutually_exclusive_group()
    moto.add_argument(
        "--moto-port",
        type=int,
        default=moto_server.DEFAULT_PORT,
        help="port of the moto server to start (default %(default)s)",
    )
    moto.add_argument(
        "--moto-endpoint",
        metavar="URL",
        help="attach to a running moto server instead of starting one (its session key: "
        "DURABLE_AGENTS_STORE_KEY, else the key file the server wrote for its port)",
    )
    moto_server.add_state_arguments(local)
    local.add_argument(
        "--store",
        choices=("embedded", "moto"),
        help="where the journal lives: embedded (the default: SQLite in the state directory, "
        "events delivered in this process) or moto (the moto store, events through SQS); "
        "--moto-endpoint implies moto",
    )
    local.add_argument(
        "--keep-moto",
        action="store_true",
        help="leave the moto server this command started running on exit",
    )
    local.add_argument(
        "--schedule-interval",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="fire Schedule events this often (default 1)",
    )
    local.add_argument(
        "--function-timeout",
        type=_timeout,
        action="append",
        default=[],
        metavar="[FUNCTION=]SECONDS",
        help="override the Timeout of one function (or of all); the StepRunner's claim lease "
        "follows it, so a short one makes crash recovery quick (repeatable)",
    )
    local.add_argument(
        "--stall-after",
        type=_positive_int,
        default=5,
        metavar="SECONDS",
        help="STALL_AFTER_SECONDS for the reconciler (default 5)",
    )
    local.add_argument(
        "--visibility-timeout",
        type=_positive_int,
        default=10,
        metavar="SECONDS",
        help="redeliver an unfinished event after this long",
    )
    local.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        help="consumer threads per EventBridge rule (default 4)",
    )
    local.add_argument("--region", default="us-east-1")
    local.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="LOG_LEVEL of the handlers' JSON logs on stdout (default WARNING); DEBUG also"
        " shows a failed invocation's traceback. The agents' ctx.logger lines have their own"
        " level, AGENT_LOG_LEVEL (default INFO)",
    )
    local.add_argument("--quiet", action="store_true", help="only warnings and errors")
    local.add_argument(
        "--services-url",
        type=_http_url,
        metavar="URL",
        help="base URL of the fake services (python -m durable_agents_local.services): sets "
        "PAYMENTS_URL, EMAIL_URL and TICKETS_URL for the handlers (default: those variables "
        "as set in this environment)",
    )
    local.add_argument(
        "--caller-arn",
        type=_caller_arn,
        default=LOCAL_CALLER_ARN,
        metavar="ARN",
        help="the IAM caller of Api requests (default %(default)s); a request's "
        "X-Local-Caller-Arn header overrides it",
    )
    local.add_argument(
        "--act-as",
        action="append",
        default=[],
        type=_act_as,
        metavar="PATTERN",
        help="decide approvals and reviews as this approver (group:finance, user:EMAIL, "
        "iam:ARN, or '*' for any), from the console and the CLI; repeatable. Local mode only: "
        "a deployed Api never honours it",
    )
    local.add_argument(
        "--model-script",
        action="append",
        default=[],
        metavar="[CONFIG=]FILE",
        help="a model script for the scripted provider, added to template.yaml's "
        "SCRIPTED_MODEL_FILE; CONFIG= makes it answer only that ModelConfig name (repeatable)",
    )
    local.add_argument(
        "--local-oidc",
        action="store_true",
        help="run a local OIDC issuer (loopback, in-memory key) and point JWT_ISSUER at it, "
        "so /people/approvals/{id} works locally; `durable-agents token` prints its tokens",
    )
    local.add_argument(
        "--oidc-port",
        type=int,
        default=OIDC_PORT,
        help="port of the local OIDC issuer (default %(default)s)",
    )
    local.add_argument(
        "--crash-at",
        type=_crash_spec,
        metavar="OPERATION:POINT",
        help="SIGKILL this worker once, when the operation (a name like charge-card, or an "
        f"operation id) reaches POINT: one of {', '.join(CRASH_POINTS)}",
    )


def _add_runs(commands: Any) -> None:
    runs = commands.add_parser(
        "runs",
        help="list, show, follow, start, stop, message, redrive, migrate, re-run runs or "
        "extend their budget",
    )
    actions = runs.add_subparsers(dest="action", required=True, metavar="ACTION")
    cli_remote.add_commands(actions, commands, _http_url, _caller_arn)
    start = actions.add_parser(
        "start",
        help="start a run through the Api and wait for it",
        description="POST /runs to the Api (local mode's by default; a deployed stack's with "
        "--stack NAME or --api-url https://…, SigV4-signed), then poll the run until it "
        "finishes or pauses (or --wait runs out); retried while local mode is still starting.",
    )
    start.add_argument("agent", help="the agent's name")
    start.add_argument(
        "input",
        help='the input as JSON (\'"Ada"\', \'{"topic": "x"}\'); plain text that is not '
        'JSON is sent as a string (Ada); text that looks like JSON (starts with {, [ or ", '
        "a number, true/false/null) must parse, else exit 2 with the parser's line and column",
    )
    start.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for the Api and the run (default 30; 0: do not)",
    )
    start.add_argument("--idempotency-key", help="the same key returns the same run")
    start.add_argument("--json", action="store_true", help="print the run as JSON")
    runs_flow.add_start_options(start)
    # --api-url (--api), --stack, --region, --profile, --caller-arn: as the other commands.
    cli_remote.add_connection(start, top=False, url=_http_url, caller=_caller_arn)


def _add_token(commands: Any) -> None:
    token = commands.add_parser(
        "token",
        help="print a token of the local OIDC issuer (durable-agents local --local-oidc)",
        description="Ask the local OIDC issuer of a running `durable-agents local --local-oidc` "
        "for a JWT naming USER (and its groups); send it as 'Authorization: Bearer <token>' "
        "to /people/approvals/{id}.",
    )
    token.add_argument("user", help="the token's sub (and verified email if it has an @)")
    token.add_argument("--group", action="append", default=[], help="a group (repeatable)")
    token.add_argument("--ttl", type=_positive_int, metavar="SECONDS", help="default 3600")
    token.add_argument(
        "--issuer",
        type=_http_url,
        default=f"http://127.0.0.1:{OIDC_PORT}",
        help="the local issuer (default %(default)s)",
    )


def _token(args: argparse.Namespace) -> int:
    from durable_agents_local.oidc import LocalTokenError, request_token  # noqa: PLC0415

    try:
        token = request_token(args.issuer, args.user, groups=args.group, ttl_seconds=args.ttl)
    except LocalTokenError as exc:
        print(f"error: {escape_controls(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    print(escape_controls(token))  # a JWT has no control character; an issuer's answer might
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``durable-agents``."""
    parser = argparse.ArgumentParser(
        prog="durable-agents",
        description="Durable agents on AWS serverless: run them locally, operate a deployed "
        "stack (--stack NAME or --api-url URL; requests signed with your AWS credentials).",
    )
    cli_remote.add_connection(parser, top=True, url=_http_url, caller=_caller_arn)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_local(commands)
    moto = commands.add_parser(
        "moto",
        help="run only the moto server (foreground)",
        description="Run only local mode's store. It answers only clients whose access key id "
        "is its session key: DURABLE_AGENTS_STORE_KEY if set, else a new one; either way "
        "written to a key file only your user can read (its path is on the first line).",
    )
    moto.add_argument("--port", type=int, default=moto_server.DEFAULT_PORT)
    moto_server.add_state_arguments(moto)
    _add_runs(commands)
    _add_token(commands)
    console_proxy.add_parser(commands)
    init = commands.add_parser(
        "init",
        help="create a new SAM app of your own in DIR (an example agent, its test, the stack)",
        description="Write a new durable-agents app into DIR (absent or empty): template.yaml, "
        "the runtime's handlers and layer, functions/agents/ with an example agent, a test, "
        "samconfig.toml, a README and a Makefile (make test, make local, make deploy).",
    )
    init.add_argument("dir", type=Path, metavar="DIR", help="where to create the app")
    return parser


def _local(args: argparse.Namespace) -> int:
    from durable_agents_local.template import default_template  # noqa: PLC0415
    from durable_agents_local.worker import EXIT_SETUP_FAILED, WorkerOptions, run_local  # noqa: PLC0415

    try:
        template = args.template or default_template()
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SETUP_FAILED

    if args.moto_endpoint and args.store == "embedded":
        print(
            "error: --store embedded keeps the journal in --state-dir; --moto-endpoint "
            "attaches to a moto store's journal",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.moto_endpoint and (args.state_dir or args.ephemeral):
        print(
            "error: --state-dir/--ephemeral configure the store this command starts; with "
            "--moto-endpoint the attached store keeps its own state",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return run_local(
        WorkerOptions(
            template=template,
            moto_endpoint=args.moto_endpoint,
            moto_port=args.moto_port,
            state_dir=moto_server.state_dir_of(args),
            api_port=args.port,
            schedule_interval=args.schedule_interval,
            function_timeouts=dict(args.function_timeout),
            stall_after=args.stall_after,
            visibility_timeout=args.visibility_timeout,
            concurrency=args.concurrency,
            region=args.region,
            log_level=args.log_level,
            quiet=args.quiet,
            keep_moto=args.keep_moto,
            crash_at=args.crash_at,
            services_url=args.services_url,
            agents=tuple(args.agents),
            caller_arn=args.caller_arn,
            act_as=tuple(dict.fromkeys(args.act_as)),
            model_scripts=tuple(args.model_script),
            oidc_port=args.oidc_port if args.local_oidc else None,
            store=args.store or ("moto" if args.moto_endpoint else "embedded"),
        )
    )


def _runs_start(args: argparse.Namespace) -> int:
    from durable_agents_local import runs_start  # noqa: PLC0415
    from durable_agents_local.cli import api_client  # noqa: PLC0415

    try:
        value = runs_start.parse_input(args.input)
        options = runs_flow.start_options(
            args.priority, args.budget_tokens, args.budget_usd, args.on_budget_exceeded
        )
    except (runs_start.InputSyntaxError, runs_flow.FlowUsageError) as exc:
        print(f"error: {escape_controls(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    try:
        client = api_client.connect(
            api_url=args.api_url,
            stack=args.stack,
            region=args.region,
            profile=args.profile,
            caller_arn=args.caller_arn,
        )
    except api_client.ApiConfigError as exc:
        print(f"error: {escape_controls(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    try:
        started = runs_start.start_run(
            client,
            args.agent,
            value,
            wait_seconds=args.wait,
            idempotency_key=args.idempotency_key,
            options=options,
            # Said at once on stderr (stdout is the run's line, or its JSON with --json).
            on_wait=lambda text: print(escape_controls(text), file=sys.stderr, flush=True),
        )
    except runs_start.RunStartError as exc:
        # Its message holds the Api's text (a refusal's message, its field errors) escaped
        # already, one line per item: its own line breaks stay.
        print(f"error: {escape_controls(str(exc), keep_newlines=True)}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:  # json.dumps escapes every control character
        print(json.dumps(started.run, indent=2))
    else:  # describe() does not escape: it is given the run with its strings escaped
        shown = dataclasses.replace(started, run=escape_strings(started.run))
        print(escape_controls(runs_start.describe(shown), keep_newlines=True))
    ended_badly = ("FAILED", "PAUSED", "BUDGET_EXCEEDED", "CANCELLED", "TERMINATED", "TIMED_OUT")
    return EXIT_ERROR if started.run["status"] in ended_badly else 0


def _runs(args: argparse.Namespace) -> int:
    if args.action == "start":
        return _runs_start(args)
    return cli_remote.command(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``durable-agents`` console script.

    A reader that stops early (``durable-agents runs list | head -1``) ends the command
    quietly, as it ends any Unix tool: no traceback, exit status 141.

    Returns:
        The exit status: 0 on success, 1 on errors (the Api down or refusing, an unknown run,
        a watched run that did not succeed), 2 on usage errors (``runs start``'s INPUT that
        looks like JSON but does not parse among them), when the CLI cannot be set up
        (no credentials, no such stack) or when local mode cannot start; 141 when the reader
        of stdout went away before the output was written.
    """
    try:
        code = _main(argv)
        sys.stdout.flush()  # a reader gone shows here, not in the interpreter's flush at exit
    except BrokenPipeError:
        # The reader went away (`| head -1`): the rest of the output is not wanted. 141 (128 +
        # SIGPIPE) rather than 0: it is what a shell reports for any tool cut short this way
        # (`yes | head -1`), so a `set -o pipefail` script sees the same from this command as
        # from others, and a script can still tell the output was not all read. stdout now
        # goes to /dev/null, so the interpreter's own flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "local":
        return _local(args)
    if args.command == "token":
        return _token(args)
    if args.command == "init":
        from durable_agents_local import scaffold  # noqa: PLC0415

        return scaffold.main(args.dir)
    if args.command == "console":
        return console_proxy.run(args)
    if args.command == "moto":
        argv = ["--port", str(args.port)]
        if args.ephemeral:
            argv.append("--ephemeral")
        elif args.state_dir:
            argv += ["--state-dir", str(args.state_dir)]
        return moto_server.main(argv)
    if args.command == "runs":
        return _runs(args)
    return cli_remote.command(args)


if __name__ == "__main__":
    sys.exit(main())
