"""The concierge example: long-term memory, apart from run state.

A user tells the concierge how they like their answers once ("brief", "detailed"); it keeps
that in ``ctx.memory`` — the memory table, scoped to the run's tenant and the user — and every
later run of any user's session answers that way without being told again. What a run read
is recorded with it, so a replay (after a crash, a redeploy, a three-day wait) sees what the
first execution saw, even if the preference changed since; a write happens once, however
often the run replays.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from durable_agents import DurableContext, agent

Style = Literal["brief", "detailed", "neutral"]
PREFERENCE_TTL_SECONDS = 180 * 24 * 3600  # forgotten after half a year without a word


class ConciergeRequest(BaseModel):
    """A user's question, and (sometimes) how they want answers."""

    user: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._@-]+$")
    question: str = Field(min_length=1, max_length=2_000)
    prefer: Style | None = None


class ConciergeAnswer(BaseModel):
    """The answer, in the style the concierge remembered."""

    style: Style
    learned: bool
    answer: str


def _answer(question: str, style: Style) -> str:
    if style == "brief":
        return f"In short: {question.rstrip('?')}? Yes."
    if style == "detailed":
        return f"Here is the whole story on {question.rstrip('?')!r}, step by step."
    return f"About {question.rstrip('?')!r}: here you are."


@agent(name="example-concierge", version="1")
def concierge(ctx: DurableContext, request: ConciergeRequest) -> ConciergeAnswer:
    """Learns a user's preferred style once, then uses it in every later run."""
    prefs = ctx.memory.scope(f"user:{request.user}")
    if request.prefer is not None:
        prefs.put("style", request.prefer, ttl=PREFERENCE_TTL_SECONDS)
    style: Style = prefs.get("style", "neutral")
    answer = ctx.step(lambda: _answer(request.question, style), name="answer")
    return ConciergeAnswer(style=style, learned=request.prefer is not None, answer=answer)
