"""The recorded runs kept under tests/replay/golden/, and how to record them again."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_agents import AgentRegistry, SkipClock
from durable_agents.admin.migration_commit import migrate_run
from durable_agents.agent import default_registry
from durable_agents.aws.deployment import resolve_resource
from durable_agents.engine.inbox import send_event
from durable_agents.engine.operations.callback import complete_callback
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.export import snapshot_to_dict
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.llm.scripted import ScriptedProvider

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"


@dataclass(frozen=True)
class GoldenCase:
    """One recorded run.

    Attributes:
        file: The golden file name.
        agent: The agent name.
        input: The run input.
        stop_at_wait: Record only up to this wait (an in-flight run), or to the end if None.
        registry: Which registry holds the agent ("example" = the default registry): today's
            deployment, on which the run replays.
        version: The agent version the recorded run is pinned to (after a migration: the
            version it was migrated to).
        recorded_on: "earlier" to start the run on the deployment before v2
            (``golden_agents.earlier_registry``: a run of an older version, or pinning older
            prompts); None to start it on today's.
        migrate_at_wait: Migrate the run (on today's deployment) when it reaches this wait.
        migrate_to: The version to migrate it to.
        events: Sent one by one (``message`` events) each time the run waits for one.
        model_script: The scripted model's file, for agents that call one.
        rerun_from: Record the run to its end, then re-run it from this operation (ADR 0027)
            and keep the rerun's journal (copied records, reused calls) instead.
        callbacks: Completed one by one (their results) each time the run waits for a
            callback.
    """

    file: str
    agent: str
    input: Any
    stop_at_wait: str | None
    registry: str
    version: str = "1"
    recorded_on: str | None = None
    migrate_at_wait: str | None = None
    migrate_to: str | None = None
    events: tuple[Any, ...] = ()
    model_script: str | None = None
    rerun_from: str | None = None
    callbacks: tuple[Any, ...] = ()

    def resolve_registry(self) -> AgentRegistry:
        """Imports the agent's module and returns its registry."""
        if self.registry == "example":
            import agents.example

            return default_registry
        if self.registry == "chat":
            import agents.chat  # noqa: F401 - registers example-chat

            return default_registry
        from tests.replay.golden_agents import registry

        return registry

    def recording_registry(self) -> AgentRegistry:
        """The deployment the run started on (``recorded_on``)."""
        if self.recorded_on == "earlier":
            from tests.replay.golden_agents import earlier_registry

            return earlier_registry()
        return self.resolve_registry()


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
    # golden-ticket: v1 runs (started before v2 was deployed) and v2 runs, side by side.
    GoldenCase(
        "golden-ticket-v1-completed.json",
        "golden-ticket",
        "order-2001",
        None,
        "golden",
        recorded_on="earlier",
    ),
    GoldenCase(
        "golden-ticket-v1-waiting.json",
        "golden-ticket",
        "order-2002",
        "cool-off",
        "golden",
        recorded_on="earlier",
    ),
    GoldenCase(
        "golden-ticket-v2-completed.json", "golden-ticket", "order-2003", None, "golden", "2"
    ),
    GoldenCase(
        "golden-ticket-v2-waiting.json", "golden-ticket", "order-2004", "cool-off", "golden", "2"
    ),
    # A v1 run migrated to v2 while it waited (a run_migrated entry, a transformed result).
    GoldenCase(
        "golden-ticket-v1-migrated-v2-completed.json",
        "golden-ticket",
        "order-2005",
        None,
        "golden",
        "2",
        recorded_on="earlier",
        migrate_at_wait="cool-off",
        migrate_to="2",
    ),
    GoldenCase(
        "golden-ticket-v1-migrated-v2-waiting.json",
        "golden-ticket",
        "order-2006",
        "cool-off",
        "golden",
        "2",
        recorded_on="earlier",
        migrate_at_wait="cool-off",
        migrate_to="2",
    ),
    # A conversation fed by messages sent into the run (ctx.wait_for_event).
    GoldenCase(
        "example-chat-v1-completed.json",
        "example-chat",
        {"message": "What is durable execution?", "idle_timeout_seconds": 600},
        None,
        "chat",
        events=({"text": "and in French?"}, {"text": "bye"}),
        model_script="agents:scripts/chat.json",
    ),
    GoldenCase(
        "example-chat-v1-waiting.json",
        "example-chat",
        {"message": "What is durable execution?", "idle_timeout_seconds": 600},
        "message",
        "chat",
        events=({"text": "and in French?"},),
        model_script="agents:scripts/chat.json",
    ),
    # Batches as the runtime recorded them before batch records referred to their branches:
    # each batch record holds every branch's value a second time (its own record holds it
    # too). Never re-record these two: runs recorded so are in flight and must keep replaying
    # (tests/replay/test_golden_batches.py checks they still hold the values).
    GoldenCase("golden-fanout-v1-completed.json", "golden-fanout", "order-3001", None, "golden"),
    GoldenCase(
        "golden-fanout-v1-waiting.json",
        "golden-fanout",
        "order-3002",
        "ship-window",
        "golden",
    ),
    # The same agent's batches as recorded since: batch records refer to their branches (which
    # branches succeeded or failed), and the branch records alone hold the values.
    GoldenCase(
        "golden-fanout-v1-branch-refs-completed.json",
        "golden-fanout",
        "order-3003",
        None,
        "golden",
    ),
    GoldenCase(
        "golden-fanout-v1-branch-refs-waiting.json",
        "golden-fanout",
        "order-3004",
        "ship-window",
        "golden",
    ),
    # A rerun from the start of a finished run: its tool call reused from the original's
    # ledger (a SUCCEEDED entry "via reused"), nothing copied; and one from the tool call on,
    # whose journal starts with the copied count-boxes record.
    GoldenCase(
        "golden-shop-v1-rerun-start-completed.json",
        "golden-shop",
        "order-4001",
        None,
        "golden",
        rerun_from="start",
    ),
    GoldenCase(
        "golden-shop-v1-rerun-copied-completed.json",
        "golden-shop",
        "order-4002",
        None,
        "golden",
        rerun_from="print-label",
    ),
    # A run that pinned prompt and model config v1; today's deployment has v2 of both.
    GoldenCase(
        "golden-writer-v1-completed.json",
        "golden-writer",
        "durable prompts",
        None,
        "golden",
        recorded_on="earlier",
    ),
    # A wait_for_callback as the runtime recorded it before the scope was marked (issue 32):
    # a plain child scope. Never re-record it: runs recorded so are in flight and must keep
    # replaying (tests/unit/test_wait_for_callback_kind.py checks it holds no marker).
    GoldenCase(
        "golden-courier-v1-unmarked-completed.json",
        "golden-courier",
        "order-5001",
        None,
        "golden",
        callbacks=({"courier": "c-7", "at": "09:00"},),
    ),
    # The same as recorded since: the scope's record marked with sub-kind wait_for_callback.
    GoldenCase(
        "golden-courier-v1-completed.json",
        "golden-courier",
        "order-5002",
        None,
        "golden",
        callbacks=({"courier": "c-8", "at": "10:00"},),
    ),
    # Batches given serdes= as the runtime recorded them when serdes= meant each branch's
    # value only (issue 32): no marker in the batch records, which refer to their branches.
    # Never re-record it: runs recorded so are in flight and must keep replaying
    # (tests/unit/test_batch_serdes_whole.py checks it holds no marker).
    GoldenCase(
        "golden-packing-v1-item-form-completed.json",
        "golden-packing",
        "order-6001",
        None,
        "golden",
    ),
    # The same agent as recorded since: serdes= alone encodes each branch's value and, in the
    # batch record (under "batch"), the BatchResult as a whole.
    GoldenCase("golden-packing-v1-completed.json", "golden-packing", "order-6002", None, "golden"),
    # item_serdes= alone (records referring to branches, no marker), and beside a serdes= that
    # encodes only the whole batch.
    GoldenCase(
        "golden-packing-items-v1-completed.json",
        "golden-packing-items",
        "order-6003",
        None,
        "golden",
    ),
]


