"""``durable-agents runs cancel|terminate RUN_ID --reason ...``: what they ask, and what they say.

The commands (``durable_agents_local.cli.remote``) ask the Api (``POST /runs/{run_id}/cancel`` or
``/terminate``), local mode's or a deployed stack's: the Api records the request and wakes the
run; its StepRunner then ends it (``durable_agents.engine.cancellation``).
"""

from __future__ import annotations

from typing import Any

ACTIONS = {
    "cancel": "ask a run to stop: its agent sees RunCancelledError and may clean up",
    "terminate": "stop a run at once, without running its agent code again",
}


def describe(run: dict[str, Any]) -> str:
    """One line: what was asked of the run, and its status now."""
    request = run.get("cancel_requested") or {}
    return (
        f"{run['run_id']}: {request.get('mode', '?')} requested by {request.get('by', '?')}"
        f" ({request.get('reason') or 'no reason given'}); status now {run['status']}"
    )
