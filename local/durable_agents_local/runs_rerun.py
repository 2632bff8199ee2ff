"""``durable-agents runs rerun``: re-run one finished run, or every run a filter matches.

A rerun is a new run of the same agent that replays the original's records before the chosen
operation and may reuse the side effects the original already made
(``durable_agents.engine.reruns``). It needs the deployed agents, which the Api's function has
loaded and the CLI has not, so the command asks the Api, as ``runs migrate`` does:

* ``runs rerun RUN_ID``: ``POST /runs/{run_id}/rerun``; prints the side effects the rerun may
  reuse (or, with ``--repeat-effects``, makes again) first, then the new run.
* ``runs rerun --agent A``: ``POST /runs/rerun`` page by page until its cursor is null, after
  counting the matching runs (``GET /runs``) so that a progress bar can show how far it is
  (on stderr, when that is a terminal; a plain line per page otherwise); then a table, one
  line per run, and the totals per outcome.

Here: its arguments, the requests, and what it prints. What it prints of the Api's text has
its control characters escaped (``cli.tables.escape_controls``): run data is anyone's text.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from durable_agents.core.models import RunStatus
from durable_agents_local.cli.api_client import ApiClient, ApiError
from durable_agents_local.cli.api_client import segment as seg
from durable_agents_local.cli.tables import compact, escape_controls, escape_strings, fit_table
from durable_agents_local.runs_start import InputSyntaxError, parse_input

EXIT_INTERRUPTED = 130
OUTCOMES = ("started", "existing", "planned", "refused", "skipped")
MAX_BULK_LIMIT = 25  # the Api's (functions/api/routes/reruns.py): a page stays within 29 s
COUNT_PAGE = 100  # GET /runs's largest page: the fewest requests to count the matches
STATUSES = tuple(status.value for status in RunStatus)
_INPUT_HINT = "INPUT is not valid JSON"


class RerunUsageError(ValueError):
    """The arguments do not make a rerun request (the message says which and why)."""


def body(args: argparse.Namespace) -> dict[str, Any]:
    """The body of ``POST /runs/{run_id}/rerun``, or with ``--agent`` of ``POST /runs/rerun``.

    Only what was given is sent (the Api's defaults for the rest), but ``from`` always, and
    ``status`` always for a bulk rerun: the runs counted (``GET /runs``) are the ones matched.

    Raises:
        RerunUsageError: If RUN_ID and ``--agent`` are both given or neither is, an option of
            the other form is given (``--input`` with ``--agent``; ``--status``, ``--since``,
            ``--until`` or ``--limit`` with RUN_ID), ``--limit`` is out of range, or
            ``--input`` looks like JSON and does not parse (the parser's line and column).
    """
    if args.run_id is not None and args.agent is not None:
        raise RerunUsageError("give RUN_ID (one run) or --agent (a filter's runs), not both")
    if args.run_id is None and args.agent is None:
        raise RerunUsageError("give RUN_ID (one run) or --agent A (every run a filter matches)")
    sent: dict[str, Any] = {"from": args.from_}
    if args.version is not None:
        sent["version"] = args.version
    sent |= {"repeat_effects": args.repeat_effects, "dry_run": args.dry_run}
    bulk_only = {"--status": args.status, "--since": args.since, "--until": args.until,
                 "--limit": args.limit}  # fmt: skip
    if args.run_id is not None:
        given = [name for name, value in bulk_only.items() if value is not None]
        if given:
            raise RerunUsageError(f"{', '.join(given)}: only with --agent (a bulk rerun)")
        if args.input is not None:
            try:
                sent["input"] = parse_input(args.input)
            except InputSyntaxError as exc:
                # parse_input speaks of INPUT (runs start's argument): here it is --input.
                shown = str(exc).replace(_INPUT_HINT, "--input is not valid JSON")
                raise RerunUsageError(shown) from exc
        return sent
    if args.input is not None:
        raise RerunUsageError("--input replaces one run's input: give RUN_ID, not --agent")
    if args.limit is not None and not 1 <= args.limit <= MAX_BULK_LIMIT:
        raise RerunUsageError(f"--limit must be between 1 and {MAX_BULK_LIMIT}")
    sent |= {"agent": args.agent, "status": args.status or RunStatus.FAILED.value}
    for name in ("since", "until", "limit"):
        if getattr(args, name) is not None:
            sent[name] = getattr(args, name)
    return sent


def _effects(answer: Mapping[str, Any]) -> tuple[bool, list[Any]]:
    """Whether the effects are repeated (else reusable), and the list (the Api's key says)."""
    if "repeated_effects" in answer:
        return True, list(answer.get("repeated_effects") or [])
    return False, list(answer.get("reusable_effects") or [])


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def effects_lines(
    effects: Sequence[Mapping[str, Any]], repeated: bool, width: int, *, by_run: bool = False
) -> list[str]:
    """The side effects a rerun repeats or may reuse: a heading, and a table under it.

    The operation ids (and with ``by_run`` the run ids) are never cut; the request is compact
    JSON, cut to what fits. Cells are escaped by ``fit_table``.
    """
    count = _plural(len(effects), "side effect")
    heading = (
        f"will repeat {count} (--repeat-effects: each is made again):"
        if repeated
        else f"may reuse {count} (already made; not made again while its request is the same):"
    )
    if not effects:
        return [f"no side effect to {'repeat' if repeated else 'reuse'}"]
    headers = ["TOOL", "OPERATION ID", "REQUEST"]
    rows = [
        [str(e.get("tool", "")), str(e.get("operation_id", "")), compact(e.get("request"))]
        for e in effects
    ]
    keep: tuple[int, ...] = (1,)
    if by_run:
        headers = ["RERUN OF", *headers]
        rows = [[str(e.get("run_id", "")), *row] for e, row in zip(effects, rows, strict=True)]
        keep = (0, 2)
    table = fit_table(headers, rows, width - 2, keep=keep)
    return [heading, *(f"  {line}" for line in table.splitlines())]


def describe(answer: Mapping[str, Any], width: int) -> str:
    """A rerun's answer for a person: the side effects first, then the new run (or the plan).

    Takes the Api's answer as it is: every part of it is escaped here.
    """
    repeated, effects = _effects(answer)
    lines = effects_lines(effects, repeated, width)
    shown = escape_strings(answer)
    plan = shown.get("rerun") or {}
    copied = _plural(int(plan.get("copied_operations") or 0), "operation")
    chain = ", ".join(str(c) for c in plan.get("chain") or []) or "-"
    if answer.get("dry_run"):
        lines += [
            f"dry run: nothing was started; a rerun of {plan.get('rerun_of')} from "
            f"{plan.get('rerun_from')} would copy {copied} (chain: {chain})",
        ]
        return "\n".join(lines)
    run = shown.get("run") or {}
    version = (run.get("versions") or {}).get("workflow_version", "?")
    verb = "started" if answer.get("created") else "already started by the same request:"
    lines += [
        f"{verb} {run.get('run_id')} (status {run.get('status')}, version {version})",
        f"  rerun_of: {run.get('rerun_of', plan.get('rerun_of'))}",
        f"  rerun_from: {run.get('rerun_from', plan.get('rerun_from'))}",
        f"  copied operations: {plan.get('copied_operations', 0)} (chain: {chain})",
    ]
    return "\n".join(lines)


def _note(result: Mapping[str, Any]) -> str:
    """The NOTE of a bulk result: the refusal's message, the reason, or what it did."""
    outcome = result.get("outcome")
    plan = result.get("rerun") or {}
    if outcome == "refused":
        error = result.get("error") or {}
        return str(error.get("message") if isinstance(error, Mapping) else error)
    if outcome == "skipped":
        return str(result.get("reason") or "")
    if outcome == "planned":
        return f"would re-run from {plan.get('rerun_from')}"
    if outcome == "existing":
        return f"re-run before with these options ({result.get('status')})"
    return f"from {plan.get('rerun_from')} ({result.get('status')})"


def counts(results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many results of each outcome (counted here, so they always add up to the table)."""
    return {o: sum(r.get("outcome") == o for r in results) for o in OUTCOMES}


def _totals(tally: Mapping[str, int]) -> str:
    said = [f"{o} {n}" for o, n in tally.items() if n]
    return ", ".join(said) or "nothing"


def describe_bulk(answer: Mapping[str, Any], width: int) -> str:
    """A bulk rerun's answer: the side effects, one line per run, and the totals per outcome.

    Takes the Api's answer (all pages' results) as it is: every part of it is escaped here.
    """
    results: list[Mapping[str, Any]] = list(answer.get("results") or [])
    if not results:
        return "no run matched: nothing to re-run"
    lines: list[str] = []
    effects: list[Mapping[str, Any]] = []
    repeated = False
    for result in results:
        repeated, found = _effects(result)
        effects += [{**e, "run_id": result.get("run_id")} for e in found]
    if any(r.get("outcome") in ("started", "existing", "planned") for r in results):
        lines += [*effects_lines(effects, repeated, width, by_run=True), ""]
    rows = [
        [str(r.get("run_id", "")), str(r.get("outcome", "")), str(r.get("rerun_run_id") or ""),
         _note(r)]
        for r in results
    ]  # fmt: skip
    headers = ["RUN ID", "OUTCOME", "RERUN RUN ID", "NOTE"]
    lines.append(fit_table(headers, rows, width, keep=(0, 2)))
    # A refusal's message says what to fix; a narrow table cuts it, so it is said whole here.
    refused = [r for r in results if r.get("outcome") == "refused"]
    if refused:
        lines.append("refused:")
        lines += [f"  {escape_controls(str(r.get('run_id')))}: {escape_controls(_note(r))}"
                  for r in refused]  # fmt: skip
    tally = _totals(counts(results))
    if answer.get("dry_run"):
        lines.append(f"dry run: nothing was started; {_plural(len(results), 'run')}: {tally}")
    else:
        lines.append(f"{_plural(len(results), 'run')}: {tally}")
    return "\n".join(lines)


@dataclass
class Progress:
    """How far a bulk rerun is: a bar redrawn in place on a terminal, else a line per page.

    Attributes:
        out: Where it goes (stderr: stdout is the table, or the JSON).
        tty: Redraw one line in place (else print a line per page).
        total: The runs counted before the first page (more may match by the end).
        width: The terminal's width (the bar's line stays shorter).
    """

    out: TextIO
    tty: bool
    total: int
    width: int = 80
    done_runs: int = field(default=0, init=False)
    pages: int = field(default=0, init=False)
    drawn: bool = field(default=False, init=False)

    def page(self, runs: int, tally: Mapping[str, int]) -> None:
        """One more page: ``runs`` results, ``tally`` the outcomes so far (all pages)."""
        self.done_runs += runs
        self.pages += 1
        # A run that failed while the pages were read matches too: the total grows with it.
        total = max(self.total, self.done_runs)
        said = ", ".join(f"{o} {tally[o]}" for o in OUTCOMES if tally.get(o))
        text = f"{self.done_runs}/{total} runs" + (f" ({said})" if said else "")
        if not self.tty:
            print(f"page {self.pages}: {text}", file=self.out, flush=True)
            return
        room = self.width - 1 - len(text) - 3  # "[" "]" " ", and never the last column
        bar = ""
        if room >= 10:
            size = min(room, 40)
            filled = size * self.done_runs // total if total else size
            bar = f"[{'#' * filled}{'.' * (size - filled)}] "
        line = (bar + text)[: self.width - 1]
        self.out.write("\r" + line.ljust(self.width - 1))
        self.out.flush()
        self.drawn = True

    def done(self) -> None:
        """Ends the bar's line (a terminal's next output starts on a line of its own)."""
        if self.drawn:
            self.out.write("\n")
            self.out.flush()
            self.drawn = False


def count_matches(client: ApiClient, sent: Mapping[str, Any]) -> int:
    """How many runs the bulk filter matches now (``GET /runs``, every page).

    Raises:
        ApiError: If the Api refuses or cannot be reached.
    """
    query: dict[str, str | int | None] = {
        name: sent.get(name) for name in ("agent", "status", "since", "until")
    }
    query["limit"] = COUNT_PAGE
    total, cursor = 0, None
    while True:
        page = client.call("GET", "/runs", query={**query, "cursor": cursor})
        total += len(page.get("runs") or [])
        cursor = _next(page, cursor, "GET /runs")
        if cursor is None:
            return total


def _next(page: Mapping[str, Any], sent: str | None, what: str) -> str | None:
    """The page's cursor; one the same as the one sent would page forever.

    Raises:
        ApiError: If the Api answered the cursor it was sent.
    """
    cursor = page.get("cursor")
    if cursor is not None and cursor == sent:
        raise ApiError(f"{what} answered the cursor it was sent: stopped (it would never end)")
    return None if cursor is None else str(cursor)


class RerunInterruptedError(Exception):
    """Ctrl-C during a bulk rerun (the message says what was done and how to go on)."""


def rerun_many(
    client: ApiClient,
    sent: Mapping[str, Any],
    progress_to: TextIO,
    width: int,
    *,
    as_json: bool = False,
) -> dict[str, Any]:
    """Every page of ``POST /runs/rerun``, after counting the matches for the progress.

    Args:
        client: The Api.
        sent: The request's body (``body``), without the cursor.
        progress_to: Where the progress goes (a bar if it is a terminal).
        width: The terminal's width.
        as_json: How what earlier pages did is printed if a later one fails: as JSON.

    Returns:
        One answer for all the pages: ``dry_run``, every ``results``, their ``counts`` and a
        null ``cursor``.

    Raises:
        ApiError: If the Api refuses or cannot be reached (what earlier pages did is printed
            on stdout first: those reruns were made).
        RerunInterruptedError: On Ctrl-C (what earlier pages did is printed first).
    """
    results: list[dict[str, Any]] = []

    def answer() -> dict[str, Any]:
        tally = counts(results)
        return {"dry_run": sent["dry_run"], "results": results, "cursor": None, "counts": tally}

    progress: Progress | None = None
    try:
        total = count_matches(client, sent)
        progress = Progress(progress_to, tty=progress_to.isatty(), total=total, width=width)
        cursor: str | None = None
        while True:
            paged = {**sent, "cursor": cursor} if cursor else sent
            page = client.call("POST", "/runs/rerun", body=paged)
            found = list(page.get("results") or [])
            results.extend(found)
            progress.page(len(found), counts(results))
            cursor = _next(page, cursor, "POST /runs/rerun")
            if cursor is None:
                progress.done()
                return answer()
    except (ApiError, KeyboardInterrupt) as exc:
        if progress is not None:
            progress.done()
        if results:  # made already: said, or the person would not know which
            shown = describe_bulk(answer(), width)
            print(
                json.dumps(answer(), indent=2)
                if as_json
                else escape_controls(shown, keep_newlines=True)
            )
        if isinstance(exc, KeyboardInterrupt):
            # The Api knows a bulk request again by its filter (its times included): a span
            # (--since 1d) is another time at the next command, so the times sent are said.
            times = " ".join(f"--{n} {sent[n]}" for n in ("since", "until") if n in sent)
            again = f" with {times}" if times else ""
            raise RerunInterruptedError(
                f"stopped after {_plural(len(results), 'run')}; the same command again"
                f"{again} goes on where this one stopped (each run is re-run once)"
            ) from exc
        raise


def command(client: ApiClient, args: argparse.Namespace, width: int) -> int:
    """Runs ``runs rerun`` (one run, or with ``--agent`` a filter's) and prints the outcome.

    ``--json`` prints the Api's answer (a bulk rerun's pages as one answer); the progress of a
    bulk rerun goes to stderr either way.

    Returns:
        0 once answered (a bulk rerun's refused runs are in its table), 130 on Ctrl-C.

    Raises:
        RerunUsageError: See ``body`` (``cli.remote`` checks it before connecting).
        ApiError: If the Api refuses (a 409: not finished; 400: no such operation; 404: no
            such run) or cannot be reached.
    """
    sent = body(args)
    if args.run_id is None:
        try:
            answer = rerun_many(client, sent, sys.stderr, width, as_json=args.json)
        except RerunInterruptedError as exc:
            print(escape_controls(str(exc)), file=sys.stderr)
            return EXIT_INTERRUPTED
        text = describe_bulk(answer, width)
    else:
        path = f"/runs/{seg(args.run_id)}/rerun"
        answer = client.call("POST", path, body=sent, missing=f"run {args.run_id}")
        text = describe(answer, width)
    # json.dumps escapes every control character; the text's parts from the Api were escaped
    # where it was built, its own line breaks stay.
    print(json.dumps(answer, indent=2) if args.json else escape_controls(text, keep_newlines=True))
    return 0


def add_command(actions: Any, parents: list[Any], *, when: Callable[[str], str]) -> None:
    """Adds ``rerun`` to the ``runs`` sub-commands.

    Args:
        actions: The ``runs`` sub-parsers.
        parents: ``--json``, where the Api is.
        when: Reads ``--since``/``--until`` (an ISO time, or a span back like ``1d``) as the
            ISO UTC time the Api takes (``cli.remote.since``; passed in: it imports this).
    """
    rerun = actions.add_parser(
        "rerun",
        parents=parents,
        help="re-run a finished run, or every run a filter matches (through the Api)",
        description="POST /runs/{run_id}/rerun: a new run of the same agent that replays the "
        "original's records before --from and may reuse the side effects it made (listed "
        "first; --repeat-effects makes them again). With --agent instead of RUN_ID: POST "
        "/runs/rerun for every run the filter matches, page by page, each re-run once "
        "however often the command is run. --dry-run says what would happen, starts nothing.",
    )
    rerun.add_argument("run_id", nargs="?", metavar="RUN_ID", help="the run to re-run")
    rerun.add_argument(
        "--from",
        dest="from_",
        default="failed",
        metavar="NAME|failed|start",
        help="an operation as `runs timeline` shows it (charge:2), start, or failed (the "
        "operation that failed or never finished; the default)",
    )
    rerun.add_argument("--version", help="the agent version to run (default: the deployed one)")
    rerun.add_argument(
        "--input",
        metavar="JSON",
        help="RUN_ID only: a replacement input, as JSON (text that is not JSON is a string)",
    )
    rerun.add_argument(
        "--repeat-effects",
        action="store_true",
        help="make the recorded side effects again instead of reusing them (try --dry-run)",
    )
    rerun.add_argument("--dry-run", action="store_true", help="say what would happen only")
    bulk = rerun.add_argument_group("a filter's runs (instead of RUN_ID)")
    bulk.add_argument("--agent", help="re-run this agent's runs")
    bulk.add_argument(
        "--status", type=str.upper, choices=STATUSES, help="the runs' status (default FAILED)"
    )
    bulk.add_argument("--since", type=when, help="started since: ISO date/time, or 30m, 6h, 1d")
    bulk.add_argument("--until", type=when, help="started before: ISO date/time, or a span")
    bulk.add_argument(
        "--limit",
        type=int,
        help=f"runs per request (1-{MAX_BULK_LIMIT}, default 10); every page is re-run",
    )