def record(case: GoldenCase) -> dict[str, Any]:
    """Runs the case in faithful mode on a skip-clock and returns the journal export."""
    journal = InMemoryJournal()
    clock = SkipClock()
    providers: dict[str, Any] | None = None
    if case.model_script:
        script = ScriptedProvider.from_file(resolve_resource(case.model_script))
        providers = {"scripted": script}
    stem = case.file.removesuffix(".json")
    # A rerun case makes two runs: the original, then the rerun kept as the golden journal.
    ids = iter([f"run-{stem}", f"run-{stem}-rerun"] if case.rerun_from else [f"run-{stem}"])
    runtime = Runtime(
        journal,
        registry=case.recording_registry(),
        clock=clock,
        run_id_factory=lambda: next(ids),
        providers=providers,
    )
    run, _ = runtime.start_run(case.agent, case.input)
    _drive(case, runtime, journal, clock, run.run_id)
    if case.rerun_from:
        _, rerun, _ = runtime.rerun(run.run_id, case.rerun_from)
        assert rerun is not None
        _drive(case, runtime, journal, clock, rerun.run_id)
        run = rerun
    data = snapshot_to_dict(journal.load(run.run_id))
    data["description"] = (
        f"{case.agent} run recorded by tests/replay/golden_cases.py"
        + (f", a rerun from {case.rerun_from!r} of a completed run" if case.rerun_from else "")
        + (
            f", migrated to version {case.migrate_to!r} at wait {case.migrate_at_wait!r}"
            if case.migrate_to
            else ""
        )
        + (f", in flight at wait {case.stop_at_wait!r}" if case.stop_at_wait else ", completed")
    )
    return data


