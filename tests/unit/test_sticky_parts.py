"""Sticky continuation (ADR 0017): a parked agent goes on with exactly what a fresh invocation
would hold: the runtime's parts as they are now, and only on the very run it parked in.

Issue 29, defects 4 and 5. A fresh invocation replays the run with the runtime's parts as they
are when it starts (memory store, model providers, credentials, clock, journal store, publisher,
stream sink, wait scheduler, plugins, registry, logger); an agent that parked before one of
them was replaced must not go on with the old one. And a parked agent belongs to one run: a
new run started later under the same id (after the first expired), or another generation of
it, is not the journal it parked on, whatever its counts say.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, agent
from durable_agents.core.clock import SkipClock
from durable_agents.core.credentials import Secret
from durable_agents.core.models import RunStatus
from durable_agents.engine.context import DurableContext
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.memory_store import InMemoryMemoryStore
from durable_agents.engine.plugin_calls import PluginSet
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.engine.sticky.carriers import CARRIERS, CarrierKind, live_agents
from durable_agents.engine.sticky.parking import StickyRuns, WriteTally
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.llm.types import ContentBlock, LlmRequest, LlmResponse, Message, ModelConfig
from durable_agents.plugins import OperationEndInfo, OperationStartInfo, Plugin
from durable_agents.tools import ToolCall, tool

registry = AgentRegistry()
CALLS: Counter[str] = Counter()
MODEL = ModelConfig(name="parts-model", version="1", provider="p", model_id="m-1")
BEFORE: set[int] = set()


def _count(name: str) -> str:
    CALLS[name] += 1
    return name


@pytest.fixture(autouse=True, params=CARRIERS)
def carrier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> CarrierKind:
    """Every test runs with agents parked on greenlets, then on threads."""
    kind: CarrierKind = request.param
    monkeypatch.setattr("durable_agents.engine.sticky.parking.default_carrier", lambda: kind)
    CALLS.clear()
    BEFORE.clear()
    BEFORE.update(id(a) for a in live_agents())
    return kind


def _agent_threads() -> list[Any]:
    """Agents (greenlets or threads) this test started that are still alive."""
    return [a for a in live_agents() if id(a) not in BEFORE]


def _runtime(**parts: Any) -> Runtime:
    parts.setdefault("registry", registry)
    parts.setdefault("clock", SkipClock())
    return Runtime(InMemoryJournal(), sticky=StickyRuns(), **parts)


def _parked(runtime: Runtime, agent_name: str, value: Any = None) -> str:
    """Starts a run and executes its first operation: its agent parks before the second."""
    header, _ = runtime.start_run(agent_name, value)
    runtime.execute(header.run_id, agent_budget=True)
    assert runtime.sticky is not None and len(runtime.sticky) == 1
    return header.run_id


def _drive(runtime: Runtime, run_id: str) -> Any:
    """Executes the run until it leaves RUNNING; its header."""
    for _ in range(20):
        runtime.execute(run_id, agent_budget=True)
        header = runtime.store.get_run(run_id)
        if header.status is not RunStatus.RUNNING:
            return header
    raise AssertionError("the run did not settle")


def _finish(runtime: Runtime) -> None:
    assert runtime.sticky is not None
    runtime.sticky.clear()
    assert not _agent_threads()


# -- defect 4: the runtime's parts, as they are when the parked agent goes on ------------------


@agent(name="parts-memory", version="1", registry=registry)
def remembers(ctx: DurableContext, _: None) -> Any:
    ctx.step(lambda: _count("first"), name="first")
    ctx.memory.put("k", "v")  # parks before this write
    return ctx.memory.get("k")


def test_a_memory_store_given_while_parked_is_the_one_the_agent_writes_and_reads() -> None:
    old, new = InMemoryMemoryStore(), InMemoryMemoryStore()
    runtime = _runtime(memory=old)
    run_id = _parked(runtime, "parts-memory")
    runtime.memory = new
    header = _drive(runtime, run_id)
    assert header.status is RunStatus.SUCCEEDED and header.result == '"v"'
    assert (old.writes, new.writes) == (0, 1)
    _finish(runtime)


class _Named:
    """A model provider that answers with its own name (so the answer says who was asked)."""

    def __init__(self, name: str):
        self.name = name
        self.calls = 0

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        self.calls += 1
        return LlmResponse(content=[ContentBlock.of_text(self.name)], stop_reason="end_turn")

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Any
    ) -> LlmResponse:
        answer = self.converse(config, request)
        on_text(answer.text)
        return answer


@agent(name="parts-llm", version="1", registry=registry)
def asks(ctx: DurableContext, stream: bool) -> str:
    ctx.step(lambda: _count("first"), name="first")
    request = LlmRequest(messages=[Message.user("hello")])
    return ctx.llm("ask", request, config=MODEL, stream=stream).text  # parks before the call


@pytest.mark.parametrize("how", ["replaced", "set"])
def test_a_model_provider_given_while_parked_answers_the_parked_agent(how: str) -> None:
    old, new = _Named("old"), _Named("new")
    runtime = _runtime(providers={"p": old})
    run_id = _parked(runtime, "parts-llm", False)
    if how == "replaced":
        runtime.providers = {"p": new}
    else:  # the runtime's own dict, changed in place
        runtime.providers["p"] = new
    header = _drive(runtime, run_id)
    assert header.status is RunStatus.SUCCEEDED and header.result == '"new"'
    assert (old.calls, new.calls) == (0, 1)
    _finish(runtime)


def test_a_model_provider_taken_away_while_parked_pauses_the_run_as_a_replay_would() -> None:
    old = _Named("old")
    runtime = _runtime(providers={"p": old})
    run_id = _parked(runtime, "parts-llm", False)
    runtime.providers = {}
    header = _drive(runtime, run_id)
    assert header.status is RunStatus.PAUSED and old.calls == 0
    assert header.error is not None and header.error.type == "ProviderNotConfiguredError"
    _finish(runtime)


class _Sink:
    def __init__(self) -> None:
        self.text: list[str] = []

    def begin(self, run_id: str, operation_id: str, attempt: int) -> None:
        pass

    def append(self, run_id: str, operation_id: str, attempt: int, seq: int, text: str) -> None:
        self.text.append(text)

    def end(self, run_id: str, operation_id: str, attempt: int) -> None:
        pass


def test_a_stream_sink_given_while_parked_gets_the_parked_agents_text() -> None:
    old, new = _Sink(), _Sink()
    runtime = _runtime(providers={"p": _Named("model")}, stream_sink=old)
    run_id = _parked(runtime, "parts-llm", True)
    runtime.stream_sink = new
    assert _drive(runtime, run_id).status is RunStatus.SUCCEEDED
    assert (old.text, new.text) == ([], ["model"])
    _finish(runtime)


class _Creds:
    def __init__(self, token: str):
        self.token = token

    def credentials_for(self, purpose: str) -> dict[str, Secret]:
        return {"token": Secret(self.token)}


class _Query(BaseModel):
    q: int


@tool(name="parts-tool", idempotent=True)
def shows_token(request: _Query, call: ToolCall) -> str:
    return call.credentials["token"].reveal()


@agent(name="parts-tool-agent", version="1", registry=registry)
def calls_tool(ctx: DurableContext, _: None) -> str:
    ctx.step(lambda: _count("first"), name="first")
    return str(ctx.tool(shows_token, _Query(q=1)))  # parks before the call


def test_credentials_given_while_parked_are_the_ones_the_tool_receives() -> None:
    runtime = _runtime(credentials=_Creds("old"))
    run_id = _parked(runtime, "parts-tool-agent")
    runtime.credentials = _Creds("new")
    header = _drive(runtime, run_id)
    assert header.status is RunStatus.SUCCEEDED and header.result == '"new"'
    _finish(runtime)


class _Scheduler:
    def __init__(self) -> None:
        self.runs: list[str] = []

    def schedule(self, wait_id: str, due_at_ms: int) -> None:
        pass

    def schedule_run(self, run_id: str, due_at_ms: int) -> None:
        self.runs.append(run_id)


@agent(name="parts-timer", version="1", registry=registry)
def sleeps(ctx: DurableContext, _: None) -> str:
    ctx.step(lambda: _count("first"), name="first")
    ctx.step(lambda: _count("second"), name="second")  # parks before this one
    ctx.wait(60, name="nap")  # the run's wake-up goes to the wait scheduler
    return "woke"


def test_a_wait_scheduler_given_while_parked_schedules_the_parked_agents_wake_up() -> None:
    old, new = _Scheduler(), _Scheduler()
    runtime = _runtime(wait_scheduler=old)
    run_id = _parked(runtime, "parts-timer")
    runtime.wait_scheduler = new
    # "second", then the timer: in one invocation (a wait spends no budget).
    runtime.execute(run_id, agent_budget=True)
    runtime.execute(run_id, agent_budget=True)
    assert runtime.store.get_run(run_id).status is RunStatus.SUSPENDED
    assert (old.runs, new.runs) == ([], [run_id])
    _finish(runtime)


@agent(name="parts-emit", version="1", registry=registry)
def emits(ctx: DurableContext, _: None) -> None:
    ctx.step(lambda: _count("first"), name="first")
    ctx.step(lambda: _count("second"), name="second")  # parks before this one
    ctx.step(lambda: _count("third"), name="third")  # and this one
    ctx.emit("Parts Done", {"ok": True}, name="done")  # through the journal's outbox


def test_a_publisher_given_while_parked_carries_what_the_parked_agent_publishes() -> None:
    old, new = CollectingPublisher(), CollectingPublisher()
    runtime = _runtime(publisher=old)
    run_id = _parked(runtime, "parts-emit")
    published = len(old.events)
    runtime.publisher = new
    assert _drive(runtime, run_id).status is RunStatus.SUCCEEDED
    assert len(old.events) == published  # nothing more after it was replaced
    assert [e.detail_type for e in new.events] == ["Step Ready", "Run Finished"]
    _finish(runtime)


class _CountingStore:
    """Another client of the same journal (a new table client, a new payload store)."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.commits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, *args: Any, **kwargs: Any) -> None:
        self.commits += 1
        self._inner.commit(*args, **kwargs)


