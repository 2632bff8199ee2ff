"""The example agent: a small research job that shows every durable operation of the core.

It plans sections, gathers each one in a child context (each fetch is its own recorded step),
pauses on a durable timer, then writes the report. Kill the process anywhere: on restart the
recorded steps are replayed from the journal, never executed again.
"""

from __future__ import annotations

import hashlib
import os
import time

from pydantic import BaseModel, Field

from durable_agents import DurableContext, RetryPolicy, agent


class ResearchRequest(BaseModel):
    """What to research."""

    topic: str = Field(min_length=1, max_length=200)
    sections: int = Field(default=3, ge=1, le=10)
    pause_seconds: float = Field(default=2.0, ge=0, le=7 * 24 * 3600)


class Section(BaseModel):
    """One gathered section."""

    title: str
    notes: str


class ResearchReport(BaseModel):
    """The agent's output."""

    topic: str
    sections: list[Section]
    summary: str
    finished_at: str
    report_id: str


def _simulated_latency() -> None:
    # Stands in for the network time of a real fetch, so a demo can kill the worker mid-step.
    time.sleep(float(os.environ.get("EXAMPLE_WORK_SECONDS", "0")))


def plan_outline(topic: str, sections: int) -> list[str]:
    """Plans the section titles (pure: the same input always gives the same plan)."""
    angles = [
        "background",
        "how it works",
        "trade-offs",
        "failure modes",
        "operations",
        "costs",
        "alternatives",
        "case studies",
        "open questions",
        "further reading",
    ]
    return [f"{topic}: {angle}" for angle in angles[:sections]]


def fetch_notes(title: str) -> Section:
    """Fetches notes for one section (a stand-in for a search or HTTP call)."""
    _simulated_latency()
    digest = hashlib.sha256(title.encode()).hexdigest()[:8]
    return Section(title=title, notes=f"notes on {title} (source {digest})")


@agent(name="example-research", version="1")
def research(ctx: DurableContext, request: ResearchRequest) -> ResearchReport:
    """Plans, gathers, pauses, and summarises: each effect is one recorded operation."""
    outline = ctx.step(plan_outline, request.topic, request.sections, name="plan")
    ctx.logger.info("planned %d sections", len(outline))

    def gather(child: DurableContext) -> list[Section]:
        return [
            child.step(
                fetch_notes,
                title,
                name=f"fetch-{index}",
                retry=RetryPolicy(max_attempts=5, initial_delay_seconds=1),
            )
            for index, title in enumerate(outline, start=1)
        ]

    sections = ctx.run_in_child_context(gather, name="gather", result_type=list[Section])
    ctx.wait(request.pause_seconds, name="cool-down")

    def summarize() -> str:
        _simulated_latency()
        return f"{len(sections)} sections on {request.topic}: " + "; ".join(
            s.title.split(": ", 1)[-1] for s in sections
        )

    summary = ctx.step(summarize, name="summarize")
    finished = ctx.now()
    return ResearchReport(
        topic=request.topic,
        sections=sections,
        summary=summary,
        finished_at=finished.isoformat(),
        report_id=str(ctx.uuid()),
    )
