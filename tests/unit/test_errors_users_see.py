"""The error a user sees is the one that happened (issue 32, item 3).

A ``wait_for_condition`` whose check raised, a callback the external system failed and
``BatchResult.throw_if_error`` raise their typed wrappers (``ConditionCheckFailedError``,
``CallbackFailedError``, ``BatchFailedError``: still caught by name), but the message, the
type name the journal records, and what the Api, the console and the CLI show are the
original error's; the wrapper keeps it as ``__cause__`` / ``wrapped`` and in its fields. On the
first run and on every replay alike (faithful mode replays each invocation), on every journal.

Runs recorded before the change (``tests/replay/golden/error-surface/*-wrapper-*``) replay
with the wrapper's type and message they recorded; those recorded since (``*-surfaced-*``)
replay as recorded too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.console_timeline import render_timeline_page
from durable_agents import (
    NO_RETRY,
    AgentRegistry,
    BatchFailedError,
    CallbackFailedError,
    CompletionPolicy,
    ConditionCheckFailedError,
    DurableContext,
    SkipClock,
    StepError,
    WrapperError,
    agent,
)
from durable_agents.admin.views import run_view
from durable_agents.core.models import EntryType, RunStatus
from durable_agents.core.serde_errors import WRAPPER_KEY, error_info, rebuild_error
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.export import snapshot_from_dict
from durable_agents.journal.store import JournalStore
from durable_agents_local.cli.tables import run_details
from durable_agents_local.testing import AgentTestRunner
from tests.replay import golden_error_surface as golden

MODES = ["continuous", "faithful"]


class StatusCheckError(Exception):
    """What the polled status service's check raises."""


def _check(state: int) -> int:
    raise StatusCheckError(f"status service down at {state}")


def _seen(exc: BaseException) -> dict[str, Any]:
    cause = exc.__cause__
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "cause": None if cause is None else [type(cause).__name__, str(cause)],
        "wrapped_is_cause": getattr(exc, "wrapped", None) is cause,
    }


def _declined(child: DurableContext) -> int:
    def charge() -> int:
        raise ValueError("card declined")

    return int(child.step(charge, name="charge", retry=NO_RETRY))


def _timed_out(child: DurableContext) -> int:
    def ship() -> int:
        raise TimeoutError("carrier timed out")

    return int(child.step(ship, name="ship", retry=NO_RETRY))


def _agents(catch: bool) -> dict[str, Any]:
    registry = AgentRegistry()

    @agent(name="condition", version="1", registry=registry)
    def condition(ctx: DurableContext, _: Any) -> dict[str, Any]:
        try:
            ctx.wait_for_condition(_check, initial_state=7, until=bool, name="poll")
        except ConditionCheckFailedError as exc:
            if not catch:
                raise
            return {**_seen(exc), "fields": [exc.attempt, exc.last_state, exc.error_type]}
        return {}

    @agent(name="callback", version="1", registry=registry)
    def callback(ctx: DurableContext, _: Any) -> dict[str, Any]:
        handle = ctx.create_callback("approval")
        try:
            handle.result()
        except CallbackFailedError as exc:
            if not catch:
                raise
            return {**_seen(exc), "fields": [exc.callback_id, exc.error_type, exc.error_message]}
        return {}

    @agent(name="batch", version="1", registry=registry)
    def batch(ctx: DurableContext, _: Any) -> dict[str, Any]:
        result = ctx.parallel(
            [lambda c: 1, _declined, _timed_out],
            name="fan",
            completion=CompletionPolicy(tolerated_failure_count=2),
        )
        try:
            result.throw_if_error()
        except BatchFailedError as exc:
            if not catch:
                raise
            return {**_seen(exc), "errors": [e["type"] for e in exc.errors]}
        return {}

    return {"condition": condition, "callback": callback, "batch": batch}


def _run(journal: JournalStore, name: str, catch: bool, mode: str) -> tuple[AgentTestRunner, Any]:
    runner = AgentTestRunner(_agents(catch)[name], journal=journal, mode=mode)  # type: ignore[arg-type]
    result = runner.run(None)
    if name == "callback":
        result = runner.complete_callback(
            result.run_id, "approval", error_type="RejectedError", error_message="not approved"
        )
    return runner, result


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_check_is_seen_as_the_check_s_error(journal: JournalStore, mode: str) -> None:
    _, result = _run(journal, "condition", True, mode)
    assert result.output == {
        "type": "ConditionCheckFailedError",
        "message": "status service down at 7",
        "cause": ["StatusCheckError", "status service down at 7"],
        "wrapped_is_cause": True,
        "fields": [1, 7, "StatusCheckError"],
    }
    scope = _failed(journal, result.run_id, "poll")
    assert (scope.type, scope.message) == ("StatusCheckError", "status service down at 7")
    assert scope.module == __name__
    assert (scope.data or {})[WRAPPER_KEY]["type"] == "ConditionCheckFailedError"


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_callback_is_seen_as_the_external_system_s_error(
    journal: JournalStore, mode: str
) -> None:
    _, result = _run(journal, "callback", True, mode)
    output = result.output
    assert output["type"] == "CallbackFailedError"
    assert output["message"] == "not approved"
    # The external error has no class here: a StepError with the type name it sent.
    assert output["cause"] == ["StepError", "RejectedError: not approved"]
    assert output["wrapped_is_cause"] is True
    assert output["fields"][0].startswith("cb-") and output["fields"][1:] == [
        "RejectedError",
        "not approved",
    ]
    record = _failed(journal, result.run_id, "approval")
    assert (record.type, record.message) == ("RejectedError", "not approved")


