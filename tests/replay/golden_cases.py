"""The recorded runs kept under tests/replay/golden/, and how to record them again."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_agents import AgentRegistry, InMemoryJournal, Runtime, SkipClock
from durable_agents.agent import default_registry
from durable_agents.journal.export import snapshot_to_dict
from durable_agents.runtime import OutcomeKind

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"


@dataclass(frozen=True)
class GoldenCase:
    """One recorded run.

    Attributes:
        file: The golden file name.
        agent: The agent name.
        input: The run input.
        stop_at_wait: Record only up to this wait (an in-flight run), or to the end if None.
        registry: Which registry holds the agent ("example" = the default registry).
    """

    file: str
    agent: str
    input: Any
    stop_at_wait: str | None
    registry: str

    def resolve_registry(self) -> AgentRegistry:
        """Imports the agent's module and returns its registry."""
        if self.registry == "example":
            import agents.example  # noqa: F401 - registers example-research

            return default_registry
        from tests.replay.golden_agents import registry

        return registry


CASES = [
    GoldenCase(
        "example-research-v1-completed.json",
        "example-research",
        {"topic": "durable execution", "sections": 2, "pause_seconds": 60},
        None,
        "example",
    ),
    GoldenCase(
        "example-research-v1-waiting.json",
        "example-research",
        {"topic": "durable execution", "sections": 2, "pause_seconds": 60},
        "cool-down",
        "example",
    ),
    GoldenCase(
        "golden-checkout-v1-completed.json", "golden-checkout", "order-1001", None, "golden"
    ),
    GoldenCase(
        "golden-checkout-v1-waiting.json",
        "golden-checkout",
        "order-1002",
        "await-courier",
        "golden",
    ),
]


def record(case: GoldenCase) -> dict[str, Any]:
    """Runs the case in faithful mode on a skip-clock and returns the journal export."""
    journal = InMemoryJournal()
    clock = SkipClock()
    runtime = Runtime(
        journal,
        registry=case.resolve_registry(),
        clock=clock,
        run_id_factory=lambda: f"run-{case.file.removesuffix('.json')}",
    )
    run, _ = runtime.start_run(case.agent, case.input)
    for _ in range(1000):
        outcome = runtime.execute(run.run_id, budget=1, remaining_ms=60_000)
        if outcome.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.FAILED, OutcomeKind.PAUSED):
            break
        if outcome.kind is OutcomeKind.SUSPENDED and outcome.wake_at_ms is not None:
            waiting = journal.get_run(run.run_id).waiting_on or {}
            if case.stop_at_wait and f":{case.stop_at_wait}:" in waiting.get("op_id", ""):
                break
            clock.advance_to(outcome.wake_at_ms)
    data = snapshot_to_dict(journal.load(run.run_id))
    data["description"] = f"{case.agent} run recorded by tests/replay/golden_cases.py" + (
        f", in flight at wait {case.stop_at_wait!r}" if case.stop_at_wait else ", completed"
    )
    return data


def main() -> None:
    """Re-records every golden file (only when a change is meant to break in-flight runs)."""
    GOLDEN_DIR.mkdir(exist_ok=True)
    for case in CASES:
        path = GOLDEN_DIR / case.file
        path.write_text(json.dumps(record(case), indent=2, sort_keys=True) + "\n")
        print(f"wrote {path.relative_to(Path.cwd())}")


if __name__ == "__main__":
    main()
