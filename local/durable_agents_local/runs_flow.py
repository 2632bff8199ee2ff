"""Flow control from the CLI (ADR 0030): a run's priority and budget, extensions, the queues.

* ``durable-agents runs start AGENT INPUT --priority N --budget-tokens N --budget-usd X
  --on-budget-exceeded pause|fail``: the ``priority`` and ``budget`` of ``POST /runs``
  (``start_options``);
* ``durable-agents runs budget RUN_ID --add-tokens N [--add-usd X] --reason TEXT``: ``POST
  /runs/{run_id}/budget`` raises the budget of the run's tree and wakes the runs it paused
  (``BUDGET_EXCEEDED``);
* ``durable-agents flow``: ``GET /flow`` (operators) as tables: each limited agent's slots and
  queue, overall and per key, and each rate limit's use this period and waits today.

Like the other commands they ask the Api (``durable_agents_local.cli.remote``), local mode's or
a deployed stack's; here: their arguments, the bodies they send and what they print.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from typing import Any

from durable_agents_local.cli.tables import WIDTH, duration, fit_table

ON_EXCEEDED = ("pause", "fail")


def _priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 5:
        raise argparse.ArgumentTypeError(f"a priority is 1 (highest) to 5 (lowest): {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number of tokens: {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more tokens: {text!r}")
    return value


def _dollars(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected an amount in dollars: {text!r}") from exc
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more dollars: {text!r}")
    return value


def add_start_options(start: argparse.ArgumentParser) -> None:
    """``runs start``'s flow-control options: ``--priority`` and the run's own budget."""
    group = start.add_argument_group("flow control (ADR 0030)")
    group.add_argument(
        "--priority",
        type=_priority,
        metavar="N",
        help="1 (highest) to 5 (lowest; default: 3): its place in its agent's queue and at "
        "rate limits",
    )
    group.add_argument(
        "--budget-tokens",
        type=_count,
        metavar="N",
        help="model tokens for the run and every sub-agent it starts (replaces its agent's)",
    )
    group.add_argument(
        "--budget-usd",
        type=_dollars,
        metavar="X",
        help="dollars of model use for the run and its sub-agents (replaces its agent's)",
    )
    group.add_argument(
        "--on-budget-exceeded",
        choices=ON_EXCEEDED,
        help="when the budget is spent: pause the run BUDGET_EXCEEDED until someone extends "
        "it (default), or fail the model call",
    )


class FlowUsageError(ValueError):
    """The flow-control options do not make a request (the message says why)."""


def start_options(
    priority: int | None,
    budget_tokens: int | None,
    budget_usd: float | None,
    on_exceeded: str | None,
) -> dict[str, Any]:
    """What ``runs start``'s options add to the ``POST /runs`` body (nothing when none given).

    >>> start_options(1, 5000, None, "fail")
    {'priority': 1, 'budget': {'tokens': 5000, 'on_exceeded': 'fail'}}

    Raises:
        FlowUsageError: If ``--on-budget-exceeded`` is given without a budget.
    """
    body: dict[str, Any] = {}
    if priority is not None:
        body["priority"] = priority
    budget: dict[str, Any] = {}
    if budget_tokens is not None:
        budget["tokens"] = budget_tokens
    if budget_usd is not None:
        budget["cost_usd"] = budget_usd
    if budget:
        if on_exceeded is not None:
            budget["on_exceeded"] = on_exceeded
        body["budget"] = budget
    elif on_exceeded is not None:
        raise FlowUsageError("--on-budget-exceeded needs a budget: --budget-tokens or --budget-usd")
    return body


def add_budget_command(actions: Any, parents: list[Any]) -> None:
    """Adds ``budget`` to the ``runs`` sub-commands (``parents``: ``--json``, where the Api is)."""
    budget = actions.add_parser(
        "budget",
        parents=parents,
        help="extend the budget of a run's tree: the runs it paused go on",
        description="POST /runs/{run_id}/budget (any run of the tree): the tree's limits rise "
        "by what is added, the extension records who and why, and the runs paused "
        "BUDGET_EXCEEDED are woken.",
    )
    budget.add_argument("run_id")
    budget.add_argument("--add-tokens", type=_count, default=0, metavar="N", help="tokens to add")
    budget.add_argument("--add-usd", type=_dollars, default=0.0, metavar="X", help="dollars to add")
    budget.add_argument("--reason", required=True, help="why (recorded with the extension)")


def budget_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``POST /runs/{run_id}/budget`` body of ``runs budget``'s arguments."""
    return {"add_tokens": args.add_tokens, "add_cost_usd": args.add_usd, "reason": args.reason}


