"""``durable-agents runs watch RUN_ID``: follow a run until it ends, one progress line.

The Api has no long-poll, so the watcher polls ``GET /runs/{id}`` and its history: every
``MIN_INTERVAL`` seconds while something changes, backing off (doubling) to ``MAX_INTERVAL``
while nothing does. On a terminal the progress line is rewritten in place (a carriage
return); anywhere else a plain line is printed each time the progress changes. A
network blip is retried (``MAX_UNREACHABLE`` polls in a row); a 403 or 404 ends the watch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from durable_agents_local.cli.api_client import ApiClient, ApiUnreachableError, segment
from durable_agents_local.cli.tables import (
    clip,
    compact,
    duration,
    escape_controls,
    operations,
    seconds_between,
)

MIN_INTERVAL = 0.5
MAX_INTERVAL = 5.0
MAX_UNREACHABLE = 5
SUCCESS = ("SUCCEEDED",)
ENDED_BADLY = ("FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT")
# Not over, but nothing happens until an operator acts (a fix deployed, a migration).
NEEDS_OPERATOR = ("PAUSED", "VERSION_UNAVAILABLE", "BUDGET_EXCEEDED")


class WatchTimeoutError(Exception):
    """``--timeout`` ran out before the run ended (carries the last status)."""

    def __init__(self, run_id: str, status: str, seconds: float):
        # The status is the Api's text, printed: shown with its control characters escaped.
        shown = escape_controls(f"{run_id} is still {status}")
        super().__init__(f"{shown} after {seconds:g}s")
        self.status = status


@dataclass
class Watch:
    """One watch of a run.

    Attributes:
        client: The Api.
        run_id: The run.
        out: Where the progress goes.
        tty: Rewrite one line in place (else print a line per change).
        width: The terminal's width (lines are clipped to it).
        timeout: Give up after this many seconds (None: never).
        sleep: ``time.sleep`` (tests pass a fake).
        monotonic: ``time.monotonic``.
    """

    client: ApiClient
    run_id: str
    out: TextIO
    tty: bool
    width: int = 80
    timeout: float | None = None
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    last_line: str = field(default="", init=False)
    hinted: set[str] = field(default_factory=set, init=False)

    def run(self) -> dict[str, Any]:
        """Polls until the run ends (or needs an operator) and returns it as last seen.

        Raises:
            ApiError: If the Api refuses (no such run, not allowed) or stays unreachable.
            WatchTimeoutError: If ``timeout`` seconds pass first.
        """
        started = self.monotonic()
        interval, unreachable, shown = MIN_INTERVAL, 0, ""
        while True:
            try:
                run, events = self._poll()
                unreachable = 0
            except ApiUnreachableError:
                unreachable += 1
                if unreachable >= MAX_UNREACHABLE:
                    raise
                self.sleep(min(interval * 2**unreachable, MAX_INTERVAL))
                continue
            state = progress(run, events, self.monotonic() - started)
            changed = state.without_clock != shown
            interval = MIN_INTERVAL if changed else min(interval * 2, MAX_INTERVAL)
            shown = state.without_clock
            self._show(state.line, changed=changed)
            hint = approval_hint(run)
            if hint is not None and hint not in self.hinted:
                self._note(hint)
            if run["status"] in SUCCESS + ENDED_BADLY + NEEDS_OPERATOR:
                self._end()
                return run
            if self.timeout is not None and self.monotonic() - started >= self.timeout:
                self._end()
                raise WatchTimeoutError(self.run_id, str(run["status"]), self.timeout)
            self.sleep(interval)

    def _poll(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        path = f"/runs/{segment(self.run_id)}"
        # The history first: the status read after it is never behind it (a run seen
        # SUCCEEDED ends the watch; its history may lag by a poll, not the other way round).
        history = self.client.call("GET", f"{path}/history", missing=f"run {self.run_id}")
        run = self.client.call("GET", path, missing=f"run {self.run_id}")
        return run, list(history.get("events") or [])

    def _show(self, line: str, *, changed: bool) -> None:
        line = clip(line, self.width - 1)
        if self.tty:
            # Pad over what the previous (longer) line left on screen.
            self.out.write("\r" + line.ljust(len(self.last_line)))
            self.out.flush()
        elif changed:  # a log gets a line per change, not one per poll
            self.out.write(line + "\n")
            self.out.flush()
        self.last_line = line

    def _note(self, line: str) -> None:
        """Prints a line of its own, whole (never clipped: it holds a command), once."""
        self.hinted.add(line)
        if self.tty:
            # Over the progress line, which is drawn again below it at the next poll.
            self.out.write("\r" + line.ljust(len(self.last_line)) + "\n")
            self.last_line = ""
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def _end(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()

    def interrupted(self) -> None:
        """Leaves the terminal on a fresh line after Ctrl-C."""
        self._end()


@dataclass(frozen=True, slots=True)
class Progress:
    """What the progress line shows.

    Attributes:
        line: The run id, its status, the time watched, how many of the operations begun
            are done (and waiting), and the last event.
        without_clock: The same without the time watched (what tells a change).
    """

    line: str
    without_clock: str


def progress(run: Mapping[str, Any], events: list[dict[str, Any]], watched: float) -> Progress:
    """A run's progress after ``watched`` seconds of watching."""
    ops = operations(events)
    done = sum(op["status"] in ("SUCCEEDED", "FAILED") for op in ops)
    waiting = sum(op["status"] in ("WAITING", "RETRYING") for op in ops)
    head = [str(run["run_id"]), str(run["status"])]
    # "3/5 done": of the operations begun so far; the rest run, or wait (a timer, a retry).
    parts = [f"{done}/{len(ops)} done" + (f", {waiting} waiting" if waiting else "")]
    last = events[-1] if events else None
    if last:
        parts.append(f"last {last.get('event')} {last.get('name') or ''}".rstrip())
    return Progress("  ".join([*head, duration(watched), *parts]), "  ".join([*head, *parts]))


