"""The ``durable-agents`` commands that call the Api: runs, approvals, reviews, flow.

One code path for local mode and a deployed stack: every command is a request to the Api
(``durable_agents_local.cli.api_client``), signed with SigV4 for a deployment (``--stack NAME`` or
``--api-url URL``), unsigned for local mode (the default, ``http://127.0.0.1:3000``). Tables
fit 80 columns; ``--json`` prints the Api's JSON instead. What is printed for a person shows
the control characters of the Api's text escaped (``tables.escape_controls``): run data is
anyone's text, and a terminal obeys an ESC sequence. Exit status: 0 done, 1 the Api
refused or could not be reached (or, for ``watch``, the run did not succeed), 2 the CLI
cannot be set up (no credentials, no region, no such stack, a malformed argument).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from durable_agents.core.clock import SystemClock
from durable_agents.core.models import RunStatus
from durable_agents_local import runs_flow, runs_migrate, runs_rerun
from durable_agents_local.cli.api_client import (
    ApiClient,
    ApiConfigError,
    ApiError,
    connect,
    field_errors,
    is_local,
)
from durable_agents_local.cli.api_client import segment as seg
from durable_agents_local.cli.tables import (
    approvals_table,
    escape_controls,
    escape_strings,
    history_table,
    operations,
    reviews_table,
    run_details,
    runs_table,
    timeline_table,
)
from durable_agents_local.cli.watch import Watch, WatchTimeoutError, exit_code, outcome
from durable_agents_local.runs_stop import ACTIONS as STOPS
from durable_agents_local.runs_stop import describe as describe_stop

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
APPROVAL_STATES = ("pending", "approved", "rejected", "expired")
REVIEW_DECISIONS = ("committed", "retry", "abandon")
STATUSES = tuple(status.value for status in RunStatus)
_RELATIVE = re.compile(r"(\d+)([smhdw])")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since(text: str, now: datetime | None = None) -> str:
    """``--since``: an ISO date or time, or a span back from ``now`` (``30m``, ``2h``, ``3d``).

    Spans: ``s``, ``m``, ``h``, ``d``, ``w``. The answer is the ISO UTC time the Api writes
    (``2026-12-01T18:00:00.000+00:00``).

    Raises:
        argparse.ArgumentTypeError: If ``text`` is neither.
    """
    match = _RELATIVE.fullmatch(text.strip())
    if match:
        delta = timedelta(**{_UNIT[match.group(2)]: int(match.group(1))})
        at = (now or datetime.fromtimestamp(SystemClock().now_ms() / 1000, tz=UTC)) - delta
    else:
        try:
            at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"expected an ISO date/time or a span like 30m, 2h, 3d; got {text!r}"
            ) from exc
        at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return at.astimezone(UTC).isoformat(timespec="milliseconds")


def _json_arg(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {text[:60]!r} ({exc})") from exc


def add_connection(
    parser: argparse.ArgumentParser,
    *,
    top: bool,
    url: Callable[[str], str],
    caller: Callable[[str], str],
) -> None:
    """``--api-url/--stack/--region/--profile/--caller-arn`` on ``parser``.

    On the top-level parser they carry the defaults; on each command they are SUPPRESSed so
    that an option given after the command overrides one given before it, and one not given
    leaves it alone.
    """

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("where the Api is (default: local mode on :3000)")
    group.add_argument(
        "--api-url",
        *(() if top else ("--api",)),
        dest="api_url",
        type=url,
        default=default(None),
        metavar="URL",
        help="the Api's base URL (a deployment's, with its stage)",
    )
    group.add_argument("--stack", default=default(None), help="a deployed stack: its ApiUrl output")
    group.add_argument(
        "--region", default=default(None), help="the stack's region (and to sign for)"
    )
    group.add_argument(
        "--profile", default=default(None), help="the AWS profile whose credentials sign"
    )
    group.add_argument(
        "--caller-arn",
        type=caller,
        default=default(None),
        metavar="ARN",
        help="local mode only: the IAM caller to act as (X-Local-Caller-Arn)",
    )


def add_commands(
    runs: Any, commands: Any, url: Callable[[str], str], caller: Callable[[str], str]
) -> None:
    """Adds the Api's commands: to ``runs`` (its sub-commands) and ``approvals``/``reviews``.

    ``url`` and ``caller`` check ``--api-url`` and ``--caller-arn``.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the Api's JSON")
    add_connection(common, top=False, url=url, caller=caller)

    listing = runs.add_parser("list", parents=[common], help="list runs, newest first")
    listing.add_argument("--status", type=str.upper, choices=STATUSES)
    listing.add_argument("--agent", help="only runs of this agent")
    listing.add_argument("--version", help="only runs pinned to this workflow version")
    listing.add_argument(
        "--since", type=since, help="only runs created since: ISO date/time, or 30m, 2h, 3d"
    )
    listing.add_argument("--limit", type=int, default=50, help="at most this many (≤ 100)")
    listing.add_argument("--cursor", help="the next page (a listing's cursor)")
    for name, text in (
        ("show", "show one run"),
        ("history", "a run's history: offset, event, operation, attempt"),
        ("timeline", "a run's operations: kind, name, attempts, duration, status, deadline"),
        ("redrive", "resume a PAUSED run or nudge a stalled one"),
    ):
        one = runs.add_parser(name, parents=[common], help=text)
        one.add_argument("run_id")
        if name in ("history", "timeline"):  # a run that continued as new (ADR 0016)
            one.add_argument("--generation", type=int, help="an earlier generation's journal")
    for name, text in STOPS.items():
        stop = runs.add_parser(name, parents=[common], help=text)
        stop.add_argument("run_id")
        stop.add_argument("--reason", default="", help="why (recorded; the agent sees it)")
    runs_migrate.add_command(runs, [common])
    runs_flow.add_budget_command(runs, [common])
    runs_rerun.add_command(runs, [common], when=since)
    event = runs.add_parser(
        "send-event", parents=[common], help="send a named event (a message) to a run"
    )
    event.add_argument("run_id")
    event.add_argument("name", help="the event's name (what the agent waits for)")
    event.add_argument("--data", type=_json_arg, default=None, help="the payload, as JSON")
    event.add_argument(
        "--event-id", help="an id (the Idempotency-Key): sent again, it is recorded once"
    )
    watch = runs.add_parser(
        "watch", parents=[common], help="follow a run until it ends (exit 0: it succeeded)"
    )
    watch.add_argument("run_id")
    watch.add_argument("--timeout", type=float, metavar="SECONDS", help="give up after this")

    runs_flow.add_flow_command(commands, [common])

    approvals = commands.add_parser("approvals", help="list or decide approvals (IAM)")
    on_approvals = approvals.add_subparsers(dest="action", required=True, metavar="ACTION")
    listed = on_approvals.add_parser("list", parents=[common], help="approvals, oldest first")
    listed.add_argument("--status", type=str.lower, choices=APPROVAL_STATES, default="pending")
    listed.add_argument("--agent", help="only approvals of this agent's runs")
    _paging(listed)
    decide = on_approvals.add_parser("decide", parents=[common], help="approve or reject")
    decide.add_argument("approval_id")
    decide.add_argument("decision", choices=("approve", "reject"))
    decide.add_argument("--comment", default="")

    reviews = commands.add_parser("reviews", help="list or decide tool calls in review")
    on_reviews = reviews.add_subparsers(dest="action", required=True, metavar="ACTION")
    _paging(on_reviews.add_parser("list", parents=[common], help="tool calls waiting for a person"))
    settle = on_reviews.add_parser("decide", parents=[common], help="settle a call in review")
    settle.add_argument("operation_id")
    settle.add_argument("decision", choices=REVIEW_DECISIONS)
    settle.add_argument("--comment", default="")
    settle.add_argument("--result", type=_json_arg, help="committed: the call's result (JSON)")
    settle.add_argument("--external-id", help="committed: the provider's id of the call")


