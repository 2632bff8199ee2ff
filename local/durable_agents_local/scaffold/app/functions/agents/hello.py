"""An example agent: two recorded steps around a durable timer.

Each ``ctx.step`` runs once: its result is recorded in the journal, and a later invocation
(after the timer, a crash or a redeploy) replays it instead of running it again.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from durable_agents import DurableContext, agent


class Greeting(BaseModel):
    """What to say, to whom."""

    name: str = Field(min_length=1, max_length=100)
    pause_seconds: float = Field(default=1.0, ge=0, le=24 * 3600)


def compose(name: str) -> str:
    """Composes the greeting (stands in for a model or an API call)."""
    return f"Hello, {name}!"


@agent(name="hello", version="1")
def hello(ctx: DurableContext, request: Greeting) -> str:
    """Composes a greeting, waits durably, then signs it."""
    text = ctx.step(compose, request.name, name="compose")
    ctx.wait(request.pause_seconds, name="pause")
    return ctx.step(lambda: f"{text} (from your own app)", name="sign")