@pytest.mark.parametrize("mode", MODES)
def test_throw_if_error_raises_the_first_failed_branch_s_error(
    journal: JournalStore, mode: str
) -> None:
    _, result = _run(journal, "batch", True, mode)
    assert result.output == {
        "type": "BatchFailedError",
        "message": "card declined",
        "cause": ["ValueError", "card declined"],
        "wrapped_is_cause": True,
        "errors": ["ValueError", "TimeoutError"],  # every failed branch, as get_errors()
    }


CASES = {
    "condition": ("StatusCheckError", "status service down at 7"),
    "callback": ("RejectedError", "not approved"),
    "batch": ("ValueError", "card declined"),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("mode", MODES)
def test_a_run_they_fail_shows_the_original_error_in_the_api_console_and_cli(
    journal: JournalStore, name: str, mode: str
) -> None:
    runner, result = _run(journal, name, False, mode)
    assert result.status == "FAILED"
    expected_type, expected_message = CASES[name]
    header = journal.get_run(result.run_id)
    assert header.error is not None
    assert (header.error.type, header.error.message) == (expected_type, expected_message)
    # The Api's view of the run (GET /runs/{id}), the CLI's ``runs get`` and the console page.
    view = run_view(header)
    assert (view["error"]["type"], view["error"]["message"]) == CASES[name]
    details = run_details(view, width=400)
    assert f'"type":"{expected_type}"' in details.replace(" ", "")
    assert "failed:" not in details.split("traceback:")[0]  # no wrapper's summary
    html = render_timeline_page(runner.journal.load(result.run_id), [], root="../../")
    assert f"{expected_type}: {expected_message}" in html


def test_the_record_rebuilds_the_wrapper_with_the_original_as_its_cause() -> None:
    try:
        try:
            raise StatusCheckError("down")
        except StatusCheckError as inner:
            raise ConditionCheckFailedError(
                2, {"s": 1}, "StatusCheckError", "down", wrapped=inner
            ) from inner
    except ConditionCheckFailedError as exc:
        info = error_info(exc)
    assert (info.type, info.message, info.module) == ("StatusCheckError", "down", __name__)
    rebuilt = rebuild_error(info)
    assert isinstance(rebuilt, ConditionCheckFailedError) and isinstance(rebuilt, WrapperError)
    assert (rebuilt.attempt, rebuilt.last_state, str(rebuilt)) == (2, {"s": 1}, "down")
    assert isinstance(rebuilt.__cause__, StatusCheckError) and rebuilt.wrapped is rebuilt.__cause__
    assert error_info(rebuilt).type == "StatusCheckError"  # recorded again the same way


def test_a_wrapper_of_a_wrapper_rebuilds_both() -> None:
    """A batch whose first failed branch failed on a condition: both wrappers come back."""
    try:
        try:
            raise StatusCheckError("down")
        except StatusCheckError as inner:
            raise ConditionCheckFailedError(
                1, 0, "StatusCheckError", "down", wrapped=inner
            ) from inner
    except ConditionCheckFailedError as exc:
        branch = error_info(exc)
    outer = BatchFailedError("all_completed", [branch.to_dict()], "down", wrapped=None)
    outer.wrapped = rebuild_error(branch)
    info = error_info(outer)
    assert (info.type, info.message) == ("StatusCheckError", "down")
    rebuilt = rebuild_error(info)
    assert isinstance(rebuilt, BatchFailedError)
    assert isinstance(rebuilt.__cause__, ConditionCheckFailedError)
    assert isinstance(rebuilt.__cause__.__cause__, StatusCheckError)
    again = error_info(rebuilt)  # recorded again the same way (its story aside)
    assert (again.type, again.message, again.module, again.data) == (
        info.type,
        info.message,
        info.module,
        info.data,
    )


def test_a_record_naming_a_class_that_is_no_wrapper_rebuilds_the_original_only() -> None:
    info = error_info(CallbackFailedError("cb-1", "RejectedError", "no"))
    data = dict(info.data or {})
    data[WRAPPER_KEY] = {**data[WRAPPER_KEY], "module": "builtins", "type": "ValueError"}
    rebuilt = rebuild_error(info.__class__(info.type, info.message, info.module, data))
    assert isinstance(rebuilt, StepError) and rebuilt.original_type == "RejectedError"


# --- Runs recorded before the change, and since ---------------------------------------------


def _install(journal: JournalStore, file: str) -> tuple[Runtime, dict[str, Any]]:
    data = json.loads((golden.GOLDEN_DIR / file).read_text())
    snapshot = snapshot_from_dict(data)
    recorded = snapshot.header
    journal.create_run(
        recorded.replace(
            status=RunStatus.RUNNING, result=None, error=None, wake_at_ms=None, waiting_on=None
        )
    )
    journal.commit(recorded.run_id, snapshot.entries)
    clock = SkipClock(start_ms=recorded.updated_at_ms)
    return Runtime(journal, registry=golden.registry, clock=clock), data


def _replayed(journal: JournalStore, file: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    runtime, data = _install(journal, file)
    run_id = data["header"]["run_id"]
    outcome = runtime.execute(run_id, budget=0)  # replay only: nothing may execute
    assert outcome.executed == []
    return outcome, data, run_view(journal.get_run(run_id))


def test_every_golden_error_surface_case_has_its_file() -> None:
    on_disk = sorted(p.name for p in golden.GOLDEN_DIR.glob("*.json"))
    assert on_disk == sorted(c.file for c in golden.CASES)


OLD_REPLAYED_AS_RECORDED = [
    "errors-condition-v1-wrapper-caught.json",
    "errors-condition-v1-wrapper-failed.json",
    "errors-callback-v1-wrapper-caught.json",
    "errors-callback-v1-wrapper-failed.json",
]
SURFACED = [c.file for c in golden.CASES if "-surfaced-" in c.file]


@pytest.mark.parametrize("file", OLD_REPLAYED_AS_RECORDED + SURFACED)
def test_recorded_runs_replay_with_the_errors_they_recorded(
    journal: JournalStore, file: str
) -> None:
    outcome, data, view = _replayed(journal, file)
    header = data["header"]
    if header["status"] == "SUCCEEDED":
        assert outcome.kind is OutcomeKind.SUCCEEDED, outcome.detail
        assert view["result"] == json.loads(header["result"])
    else:
        assert outcome.kind is OutcomeKind.FAILED, outcome.detail
        assert (view["error"]["type"], view["error"]["message"]) == (
            header["error"]["type"],
            header["error"]["message"],
        )


def test_runs_recorded_before_hold_the_wrapper_s_words_and_replay_them() -> None:
    """The ``-wrapper-`` files are what the journal held before: the wrapper's type/message."""
    condition = json.loads((golden.GOLDEN_DIR / OLD_REPLAYED_AS_RECORDED[0]).read_text())
    assert json.loads(condition["header"]["result"])["message"].startswith(
        "condition check 1 failed: StatusCheckError: "
    )
    callback = json.loads((golden.GOLDEN_DIR / OLD_REPLAYED_AS_RECORDED[3]).read_text())
    assert callback["header"]["error"]["type"] == "CallbackFailedError"
    assert "failed: RejectedError: not approved" in callback["header"]["error"]["message"]


def test_throw_if_error_in_a_run_recorded_before_raises_the_new_error(
    journal: JournalStore,
) -> None:
    """``throw_if_error`` is computed from the batch's record, never recorded itself.

    A run recorded before the change that caught its error replays with the first failed
    branch's message now (docs/values-and-errors.md says so): the batch's own records are
    unchanged, so nothing diverges unless the agent fed that message into a later
    operation's input.
    """
    outcome, data, view = _replayed(journal, "errors-batch-v1-wrapper-caught.json")
    assert outcome.kind is OutcomeKind.SUCCEEDED, outcome.detail
    before = json.loads(data["header"]["result"])
    assert before["message"] == "batch ended with all_completed: 2 branch(es) failed"
    assert view["result"] == {**before, "message": "card declined"}
    # Uncaught, it failed the run: only the run's header held it (a finished run is not
    # replayed; one replayed shows the first failed branch's error).
    outcome, data, view = _replayed(journal, "errors-batch-v1-wrapper-failed.json")
    assert outcome.kind is OutcomeKind.FAILED, outcome.detail
    assert data["header"]["error"]["type"] == "BatchFailedError"
    assert (view["error"]["type"], view["error"]["message"]) == ("ValueError", "card declined")


def _failed(journal: JournalStore, run_id: str, name: str) -> Any:
    entries = [
        e
        for e in journal.load(run_id).entries
        if e.name == name and e.type is EntryType.FAILED and e.error is not None
    ]
    assert entries, f"no failed record of {name}"
    return entries[-1].error
