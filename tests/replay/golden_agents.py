"""Agents whose recorded journals are kept as golden files (besides the example agent).

Changing these functions — or the runtime's replay rules — in a way that would break runs
already in flight makes tests/replay/test_golden.py fail. That is the point: bump the agent
version (or write a migration) instead of editing the golden file.
"""

from __future__ import annotations

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, agent

registry = AgentRegistry()
_attempts: dict[str, int] = {}


class CardDeclinedError(Exception):
    """A business error the agent handles."""


def flaky_lookup(key: str) -> dict[str, str]:
    """Fails twice per key, then answers (drives the durable retry path)."""
    _attempts[key] = _attempts.get(key, 0) + 1
    if _attempts[key] < 3:
        raise TimeoutError(f"lookup {key} timed out")
    return {"key": key, "tier": "gold"}


def decline() -> None:
    """Always declines (a recorded failure the agent catches)."""
    raise CardDeclinedError("card ending 4242 declined")


@agent(name="golden-checkout", version="1", registry=registry)
def checkout(ctx: DurableContext, order_id: str) -> dict[str, object]:
    """Retries, a caught failure, a child scope, a timer and the deterministic helpers."""
    customer = ctx.step(
        flaky_lookup,
        order_id,
        name="lookup-customer",
        retry=RetryPolicy(max_attempts=5, initial_delay_seconds=2, jitter=0.5),
    )
    try:
        ctx.step(decline, name="charge-primary-card", retry=RetryPolicy(max_attempts=1))
        paid_with = "primary"
    except CardDeclinedError as exc:
        paid_with = f"backup ({exc})"

    def pack(child: DurableContext) -> list[str]:
        return [child.step(lambda i=i: f"box-{i}", name=f"pack-{i}") for i in range(2)]

    boxes = ctx.run_in_child_context(pack, name="packing")
    ctx.wait(3600, name="await-courier")
    shipped_at = ctx.now()
    return {
        "customer": customer,
        "paid_with": paid_with,
        "boxes": boxes,
        "shipped_at": shipped_at.isoformat(),
        "tracking": str(ctx.uuid()),
    }