def test_a_journal_store_given_while_parked_takes_the_parked_agents_writes() -> None:
    runtime = _runtime()
    run_id = _parked(runtime, "parts-emit")
    new = _CountingStore(runtime.store)
    runtime.store = new  # type: ignore[assignment]
    assert _drive(runtime, run_id).status is RunStatus.SUCCEEDED
    # second's and third's claims and results, done's, and the run's end: all through the new
    # client.
    assert new.commits == 6
    assert runtime.sticky is not None and runtime.sticky.resumed >= 1
    _finish(runtime)


other_registry = AgentRegistry()


@agent(name="parts-code", version="1", registry=registry)
def code_one(ctx: DurableContext, _: None) -> str:
    ctx.step(lambda: _count("first"), name="first")
    return str(ctx.step(lambda: "one", name="second"))  # parks before this one


@agent(name="parts-code", version="1", registry=other_registry)
def code_two(ctx: DurableContext, _: None) -> str:
    ctx.step(lambda: _count("first"), name="first")
    return str(ctx.step(lambda: "two", name="second"))


def test_a_registry_given_while_parked_runs_its_own_code() -> None:
    """The agent's code is the registry's: a replay with the new registry runs the new code,
    which a parked stack cannot switch to, so the run replays."""
    runtime = _runtime()
    run_id = _parked(runtime, "parts-code")
    runtime.registry = other_registry
    header = _drive(runtime, run_id)
    assert header.status is RunStatus.SUCCEEDED and header.result == '"two"'
    assert CALLS["first"] == 1  # replayed, not run again
    _finish(runtime)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@agent(name="parts-logs", version="1", registry=registry)
