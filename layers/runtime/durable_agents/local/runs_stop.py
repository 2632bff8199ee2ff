"""``durable-agents runs cancel|terminate RUN_ID --reason ...``: stop a run through the local Api.

Like ``runs migrate``, the command asks local mode's Api (``POST /runs/{run_id}/cancel`` or
``/terminate``) exactly as a client of a deployment would: the Api records the request and
wakes the run; local mode's StepRunner then ends it (``durable_agents.cancellation``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from durable_agents.local.runs_start import post_run_action

EXIT_ERROR = 1
ACTIONS = {
    "cancel": "ask a run to stop: its agent sees RunCancelledError and may clean up",
    "terminate": "stop a run at once, without running its agent code again",
}


class RunStopError(Exception):
    """The Api refused the request or could not be reached (the message says why)."""


def stop_run(api: str, run_id: str, action: str, *, reason: str) -> dict[str, Any]:
    """Asks the Api to cancel or terminate ``run_id``.

    Args:
        api: The Api's base URL.
        run_id: The run to stop.
        action: ``cancel`` or ``terminate``.
        reason: Why (recorded with the request; the agent sees it).

    Returns:
        The run as the Api answered it (its ``cancel_requested`` holds the request).

    Raises:
        RunStopError: If nothing answers at ``api``, or it refuses (with its message).
    """
    body = {"reason": reason}
    return post_run_action(api, run_id, action, body, ok=202, error=RunStopError)


def describe(run: dict[str, Any]) -> str:
    """One line: what was asked of the run, and its status now."""
    request = run.get("cancel_requested") or {}
    return (
        f"{run['run_id']}: {request.get('mode', '?')} requested by {request.get('by', '?')}"
        f" ({request.get('reason') or 'no reason given'}); status now {run['status']}"
    )


def add_commands(actions: Any, url: Callable[[str], str]) -> None:
    """Adds ``cancel`` and ``terminate`` to the ``runs`` sub-commands (``url`` checks ``--api``)."""
    for name, text in ACTIONS.items():
        parser = actions.add_parser(
            name,
            help=f"{text} (through the local Api)",
            description=f"POST /runs/{{run_id}}/{name} to the Api local mode serves: {text}.",
        )
        parser.add_argument("run_id")
        parser.add_argument("--reason", default="", help="why (recorded; the agent sees it)")
        parser.add_argument("--api", type=url, default="http://127.0.0.1:3000")
        parser.add_argument("--json", action="store_true", help="print the Api's answer as JSON")


def command(args: argparse.Namespace) -> int:
    """``durable-agents runs cancel|terminate``: 0 when the Api recorded the request, else 1."""
    try:
        run = stop_run(args.api, args.run_id, args.action, reason=args.reason)
    except RunStopError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(run, indent=2) if args.json else describe(run))
    return 0