def _limit(used: Any, limit: Any, money: bool = False) -> str:
    def shown(value: Any) -> str:
        if money and isinstance(value, int | float):
            return f"${value:,.4f}"
        return str(value)

    return f"{shown(used)} / {'no limit' if limit is None else shown(limit)}"


def describe_budget(answer: Mapping[str, Any]) -> str:
    """What the extension did: the tree's budget now, and whether its paused runs go on."""
    budget = answer.get("budget") or {}
    limit = budget.get("limit") or {}
    used = budget.get("used") or {}
    root = budget.get("root_run_id") or answer.get("run_id")
    lines = [
        f"budget of {root} extended",
        f"  tokens:  {_limit(used.get('tokens', 0), limit.get('tokens'))}",
        f"  dollars: {_limit(used.get('cost_usd', 0), limit.get('cost_usd'), money=True)}",
    ]
    extensions = budget.get("extensions") or []
    if extensions:
        last = extensions[-1]
        lines.append(f"  by {last.get('by')}: {last.get('reason')}")
    lines.append(
        "  still exceeded: extend it further"
        if budget.get("exceeded")
        else "  the runs it paused are woken"
    )
    return "\n".join(lines)


def add_flow_command(commands: Any, parents: list[Any]) -> None:
    """Adds the top-level ``flow`` command (``parents``: ``--json``, where the Api is)."""
    commands.add_parser(
        "flow",
        parents=parents,
        help="queues, slots and rate limits (GET /flow, operators)",
        description="GET /flow: each agent with a concurrency limit (its running and queued "
        "runs, overall and per key, and how long the oldest has waited) and each rate limit "
        "(what this period used of it, and how many waits today). Operators only (tenant *) "
        "where tenants are configured.",
    )


def _wait(ms: Any) -> str:
    return duration(ms / 1000) if isinstance(ms, int | float) else "-"


def flow_tables(overview: Mapping[str, Any], width: int = WIDTH) -> str:
    """``GET /flow`` as two tables: queues and slots (agents, then their keys), rate limits.

    A rate limit's requests and tokens are what this period used of it / its limit.
    """
    rows: list[list[str]] = []
    for agent in overview.get("agents") or []:
        limit = agent.get("limit")
        per_key = agent.get("per_key")
        rows.append(
            [
                str(agent.get("agent", "")),
                f"(all, by {agent.get('key')})",
                str(agent.get("running", 0)),
                "-" if limit is None else str(limit),
                str(agent.get("queued", 0)),
                _wait(agent.get("oldest_wait_ms")),
            ]
        )
        for key in agent.get("keys") or []:
            rows.append(
                [
                    "",
                    str(key.get("key") or '""'),
                    str(key.get("running", 0)),
                    "-" if per_key is None else str(per_key),
                    str(key.get("queued", 0)),
                    _wait(key.get("oldest_wait_ms")),
                ]
            )
    headers = ["AGENT", "KEY", "RUNNING", "LIMIT", "QUEUED", "OLDEST WAIT"]
    # Agents and keys are names one copies: never cut.
    queues = (
        fit_table(headers, rows, width, keep=(0, 1)) if rows else "no agent has a concurrency limit"
    )
    limits: Sequence[Mapping[str, Any]] = overview.get("rate_limits") or []
    rate_rows = [
        [
            str(r.get("limiter", "")),
            _limit(r.get("used_requests", 0), r.get("requests")),
            _limit(r.get("used_tokens", 0), r.get("tokens")),
            f"{r.get('per_seconds')}s",
            str(r.get("waits_today", 0)),
        ]
        for r in limits
    ]
    # Used this period / the limit.
    rate_headers = ["LIMITER", "REQUESTS", "TOKENS", "PER", "WAITS TODAY"]
    rates = fit_table(rate_headers, rate_rows, width, keep=(0,)) if rate_rows else "no rate limits"
    return f"{queues}\n\n{rates}"