def logs(ctx: DurableContext, _: None) -> None:
    ctx.step(lambda: _count("first"), name="first")
    ctx.step(lambda: _count("second"), name="second")  # parks before this one
    ctx.logger.info("after second")


def _logger(name: str) -> tuple[logging.Logger, _Lines]:
    logger, lines = logging.getLogger(f"parts-test.{name}"), _Lines()
    logger.handlers[:] = [lines]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger, lines


def test_a_logger_given_while_parked_gets_the_parked_agents_lines() -> None:
    (old, old_lines), (new, new_lines) = _logger("old"), _logger("new")
    runtime = _runtime(logger=old)
    run_id = _parked(runtime, "parts-logs")
    runtime.logger = new
    assert _drive(runtime, run_id).status is RunStatus.SUCCEEDED
    assert (old_lines.lines, new_lines.lines) == ([], ["after second"])
    _finish(runtime)


class _Heard(Plugin):
    def __init__(self) -> None:
        self.heard: list[tuple[str, str, str]] = []

    def on_operation_start(self, info: OperationStartInfo) -> None:
        if not info.replayed:
            self.heard.append(("start", info.name, ""))

    def on_operation_end(self, info: OperationEndInfo) -> None:
        if not info.replayed:
            self.heard.append(("end", info.name, info.outcome))


