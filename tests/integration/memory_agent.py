"""An agent that learns a preference in one run and uses it in the next (local-mode test)."""

from __future__ import annotations

from typing import Any

from durable_agents import DurableContext, agent


@agent(name="memory-concierge", version="1")
def memory_concierge(ctx: DurableContext, request: dict[str, Any]) -> str:
    """Remembers ``prefer`` for the user, then answers in the remembered style."""
    prefs = ctx.memory.scope(f"user:{request['user']}")
    if "prefer" in request:
        prefs.put("style", request["prefer"], ttl=3600)
    return f"[{prefs.get('style', 'neutral')}] {request['question']}"
