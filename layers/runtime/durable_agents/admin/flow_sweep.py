"""The reconciler's flow sweep: what a crash can leave half done in flow control (ADR 0030).

Per agent with a concurrency limit, every minute:

* **slots whose lease ran out** are freed (an invocation died holding one, and nobody
  renewed it): never lost for longer than ``Concurrency.lease_seconds``;
* **slots of runs that do not run** (a release lost: the run suspended, paused or ended, and
  the write that frees its slot never happened) are freed, once the slot has not been renewed
  for ``stall_after``, read on the run's header (a consistent read);
* **free slots with runs waiting** are granted (a grant lost with its invocation).

And over the journal's listings:

* **queued runs without their queue entry** (a crash between the header and the entry) are
  queued again, at their recorded arrival (idempotent; one read each for the rest, oldest
  first, at most ``limit`` a sweep);
* **runs over their budget whose budget was extended** (a wake-up lost) get their
  ``Step Ready``;
* **queued runs, and runs over their budget, past their time limit** get their ``Step Ready``:
  their invocation ends them TIMED_OUT (nothing else wakes them before their turn).

Every decision is a consistent read and a conditional write, so two sweeps at once, or a sweep
racing an invocation, cannot free a slot twice or take one that is held.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from durable_agents.admin.sweeping import SweepContext
from durable_agents.agent import AgentDefinition
from durable_agents.core.models import RunHeader, RunStatus
from durable_agents.core.run_flow import priority_of
from durable_agents.engine.events import step_ready
from durable_agents.engine.flow import admission
from durable_agents.engine.flow.budgets import Budgets, budget_root
from durable_agents.engine.flow.slots import Slots
from durable_agents.engine.pinning import resolve_pinned
from durable_agents.engine.time_limits import deadline_ms
from durable_agents.errors import RunNotFoundError, VersionUnavailableError
from durable_agents.journal.flow_items import FlowItem
from durable_agents.journal.store import Page

__all__ = ["sweep_flow"]

_PAGE = 100
# A run holding a slot may still show its old status for a moment: a woken run takes its
# slot before its first write sets it RUNNING. Only a slot not renewed for this long, of a run
# that does not run, is a lost release.
_RUNS_WITH_SLOTS = frozenset({RunStatus.RUNNING})


def sweep_flow(ctx: SweepContext, stall_after_ms: int) -> None:
    """One flow sweep (see the module docstring)."""
    limited: dict[str, AgentDefinition[Any, Any]] = {}
    for definition in ctx.runtime.registry.definitions():
        if definition.concurrency is not None:
            # Queues are per agent: the limits of its latest version apply.
            latest = ctx.runtime.registry.latest(definition.name)
            if latest.concurrency is not None:
                limited[definition.name] = latest
    for name, definition in sorted(limited.items()):
        if ctx.out_of_time():
            return
        ctx.unit(f"flow slots {name}", partial(_slots, ctx, definition, stall_after_ms))
    for header in _oldest(ctx, RunStatus.QUEUED):
        # Oldest first, the freshest left alone (their entry may be being written): a queued
        # run's entry costs one read to check; at most ``limit`` of them a sweep.
        if ctx.now_ms() - header.updated_at_ms < stall_after_ms:
            break
        ctx.unit(header.run_id, partial(_requeue, ctx, header.run_id))
    for header in _oldest(ctx, RunStatus.BUDGET_EXCEEDED):
        if ctx.now_ms() - header.updated_at_ms < stall_after_ms:
            break  # oldest first: the rest changed more recently still
        ctx.unit(header.run_id, partial(_rewake, ctx, header.run_id))


def _oldest(ctx: SweepContext, status: RunStatus) -> Any:
    def fetch(cursor: str | None) -> Page[RunHeader]:
        return ctx.runtime.store.changed_runs_page(
            status, limit=min(_PAGE, ctx.page_size), cursor=cursor
        )

    return ctx.pages(f"{status.value} runs", fetch, check_time="page")


def _slots(ctx: SweepContext, definition: AgentDefinition[Any, Any], stall_after_ms: int) -> None:
    limits = definition.concurrency
    assert limits is not None
    runtime = ctx.runtime
    slots = Slots(runtime.store.flow_items())
    lease_ms = int(limits.lease_seconds * 1000)
    after: str | None = None
    while True:
        holders = slots.holders(definition.name, after=after, limit=_PAGE)
        for holder in holders:
            ctx.unit(
                holder.key,
                partial(_holder, ctx, definition.name, holder, lease_ms, stall_after_ms),
            )
        if len(holders) < _PAGE:
            break
        after = holders[-1].key
    granted = admission.grant_waiting(
        runtime.store, runtime.clock, runtime.publisher, definition.name, limits
    )
    ctx.report.flow_granted += granted
    slots.forget_idle_keys(definition.name, limit=ctx.limit)


def _holder(
    ctx: SweepContext, agent: str, holder: FlowItem, lease_ms: int, stall_after_ms: int
) -> None:
    runtime = ctx.runtime
    slots = Slots(runtime.store.flow_items())
    run_id = holder.key.removeprefix("h#")
    now = ctx.now_ms()
    lease_until = int(holder.data.get("lease_until_ms", 0))
    if lease_until <= now:
        if slots.release(agent, run_id, only=holder):
            ctx.report.flow_reclaimed += 1
        return
    if now - (lease_until - lease_ms) < stall_after_ms:
        return  # renewed recently: its run may be about to say it runs
    try:
        status = runtime.store.get_run(run_id).status
    except RunNotFoundError:
        status = None
    if status not in _RUNS_WITH_SLOTS and slots.release(agent, run_id, only=holder):
        ctx.report.flow_reclaimed += 1


def _requeue(ctx: SweepContext, run_id: str) -> None:
    runtime = ctx.runtime
    header = runtime.store.get_run(run_id)  # consistent: the index copy may be stale
    if header.status is not RunStatus.QUEUED:
        return
    if _past_its_time_limit(header, ctx.now_ms()):
        # Nothing of it runs while it waits, not even its clock: its invocation ends it
        # TIMED_OUT without a slot (a time limit needs no agent code).
        runtime.publisher.publish([step_ready(run_id, "flow: time limit")])
        return
    try:
        definition = resolve_pinned(runtime.registry, header)
    except VersionUnavailableError:
        return  # its code is not deployed here: the version sweep speaks for it
    if definition.concurrency is None:
        # Its agent has no limit any more: its Step Ready lets it go on (``unqueue``).
        runtime.publisher.publish([step_ready(run_id, "flow: no limit")])
        return
    waiting = header.waiting_on or {}
    key = str(waiting.get("key", admission.run_key(definition.concurrency, header)))
    priority = int(waiting.get("priority", priority_of(header)))
    queued_at = int(waiting.get("queued_at_ms", header.created_at_ms))
    slots = Slots(runtime.store.flow_items())
    if slots.is_queued(definition.name, key, priority, queued_at, run_id):
        return
    admission.enqueue_started(runtime.store, runtime.clock, runtime.publisher, definition, header)
    ctx.report.flow_requeued += 1


def _past_its_time_limit(header: RunHeader, now_ms: int) -> bool:
    limit = deadline_ms(header)
    return limit is not None and now_ms >= limit


def _rewake(ctx: SweepContext, run_id: str) -> None:
    runtime = ctx.runtime
    header = runtime.store.get_run(run_id)
    if header.status is not RunStatus.BUDGET_EXCEEDED:
        return
    root = budget_root(header)
    state = None if root is None else Budgets(runtime.store.flow_items()).state(root)
    if state is None or not state.exceeded or _past_its_time_limit(header, ctx.now_ms()):
        runtime.publisher.publish([step_ready(run_id, "budget extended")])
        ctx.report.budget_woken += 1