def _drive(
    case: GoldenCase, runtime: Runtime, journal: InMemoryJournal, clock: SkipClock, run_id: str
) -> None:
    """Runs ``run_id`` one operation per invocation until it ends (or ``stop_at_wait``)."""
    run = journal.get_run(run_id)
    migrated = False
    events = list(case.events)
    callbacks = list(case.callbacks)
    for number in range(1000):
        outcome = runtime.execute(run.run_id, budget=1, remaining_ms=60_000)
        if outcome.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.FAILED, OutcomeKind.PAUSED):
            break
        waiting = journal.get_run(run.run_id).waiting_on or {}
        if outcome.kind is OutcomeKind.SUSPENDED and waiting.get("kind") == "callback":
            # A callback's suspension has no wake time: the external system completes it.
            if not callbacks:
                break
            wait = journal.get_wait(str(waiting["callback_id"]))
            complete_callback(journal, clock, wait, result=callbacks.pop(0))
            continue
        if outcome.kind is OutcomeKind.SUSPENDED and outcome.wake_at_ms is not None:
            at = waiting.get("op_id", "")
            if waiting.get("kind") == "event" and events:
                event_id = f"golden-{number}"
                send_event(journal, clock, run.run_id, "message", events.pop(0), event_id)
                continue
            if case.migrate_at_wait and not migrated and f":{case.migrate_at_wait}:" in at:
                # Today's deployment moves the suspended run; it goes on on the new code.
                runtime = Runtime(journal, registry=case.resolve_registry(), clock=clock)
                migrate_run(runtime, run.run_id, case.migrate_to or "", by="golden_cases")
                migrated = True
            if case.stop_at_wait and f":{case.stop_at_wait}:" in at:
                break
            clock.advance_to(outcome.wake_at_ms)


def main(argv: list[str] | None = None) -> None:
    """Re-records golden files: the ones named, or every one.

    Re-record an existing file only when a change is meant to break in-flight runs; name the
    new files when adding a version (``python -m tests.replay.golden_cases FILE...``), so the
    others stay byte for byte what was recorded.
    """
    names = set(sys.argv[1:] if argv is None else argv)
    GOLDEN_DIR.mkdir(exist_ok=True)
    for case in CASES:
        if names and case.file not in names:
            continue
        path = GOLDEN_DIR / case.file
        path.write_text(json.dumps(record(case), indent=2, sort_keys=True) + "\n")
        print(f"wrote {path.relative_to(Path.cwd())}")


if __name__ == "__main__":
    main()
