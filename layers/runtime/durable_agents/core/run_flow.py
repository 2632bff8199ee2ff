"""Flow control's facts on a run header (``RunHeader.flow``, ADR 0030): read and made once.

Below the engine, so that the code that creates runs (``engine.run_starts``) and the code
that enforces flow control (``engine.flow``) both read them without importing each other.
"""

from __future__ import annotations

from typing import Any

from durable_agents.core.models import RunHeader

__all__ = ["NORMAL_PRIORITY", "budget_root", "priority_of", "tree_flow"]

NORMAL_PRIORITY = 3
"""A run's priority unless it was started with one (1 highest … 5 lowest)."""


def priority_of(header: RunHeader) -> int:
    """The run's priority (``NORMAL_PRIORITY`` unless it was started with one)."""
    return int((header.flow or {}).get("priority", NORMAL_PRIORITY))


def budget_root(header: RunHeader) -> str | None:
    """The run whose budget the run's model calls count against (None: no budget)."""
    flow = header.flow or {}
    root = flow.get("root")
    if isinstance(root, str):
        return root
    return header.run_id if flow.get("budget") else None


def tree_flow(
    parent: RunHeader | None, priority: int | None, budget: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A new run's ``RunHeader.flow``: its priority, and its tree's budget or root.

    A sub-agent (``parent`` given) counts against its parent's tree and, unless told
    otherwise, runs at its parent's priority; a root keeps its own ``budget``.
    """
    flow: dict[str, Any] = {}
    if priority is None and parent is not None:
        priority = (parent.flow or {}).get("priority")
    if priority is not None and priority != NORMAL_PRIORITY:
        flow["priority"] = priority
    if parent is not None:
        root = budget_root(parent)
        if root is not None:
            flow["root"] = root
    elif budget:
        flow["budget"] = budget
    return flow or None
