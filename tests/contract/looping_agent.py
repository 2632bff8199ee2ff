"""The looping agent the continue-as-new contract tests run (ADR 0016)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent


class Counter(BaseModel):
    n: int


def looping_agent(*, per_generation: int = 3, until: int = 10) -> Any:
    @agent(name="looper", version="1", registry=AgentRegistry())
    def looper(ctx: DurableContext, state: Counter) -> int:
        n = state.n
        for _ in range(per_generation):
            n = ctx.step(lambda x: x + 1, n, name="inc")
        if n < until:
            try:
                ctx.continue_as_new({"n": n})
            except Exception:  # what the test shows: it cannot swallow the switch
                return -1
        return n

    return looper
