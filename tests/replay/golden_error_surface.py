"""Golden journals of the errors a user sees (issue 32), kept under golden/error-surface/.

The runs a failed ``wait_for_condition`` check, a failed callback and
``BatchResult.throw_if_error`` end, caught by the agent (which returns what it saw) or not
(the run fails). The ``*-wrapper-*`` files were recorded before the change that surfaces the
original error, when the journal held the wrapper's own type and message
(``ConditionCheckFailedError: condition check 1 failed: StatusCheckError: ...``): they must
keep replaying to the same result and the same run error. The ``*-surfaced-*`` files were
recorded since (the original's type and message, the wrapper beside them). Never re-record
them; record new files only, by name: ``python -m tests.replay.golden_error_surface FILE...``.

They live in a sub-folder of tests/replay/golden/ (its own cases, its own agents) so that the
main golden suite's one-file-per-case check is not concerned.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_agents import (
    NO_RETRY,
    AgentRegistry,
    BatchFailedError,
    CallbackFailedError,
    CompletionPolicy,
    ConditionCheckFailedError,
    DurableContext,
    SkipClock,
    agent,
)
from durable_agents.engine.operations.callback import complete_callback
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.export import snapshot_to_dict
from durable_agents.journal.memory import InMemoryJournal

GOLDEN_DIR = Path(__file__).resolve().parent / "golden" / "error-surface"

registry = AgentRegistry()


class StatusCheckError(Exception):
    """What the polled service's check raises."""


def _check(state: int) -> int:
    raise StatusCheckError(f"status service answered 503 for state {state}")


def _seen(exc: BaseException) -> dict[str, Any]:
    """What the agent saw: the raised type and message, and the wrapper's fields.

    Not ``__cause__``: before the change it was the live error on a first run and nothing on
    a replay, so an agent returning it would not replay to the same result.
    """
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "error_type": getattr(exc, "error_type", None),
        "error_message": getattr(exc, "error_message", None),
    }


@agent(name="errors-condition", version="1", registry=registry)
def condition_agent(ctx: DurableContext, catch: bool) -> dict[str, Any]:
    """A polled check that raises; caught (the run returns what it saw) or not (it fails)."""
    try:
        ctx.wait_for_condition(_check, initial_state=1, until=lambda s: s > 3, name="poll")
    except ConditionCheckFailedError as exc:
        if not catch:
            raise
        return _seen(exc)
    return {}


@agent(name="errors-callback", version="1", registry=registry)
def callback_agent(ctx: DurableContext, catch: bool) -> dict[str, Any]:
    """A callback the external system fails; caught or not."""
    callback = ctx.create_callback("approval")
    try:
        callback.result()
    except CallbackFailedError as exc:
        if not catch:
            raise
        return _seen(exc)
    return {}


def _declined(child: DurableContext) -> int:
    def charge() -> int:
        raise ValueError("card declined")

    return int(child.step(charge, name="charge", retry=NO_RETRY))


def _timed_out(child: DurableContext) -> int:
    def ship() -> int:
        raise TimeoutError("carrier timed out")

    return int(child.step(ship, name="ship", retry=NO_RETRY))


@agent(name="errors-batch", version="1", registry=registry)
def batch_agent(ctx: DurableContext, catch: bool) -> dict[str, Any]:
    """A batch whose failures are tolerated, then ``throw_if_error``; caught or not."""
    batch = ctx.parallel(
        [lambda c: 1, _declined, _timed_out],
        name="fan",
        completion=CompletionPolicy(tolerated_failure_count=2),
    )
    try:
        batch.throw_if_error()
    except BatchFailedError as exc:
        if not catch:
            raise
        return {**_seen(exc), "errors": [e.get("type") for e in exc.errors]}
    return {}


@dataclass(frozen=True)
class Case:
    """One recorded run: file, agent, input (catch or not), the failure a callback gets."""

    file: str
    agent: str
    catch: bool


CASES = [
    Case("errors-condition-v1-wrapper-caught.json", "errors-condition", True),
    Case("errors-condition-v1-wrapper-failed.json", "errors-condition", False),
    Case("errors-callback-v1-wrapper-caught.json", "errors-callback", True),
    Case("errors-callback-v1-wrapper-failed.json", "errors-callback", False),
    Case("errors-batch-v1-wrapper-caught.json", "errors-batch", True),
    Case("errors-batch-v1-wrapper-failed.json", "errors-batch", False),
    # Recorded since: the original error's type and message, the wrapper beside them.
    Case("errors-condition-v1-surfaced-caught.json", "errors-condition", True),
    Case("errors-condition-v1-surfaced-failed.json", "errors-condition", False),
    Case("errors-callback-v1-surfaced-caught.json", "errors-callback", True),
    Case("errors-callback-v1-surfaced-failed.json", "errors-callback", False),
    Case("errors-batch-v1-surfaced-caught.json", "errors-batch", True),
    Case("errors-batch-v1-surfaced-failed.json", "errors-batch", False),
]


def record(case: Case) -> dict[str, Any]:
    """Runs the case to its end on a skip-clock (one operation per invocation).

    A callback is failed by the external system with ``RejectedError: not approved``.
    """
    journal = InMemoryJournal()
    clock = SkipClock()
    stem = case.file.removesuffix(".json")
    runtime = Runtime(journal, registry=registry, clock=clock, run_id_factory=lambda: f"run-{stem}")
    run, _ = runtime.start_run(case.agent, case.catch)
    for _ in range(200):
        outcome = runtime.execute(run.run_id, budget=1, remaining_ms=60_000)
        if outcome.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.FAILED, OutcomeKind.PAUSED):
            break
        waiting = journal.get_run(run.run_id).waiting_on or {}
        if outcome.kind is OutcomeKind.SUSPENDED and waiting.get("kind") == "callback":
            wait = journal.get_wait(str(waiting["callback_id"]))
            complete_callback(
                journal, clock, wait, error_type="RejectedError", error_message="not approved"
            )
            continue
        if outcome.wake_at_ms is not None:
            clock.advance_to(outcome.wake_at_ms)
    data = snapshot_to_dict(journal.load(run.run_id))
    data["description"] = f"{case.agent} run recorded by tests/replay/golden_error_surface.py"
    return data


def main(argv: list[str] | None = None) -> None:
    """Records the golden files named (never every one: old ones must stay as recorded).

    Raises:
        SystemExit: If no file is named.
    """
    names = set(sys.argv[1:] if argv is None else argv)
    if not names:
        raise SystemExit("name the files to record (old ones must stay as they were recorded)")
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        if case.file in names:
            path = GOLDEN_DIR / case.file
            path.write_text(json.dumps(record(case), indent=2, sort_keys=True) + "\n")
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
