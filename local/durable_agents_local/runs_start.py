"""``durable-agents runs start AGENT INPUT``: start a run through the Api, and wait.

The run is started the way any client starts one (``POST /runs`` on the Api local mode
serves, or a deployed stack's, SigV4-signed: ``cli.api_client``), not by writing the journal:
what it exercises is what a deployment runs. While local mode is still starting (nothing
listens on the port yet) the request is retried until ``--wait`` runs out (saying so once, at
once, on stderr), so ``durable-agents local ... &`` followed by this command just works.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from durable_agents_local.cli.api_client import (
    ApiClient,
    ApiError,
    ApiUnreachableError,
    field_errors,
    segment,
)
from durable_agents_local.cli.tables import escape_controls

DEFAULT_API = "http://127.0.0.1:3000"
# BUDGET_EXCEEDED, like PAUSED, waits for a person: nothing more happens by waiting here.
SETTLED = (
    "SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT", "PAUSED", "BUDGET_EXCEEDED",
)  # fmt: skip
_POLL_SECONDS = 0.2


# Text a person typed as JSON: an object, an array, a string, a number as people write one
# (``+1``, ``.5``, ``01`` and ``1e`` are attempts; ``1.2.3``, ``2026-12-01`` and
# ``2nd-attempt`` are words) or a literal in any case (``True``).
_LOOKS_LIKE_JSON = re.compile(
    r"""[{["]|[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d*)?$|(?i:true|false|null)$"""
)


class RunStartError(Exception):
    """The run could not be started or did not settle in time (the message says what to do).

    The message's first line says what happened; a refusal's field errors (a 422's) follow,
    one ``  location: message`` line each. Whatever it holds of the Api's text or an OS error's
    is one line per item with its control characters shown escaped (``escape_controls``).
    """


class InputSyntaxError(ValueError):
    """INPUT looks like JSON (an object, array, string, number or literal) but does not parse.

    The message is the parser's, with its line and column, and how to send the text as a
    string instead.
    """


@dataclass(frozen=True, slots=True)
class Started:
    """The run as the Api last showed it.

    Attributes:
        run: The Api's run view (``run_id``, ``status``, ``result``, ``error`` …).
        settled: Whether it finished (or paused) within the wait.
    """

    run: dict[str, Any]
    settled: bool


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: Python's, not RFC 8259's


def parse_input(text: str) -> Any:
    """INPUT as JSON; plain text that is not JSON is the string itself (``Ada`` = ``'"Ada"'``).

    Text that looks like JSON must be JSON: one that starts (after blanks) with ``{``, ``[``
    or ``"``, a number as people write one (``42``, ``-1.5e3``, but also ``+1``, ``.5``,
    ``01``), or ``true``, ``false`` or ``null`` in any case (``True``). Anything else that
    does not parse (``Ada``, ``Ada Lovelace``, ``1.2.3``, ``2026-12-01``, ``NaN``, the empty
    text) is sent as the string it is.

    Args:
        text: INPUT as typed.

    Returns:
        The value to send as the run's input.

    Raises:
        InputSyntaxError: If ``text`` looks like JSON but does not parse; the message has the
            parser's reason, line and column.
    """
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        if not _LOOKS_LIKE_JSON.match(text.strip()):
            return text
        raise InputSyntaxError(
            f"INPUT is not valid JSON: {exc}; to send the text as a string, quote it as JSON "
            """(e.g. '"Ada"')"""
        ) from exc


def start_run(
    api: str | ApiClient,
    agent: str,
    value: Any,
    *,
    wait_seconds: float,
    idempotency_key: str | None = None,
    on_wait: Callable[[str], None] | None = None,
    options: Mapping[str, Any] | None = None,
) -> Started:
    """Starts a run with ``POST /runs`` and polls ``GET /runs/{id}`` until it settles.

    Local mode's Api (a loopback http URL) may still be starting: while nothing answers the
    request is retried until ``wait_seconds`` run out. A deployed Api's (``ApiClient`` with
    credentials: every request SigV4-signed) is asked once: nothing answering is an error at
    once, and a POST whose answer was lost is not sent again (``idempotency_key`` makes a
    retry by hand safe).

    Args:
        api: The Api: local mode's base URL, or a client (``cli.api_client.connect``).
        agent: The agent's name.
        value: The run's input.
        wait_seconds: How long to wait for the Api to answer and the run to settle (0: only
            start it).
        idempotency_key: Sent as the body's ``idempotency_key``.
        on_wait: Told once, the first time local mode's Api does not answer and the request
            will be retried: ``waiting for the Api at URL (start it with durable-agents local)
            ...`` (the CLI prints it on stderr, so a wait is never silent).
        options: More of the body: ``priority`` and ``budget`` (``runs_flow.start_options``).

    Returns:
        The run, and whether it settled (a SUSPENDED run waits for a timer or a person).

    Raises:
        RunStartError: If the Api does not answer (in time), refuses the run (a 422's field
            errors on the lines after the first) or the run cannot be read back.
    """
    client = api if isinstance(api, ApiClient) else ApiClient(api.rstrip("/"), timeout=10)
    local = client.credentials is None  # local mode: unsigned (connect() signs for all else)
    deadline = time.monotonic() + wait_seconds
    body: dict[str, Any] = {"agent": agent, "input": value, **(options or {})}
    if idempotency_key:
        body["idempotency_key"] = idempotency_key
    waiting = False
    while True:
        try:
            answer = client.call("POST", "/runs", body=body)
            break
        except ApiUnreachableError as exc:
            if not local or time.monotonic() >= deadline:
                reason = escape_controls(str(exc.__cause__ or exc))
                hint = (
                    "start local mode first (durable-agents local), or wait longer (--wait)"
                    if local
                    else "is it the Api's URL, and is the stack deployed?"
                )
                raise RunStartError(
                    f"nothing answers at {client.base_url} ({reason}); {hint}"
                ) from exc
            if on_wait is not None and not waiting:
                on_wait(
                    f"waiting for the Api at {client.base_url} (start it with "
                    "durable-agents local) ..."
                )
            waiting = True
            time.sleep(_POLL_SECONDS)
        except ApiError as exc:  # its message is one line, the Api's text escaped
            details = (f"  {line}" for line in field_errors(exc.body))
            raise RunStartError("\n".join([str(exc), *details])) from exc
    run: dict[str, Any] = answer["run"]
    while run["status"] not in SETTLED and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
        try:
            run = client.call("GET", f"/runs/{segment(str(run['run_id']))}")
        except ApiError as exc:
            raise RunStartError(f"started {run['run_id']}, but reading it back: {exc}") from exc
    return Started(run, run["status"] in SETTLED)


def describe(started: Started) -> str:
    """One line for the terminal: the run, its status, and its result or error."""
    run = started.run
    line = f"{run['run_id']} {run['status']}"
    if run.get("status") == "SUCCEEDED":
        return f"{line} result: {json.dumps(run.get('result'))}"
    if run.get("error"):
        return f"{line} error: {json.dumps(run['error'])}"
    if run.get("status") == "BUDGET_EXCEEDED":
        return (
            f"{line}: its tree's budget is spent; extend it with durable-agents runs budget "
            f"{run['run_id']} --add-tokens N --reason TEXT"
        )
    if not started.settled and run.get("waiting_on"):
        return f"{line} waiting on: {json.dumps(run['waiting_on'])}"
    return line