def approval_hint(run: Mapping[str, Any]) -> str | None:
    """The approval a run waits for and the command that decides it; None if it waits for none.

    The id is the Api's text, printed: its control characters are escaped.
    """
    waiting_on = run.get("waiting_on")
    if not (isinstance(waiting_on, Mapping) and waiting_on.get("kind") == "approval"):
        return None
    aid = escape_controls(str(waiting_on.get("approval_id")))
    return f"waiting for approval {aid}: durable-agents approvals decide {aid} approve|reject"


def outcome(run: Mapping[str, Any], width: int = 80) -> str:
    """The closing line: how the run ended, with its result or error.

    Clipped to ``width`` (never within the run id): ``--json`` or ``runs show`` has it whole.
    """
    return clip(_outcome(run), max(width - 1, len(f"{run['run_id']} {run['status']} ")))


def _outcome(run: Mapping[str, Any]) -> str:
    line = f"{run['run_id']} {run['status']}"
    took = seconds_between(run.get("created_at"), run.get("updated_at"))
    if took is not None:
        line += f" after {duration(took)}"
    if run["status"] == "SUCCEEDED":
        return f"{line}; result: {compact(run.get('result'))}"
    if run.get("error"):
        return f"{line}; error: {compact(run['error'])}"
    if run["status"] == "BUDGET_EXCEEDED":
        return f"{line}: its tree's budget is spent; extend it (durable-agents runs budget)"
    if run["status"] in NEEDS_OPERATOR:
        return f"{line}: an operator must act (redrive after a fix, or migrate)"
    return line


def exit_code(run: Mapping[str, Any]) -> int:
    """0 for a run that SUCCEEDED, 1 for any other end (or one that needs an operator)."""
    return 0 if run["status"] in SUCCESS else 1