@pytest.mark.parametrize("before", [False, True], ids=["none-before", "others-before"])
def test_plugins_given_while_parked_hear_the_operation_it_goes_on_with(before: bool) -> None:
    earlier = _Heard()
    runtime = _runtime(plugins=[earlier] if before else [])
    run_id = _parked(runtime, "parts-emit")
    later = _Heard()
    runtime.plugins = PluginSet([later])
    assert _drive(runtime, run_id).status is RunStatus.SUCCEEDED
    assert ("start", "second", "") in later.heard
    assert ("end", "second", "succeeded") in later.heard
    assert ("end", "second", "succeeded") not in earlier.heard
    _finish(runtime)


# -- defect 5: a parked agent goes on only on the run (and generation) it parked in ------------


@agent(name="parts-echo", version="1", registry=registry)
def echo(ctx: DurableContext, tag: str) -> list[str]:
    first = ctx.step(lambda: _count(f"{tag}-a"), name="a")
    second = ctx.step(lambda: _count(f"{tag}-b"), name="b")  # parks before this one
    return [first, second]


RUN_ID = "run-00000000000000e5"


def test_a_parked_agent_does_not_go_on_in_a_new_run_with_its_runs_id() -> None:
    """Run X parks here, finishes elsewhere and expires; a new run X, advanced elsewhere to
    the same counts, must not be handed the old run's agent (its output, its steps)."""
    journal, clock = InMemoryJournal(), SkipClock()
    warm = Runtime(journal, registry=registry, clock=clock, sticky=StickyRuns())
    elsewhere = Runtime(journal, registry=registry, clock=clock)
    warm.start_run("parts-echo", "old", run_id=RUN_ID)
    warm.execute(RUN_ID, agent_budget=True)  # old-a; parks before b
    assert _drive(elsewhere, RUN_ID).status is RunStatus.SUCCEEDED  # old-b, elsewhere
    clock.advance(40 * 86_400_000)  # past its retention
    assert journal.expire(clock.now_ms()) == [RUN_ID]
    elsewhere.start_run("parts-echo", "new", run_id=RUN_ID)
    elsewhere.execute(RUN_ID, agent_budget=True)  # new-a: the old run's counts, on the new run
    outcome = warm.execute(RUN_ID, agent_budget=True)
    assert outcome.kind is OutcomeKind.SUCCEEDED
    header = journal.get_run(RUN_ID)
    assert header.result == '["new-a","new-b"]'
    assert Counter({"old-a": 1, "old-b": 1, "new-a": 1, "new-b": 1}) == CALLS
    assert warm.sticky is not None and warm.sticky.resumed == 0
    _finish(warm)


def test_the_freshness_check_compares_the_runs_identity_and_generation() -> None:
    """Equal counts on another run (created at another time) or another generation of it
    are not the journal the tally counted."""
    runtime = _runtime()
    header, _ = runtime.start_run("parts-echo", "x")
    snapshot = runtime.store.load(header.run_id)
    tally = WriteTally(runtime.store, snapshot)
    assert tally.matches(snapshot)
    for other in (
        header.replace(created_at_ms=header.created_at_ms + 1),
        header.replace(generation=header.generation + 1),
    ):
        assert not tally.matches(snapshot.__class__(other, snapshot.entries, snapshot.effects))
