"""The reconciler's retention sweep: stamping every item of a finished run with its expiry.

The rule (who expires when, and the grace for late writes) is the journal's:
``durable_agents.journal.retention``. This sweep applies it to the items the finishing write
did not touch (ADR 0012).
"""

from __future__ import annotations

from functools import partial

from durable_agents.admin.sweeping import SweepContext


def stamp_expiring_runs(ctx: SweepContext) -> None:
    """The sweep step: stamps the items of every finished run due for it (see the module)."""
    now, store = ctx.now_ms(), ctx.runtime.store
    pages = ctx.pages(
        "expiring runs",
        lambda cursor: store.expiring_runs_page(now, limit=ctx.page_size, cursor=cursor),
        check_time="item",
    )
    for listed in pages:
        ctx.unit(f"run {listed.run_id}", partial(_stamp_one, ctx, listed.run_id, now))


def _stamp_one(ctx: SweepContext, run_id: str, now_ms: int) -> None:
    ctx.report.items_stamped += ctx.runtime.store.stamp_expiry(run_id, now_ms)