def _paging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=100, help="at most this many (≤ 100)")
    parser.add_argument("--cursor", help="the next page (a listing's cursor)")


def _more(page: dict[str, Any]) -> str:
    """The line that says how to get the next page (a page may be short and still have one)."""
    cursor = page.get("cursor")
    return f"\nmore: --cursor {escape_controls(str(cursor))}" if cursor else ""


def _width() -> int:
    return min(shutil.get_terminal_size((80, 24)).columns, 200)


def _runs(client: ApiClient, args: argparse.Namespace) -> tuple[Any, str]:
    width = _width()
    if args.action == "list":
        query = {"status": args.status, "agent": args.agent, "version": args.version,
                 "since": args.since, "limit": args.limit, "cursor": args.cursor}  # fmt: skip
        page = client.call("GET", "/runs", query=query)
        return page, runs_table(page.get("runs") or [], width) + _more(page)
    path, missing = f"/runs/{seg(args.run_id)}", f"run {args.run_id}"
    if args.action == "show":
        run = client.call("GET", path, missing=missing)
        return run, run_details(run, width)
    if args.action in ("history", "timeline"):
        query = {"generation": args.generation}
        answer = client.call("GET", f"{path}/history", query=query, missing=missing)
        events = answer.get("events") or []
        if args.action == "history":
            return {"run_id": args.run_id, "events": events}, history_table(events, width)
        ops = operations(events)
        return {"run_id": args.run_id, "operations": ops}, timeline_table(args.run_id, ops, width)
    if args.action == "redrive":
        run = client.call("POST", f"{path}/redrive", missing=missing)
        status = escape_controls(str(run["status"]))
        return run, f"re-driven: {args.run_id} is {status}; a Step Ready event is on its way"
    # The describes below do not escape: they are given the answer with its strings escaped
    # (a line break of the Api's would otherwise pass as one of theirs).
    if args.action == "migrate":
        body = {"to_version": args.to, "dry_run": args.dry_run}
        answer = client.call("POST", f"{path}/migrate", body=body, missing=missing)
        return answer, runs_migrate.describe(escape_strings(answer))
    if args.action == "budget":
        body = runs_flow.budget_body(args)
        answer = client.call("POST", f"{path}/budget", body=body, missing=missing)
        return answer, runs_flow.describe_budget(escape_strings(answer))
    if args.action in STOPS:
        body = {"reason": args.reason}
        run = client.call("POST", f"{path}/{args.action}", body=body, missing=missing)
        return run, describe_stop(escape_strings(run))
    # The body is the payload itself; the event id is the Idempotency-Key (sent again, the
    # same event: recorded once).
    key = {"Idempotency-Key": args.event_id} if args.event_id else None
    answer = client.call(
        "POST", f"{path}/events/{seg(args.name)}", body=args.data, missing=missing, headers=key
    )
    again = " (already recorded: sent before with this id)" if answer.get("duplicate") else ""
    return answer, f"event {args.name!r} sent to {args.run_id}{again}"


