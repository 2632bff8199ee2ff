"""What flow control shows: queues and slots per agent and key, rate limits, a run's budget.

Read by ``GET /flow``, ``GET /runs/{id}`` (its ``flow`` part), the console and the CLI
(``durable-agents flow``); every figure is a consistent read of flow items (ADR 0030), bounded
(``key_limit`` keys per agent).
"""

from __future__ import annotations

from typing import Any

from durable_agents.agent import AgentDefinition, AgentRegistry
from durable_agents.core.models import RunHeader, RunStatus
from durable_agents.core.run_flow import priority_of
from durable_agents.engine.flow.budgets import Budgets, budget_root
from durable_agents.engine.flow.rates import RateLimits, model_rate_limit
from durable_agents.engine.flow.slots import Slots
from durable_agents.flow_control import RateLimit
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolRegistry

__all__ = ["agent_flow", "flow_overview", "provider_throttles", "rate_limits", "run_flow"]


def agent_flow(
    store: JournalStore, definition: AgentDefinition[Any, Any], now_ms: int, *, key_limit: int = 100
) -> dict[str, Any]:
    """An agent's concurrency limit, what runs and waits, overall and per key.

    ``oldest_wait_ms`` is how long the key's next run has waited (None: nobody waits).
    """
    limits = definition.concurrency
    assert limits is not None
    slots = Slots(store.flow_items())
    count, per_key = slots.counts(definition.name)
    keys: list[dict[str, Any]] = []
    oldest: int | None = None
    for item in per_key[:key_limit]:
        key = item.key.removeprefix("k#")
        running, queued = item.counters.get("n", 0), item.counters.get("queued", 0)
        if not running and not queued:
            continue
        head = slots.waiting(definition.name, key, limit=1) if queued else []
        wait = None if not head else now_ms - int(head[0].data["queued_at_ms"])
        if wait is not None:
            oldest = wait if oldest is None else max(oldest, wait)
        keys.append({"key": key, "running": running, "queued": queued, "oldest_wait_ms": wait})
    counters = count.counters if count is not None else {}
    return {
        "agent": definition.name,
        "limit": limits.limit,
        "per_key": limits.per_key,
        "key": limits.key,
        "running": counters.get("n", 0),
        "queued": counters.get("queued", 0),
        "oldest_wait_ms": oldest,
        "keys": keys,
    }


def rate_limits(
    store: JournalStore, registry: AgentRegistry, tools: ToolRegistry | None, now_ms: int
) -> list[dict[str, Any]]:
    """Every rate limit the deployment declares, with this period's use and waits today."""
    declared: dict[str, RateLimit] = {}
    for config in registry.prompts.model_configs():
        limit = model_rate_limit(config.requests_per_minute, config.tokens_per_minute)
        if limit is not None:
            declared[f"model#{config.name}"] = limit
    for tool in tools.tools() if tools is not None else []:
        if tool.rate_limit is not None:
            declared[f"tool#{tool.name}"] = tool.rate_limit
    rates = RateLimits(store.flow_items())
    out = []
    for limiter, limit in sorted(declared.items()):
        requests, tokens = rates.used(limiter, limit, now_ms)
        out.append(
            {
                "limiter": limiter,
                "requests": None if limit.requests >= 1_000_000_000 else limit.requests,
                "tokens": limit.tokens,
                "per_seconds": limit.per_seconds,
                "used_requests": requests,
                "used_tokens": tokens,
                "waits_today": rates.waits(limiter, now_ms),
            }
        )
    return out


def flow_overview(
    store: JournalStore, registry: AgentRegistry, tools: ToolRegistry | None, now_ms: int
) -> dict[str, Any]:
    """``GET /flow``: every limited agent's queue and slots, and every rate limit."""
    agents = []
    for name in registry.names():
        definition = registry.latest(name)
        if definition.concurrency is not None:
            agents.append(agent_flow(store, definition, now_ms))
    return {
        "agents": agents,
        "rate_limits": rate_limits(store, registry, tools, now_ms),
        "provider_throttles": provider_throttles(store, registry, now_ms),
    }


def provider_throttles(
    store: JournalStore, registry: AgentRegistry, now_ms: int
) -> list[dict[str, Any]]:
    """Throttles model providers answered today, per registered configuration's model.

    A throttle (Bedrock ``ThrottlingException``, a 429) is backed off durably and counted
    (``ModelThrottledError``); this reads the counts.
    """
    rates = RateLimits(store.flow_items())
    models = sorted({(c.provider, c.model_id) for c in registry.prompts.model_configs()})
    return [
        {
            "provider": provider,
            "model_id": model_id,
            "throttled_today": rates.waits(f"throttle#{provider}#{model_id}", now_ms),
        }
        for provider, model_id in models
    ]


def run_flow(store: JournalStore, header: RunHeader, now_ms: int) -> dict[str, Any]:
    """A run's flow control: its priority, where it waits, its tree's budget and its share."""
    out: dict[str, Any] = {"priority": priority_of(header)}
    waiting = header.waiting_on or {}
    if header.status is RunStatus.QUEUED:
        queued_at = waiting.get("queued_at_ms")
        out["queue"] = {
            "key": waiting.get("key"),
            "waited_ms": None if queued_at is None else now_ms - int(queued_at),
        }
    root = budget_root(header)
    if root is not None:
        budgets = Budgets(store.flow_items())
        state = budgets.state(root)
        if state is not None:
            budget = state.to_dict()
            used = budgets.member(root, header.run_id)
            budget["run_used"] = {
                "tokens_in": used.get("tokens_in", 0),
                "tokens_out": used.get("tokens_out", 0),
                "cost_usd": used.get("cost_micros", 0) / 1_000_000,
                "calls": used.get("calls", 0),
            }
            out["budget"] = budget
    return out
