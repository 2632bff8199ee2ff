"""The reconciler's retention sweep: stamping every item of a finished run with its expiry.

The rule (who expires when, and the grace for late writes) is the journal's:
``durable_agents.journal.retention``. This sweep applies it to the items the finishing write
did not touch (ADR 0012).
"""

from __future__ import annotations

from functools import partial

from durable_agents.admin.sweeping import SweepContext
from durable_agents.core.models import RunHeader
from durable_agents.core.run_flow import budget_root
from durable_agents.engine.flow.budgets import Budgets
from durable_agents.errors import RunNotFoundError


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
    store = ctx.runtime.store
    try:
        header: RunHeader | None = store.get_run(run_id)
    except RunNotFoundError:
        header = None  # gone already: ``stamp_expiry`` says what is left to do
    if header is not None and header.expires_at_ms is not None and budget_root(header) == run_id:
        # A root's budget (flow items, ADR 0030) expires with it; stamped first, so the
        # run leaves the listing only once its budget is stamped too.
        budgets = Budgets(store.flow_items())
        ctx.report.items_stamped += budgets.expire(run_id, header.expires_at_ms // 1000)
    ctx.report.items_stamped += store.stamp_expiry(run_id, now_ms)