def _approvals(client: ApiClient, args: argparse.Namespace) -> tuple[Any, str]:
    if args.action == "list":
        query = {"status": args.status, "limit": args.limit, "cursor": args.cursor}
        page = client.call("GET", "/approvals", query=query)
        found = page.get("approvals") or []
        if args.agent:  # the Api lists by status only; the agent is in each approval
            found = [a for a in found if a.get("agent") == args.agent]
        answer = {"approvals": found, "cursor": page.get("cursor")}
        return answer, approvals_table(found, _width()) + _more(page)
    body = {"decision": args.decision, "comment": args.comment}
    path = f"/approvals/{seg(args.approval_id)}"
    decided = client.call("POST", path, body=body, missing=f"approval {args.approval_id}")
    status = escape_controls(str(decided.get("status", args.decision)))
    return decided, f"{args.approval_id}: {status}"


def _reviews(client: ApiClient, args: argparse.Namespace) -> tuple[Any, str]:
    if args.action == "list":
        page = client.call("GET", "/reviews", query={"limit": args.limit, "cursor": args.cursor})
        return page, reviews_table(page.get("reviews") or [], _width()) + _more(page)
    body: dict[str, Any] = {"decision": args.decision, "comment": args.comment}
    if args.result is not None:
        body["result"] = args.result
    if args.external_id:
        body["external_id"] = args.external_id
    path = f"/reviews/{seg(args.operation_id)}"
    record = client.call("POST", path, body=body, missing=f"call in review {args.operation_id}")
    return record, f"{args.operation_id}: {escape_controls(str(record.get('status')))}"


def _flow(client: ApiClient, args: argparse.Namespace) -> tuple[Any, str]:
    overview = client.call("GET", "/flow")
    return overview, runs_flow.flow_tables(overview, _width())


def _watch(client: ApiClient, args: argparse.Namespace) -> int:
    # With --json stdout holds only the run's JSON: the progress goes to stderr.
    out = sys.stderr if args.json else sys.stdout
    watch = Watch(client, args.run_id, out, tty=out.isatty(), width=_width(), timeout=args.timeout)
    try:
        run = watch.run()
    except ApiError:
        watch.interrupted()
        raise
    except KeyboardInterrupt:
        watch.interrupted()
        print(f"stopped watching; the run goes on: {args.run_id}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except WatchTimeoutError as exc:
        print(f"error: {escape_controls(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(run, indent=2) if args.json else outcome(run, watch.width))
    return exit_code(run)


def command(args: argparse.Namespace) -> int:
    """Runs one of the Api's commands (``args.command``: runs, approvals, reviews or flow)."""
    rerun = args.command == "runs" and args.action == "rerun"
    if rerun:  # a usage error (a malformed --input) is said before anything is asked
        try:
            runs_rerun.body(args)
        except runs_rerun.RerunUsageError as exc:
            print(f"error: {escape_controls(str(exc))}", file=sys.stderr)
            return EXIT_USAGE
    try:
        client = connect(
            api_url=args.api_url,
            stack=args.stack,
            region=args.region,
            profile=args.profile,
            caller_arn=args.caller_arn,
        )
    except ApiConfigError as exc:
        print(f"error: {escape_controls(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    handlers = {"runs": _runs, "approvals": _approvals, "reviews": _reviews, "flow": _flow}
    try:
        if args.command == "runs" and args.action == "watch":
            return _watch(client, args)
        if rerun:  # it prints as it goes (a bulk rerun's progress), and may be interrupted
            return runs_rerun.command(client, args, _width())
        data, text = handlers[args.command](client, args)
    except ApiError as exc:
        hint = ""
        if is_local(client.base_url) and exc.status is None:
            hint = "; start local mode first (durable-agents local), or pass --stack/--api-url"
        # An ApiError's message escapes the Api's text already; this keeps any other part
        # (an OS error's reason) from reaching the terminal raw as well. A refusal's field
        # errors (a 422's), escaped by field_errors, follow on lines of their own.
        details = "".join(f"\n  {line}" for line in field_errors(exc.body))
        print(f"error: {escape_controls(str(exc))}{hint}{details}", file=sys.stderr)
        return EXIT_ERROR
    # json.dumps escapes every control character (ensure_ascii: C1 and bidi too). The text's
    # parts from the Api were escaped where it was built; its own line breaks stay.
    print(json.dumps(data, indent=2) if args.json else escape_controls(text, keep_newlines=True))
    return 0
