"""Flow-control examples (ADR 0030): a concurrency limit with keys, a model rate limit, a budget.

Three small agents, each showing one declaration; copy the one you need.

* ``batch-worker`` — ``Concurrency(limit=3, key="input.customer")``: at most three runs execute
  at once, and a customer's backlog cannot starve another's (queued runs are served by
  priority, then round-robin across customers, then by arrival). Runs over the limit start
  ``QUEUED`` and hold no compute. A run executes while it is RUNNING; its durable wait in the
  middle frees its slot, so it queues again for the second half. Each half records when it
  began and ended (``ctx.now()``, recorded like a step), so you can see that never more than
  three overlapped.
* ``summarizer`` — one ``ctx.llm`` call on a model configuration with ``requests_per_minute``:
  every Lambda of the deployment shares the limit; a call over it suspends its run on a durable
  timer until the next minute (``waiting_on.kind == "rate_limit"``) instead of failing.
* ``research-lead`` — ``Budget(tokens=..., on_exceeded="pause")`` for the run and every
  sub-agent it starts: it plans with one model call, runs three ``research-helper`` sub-agents
  (two model calls each), then combines their findings. Once the tree has used its tokens,
  the next model call of any member pauses that run ``BUDGET_EXCEEDED`` until someone extends
  the budget: ``POST /runs/{id}/budget`` with ``{"add_tokens": 1000, "reason": "..."}``.

The model is scripted (``agents:scripts/flow.json``, answers with token usage) so the
examples run offline: start local mode with ``--agents agents.flow --model-script
agents:scripts/flow.json``.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from durable_agents import DurableContext, agent
from durable_agents.agent import register_model_config
from durable_agents.flow_control import Budget, Concurrency
from durable_agents.llm.types import LlmRequest, Message, ModelConfig

SUMMARIZER_RPM = 3
"""The summarizer model's requests per minute, shared by every run (kept small to show waits)."""

register_model_config(
    ModelConfig(
        name="flow-summarizer",
        version="1",
        provider="scripted",
        model_id="scripted-summarizer",
        max_tokens=256,
        requests_per_minute=SUMMARIZER_RPM,
    )
)
register_model_config(
    ModelConfig(
        name="flow-research",
        version="1",
        provider="scripted",
        model_id="scripted-research",
        max_tokens=512,
        # Prices count against a budget's cost_usd (this example's budget is in tokens).
        input_usd_per_mtok=3.0,
        output_usd_per_mtok=15.0,
    )
)


def _epoch_ms(ctx: DurableContext) -> int:
    """Now, in epoch milliseconds: ``ctx.now()`` is recorded, so a replay returns the same."""
    return int(ctx.now().timestamp() * 1000)


# -- batch-worker: a concurrency limit with a key ----------------------------------------------


class BatchJob(BaseModel):
    """One job of a customer's batch."""

    customer: str = Field(min_length=1, max_length=64)
    job: int = Field(ge=0)
    work_seconds: float = Field(default=0.2, ge=0, le=30)
    wait_seconds: float = Field(default=1.0, ge=0, le=3600)


class JobReport(BaseModel):
    """What the job did, and when each half of it executed (epoch milliseconds)."""

    customer: str
    job: int
    executed: list[tuple[int, int]]


def _work(seconds: float) -> None:
    # Stands in for real work (a download, a transform) done while the run holds its slot.
    time.sleep(seconds)


@agent(
    name="batch-worker",
    version="1",
    concurrency=Concurrency(limit=3, key="input.customer"),
)
def batch_worker(ctx: DurableContext, job: BatchJob) -> JobReport:
    """Works, waits durably (freeing its slot), works again; records when each half ran."""
    began = _epoch_ms(ctx)
    ctx.step(_work, job.work_seconds, name="work-1")
    paused = _epoch_ms(ctx)
    ctx.wait(job.wait_seconds, name="cool-down")  # suspended: holds no slot
    resumed = _epoch_ms(ctx)
    ctx.step(_work, job.work_seconds, name="work-2")
    ended = _epoch_ms(ctx)
    return JobReport(
        customer=job.customer, job=job.job, executed=[(began, paused), (resumed, ended)]
    )


# -- summarizer: a model configuration's rate limit --------------------------------------------


class SummaryRequest(BaseModel):
    """Text to summarize."""

    text: str = Field(min_length=1, max_length=4_000)


@agent(name="summarizer", version="1", model_configs=["flow-summarizer"])
def summarizer(ctx: DurableContext, request: SummaryRequest) -> str:
    """One model call; over ``requests_per_minute`` it waits for the next minute, durably."""
    reply = ctx.llm(
        "summarize",
        LlmRequest(messages=[Message.user(f"Summarize: {request.text}")]),
        config=ctx.model_config("flow-summarizer"),
    )
    return reply.text


# -- research-lead and research-helper: a budget over a run tree -------------------------------


class ResearchTopic(BaseModel):
    """What to research, in how many parts."""

    topic: str = Field(min_length=1, max_length=200)
    helpers: int = Field(default=3, ge=1, le=10)


class Subtopic(BaseModel):
    """One helper's part."""

    topic: str
    part: int


class Findings(BaseModel):
    """A helper's findings."""

    part: int
    notes: list[str]


class ResearchSummary(BaseModel):
    """The lead's output."""

    topic: str
    plan: str
    findings: list[Findings]
    summary: str


@agent(name="research-helper", version="1", model_configs=["flow-research"])
def research_helper(ctx: DurableContext, sub: Subtopic) -> Findings:
    """Two model calls in one conversation; the tokens count against its root's budget."""
    model = ctx.model_config("flow-research")
    conversation = [Message.user(f"Research the subtopic {sub.part} of {sub.topic}.")]
    notes = []
    for turn in range(2):
        reply = ctx.llm(f"research-{turn + 1}", LlmRequest(messages=conversation), config=model)
        notes.append(reply.text)
        conversation += [reply.as_message(), Message.user("Go deeper.")]
    return Findings(part=sub.part, notes=notes)


LEAD_BUDGET_TOKENS = 250
"""The lead's token budget: less than the tree needs (800 tokens with 3 helpers), so the
example pauses for a person to extend it. ``POST /runs`` may give a run its own budget."""


def _run_helper(ctx: DurableContext, sub: Subtopic, index: int) -> Findings:
    """One branch of the map: a ``research-helper`` child run (waited for holding no compute)."""
    return ctx.invoke(research_helper, sub, name=f"helper-{sub.part}")


@agent(
    name="research-lead",
    version="1",
    model_configs=["flow-research"],
    budget=Budget(tokens=LEAD_BUDGET_TOKENS, on_exceeded="pause"),
)
def research_lead(ctx: DurableContext, request: ResearchTopic) -> ResearchSummary:
    """Plans, runs ``helpers`` sub-agents at once, then combines: all under one budget."""
    model = ctx.model_config("flow-research")
    plan = ctx.llm(
        "plan",
        LlmRequest(messages=[Message.user(f"Plan research on {request.topic}.")]),
        config=model,
    )
    parts = [Subtopic(topic=request.topic, part=n) for n in range(1, request.helpers + 1)]
    batch = ctx.map(parts, _run_helper, name="helpers")  # the three run at once
    findings = [Findings.model_validate(f) for f in batch.results()]
    combined = ctx.llm(
        "combine",
        LlmRequest(messages=[Message.user(f"Combine the findings on {request.topic}.")]),
        config=model,
    )
    return ResearchSummary(
        topic=request.topic, plan=plan.text, findings=findings, summary=combined.text
    )
