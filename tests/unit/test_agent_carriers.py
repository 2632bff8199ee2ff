"""What sticky agents park on (ADR 0017): greenlets of the invocation's thread, or threads."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from durable_agents import AgentRegistry, agent
from durable_agents.aws.settings import Settings
from durable_agents.core.models import RunStatus
from durable_agents.engine.context import DurableContext
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.engine.sticky.carriers import (
    AgentGreenlet,
    AgentThread,
    default_carrier,
    live_agents,
    new_carrier,
)
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.errors import ConfigurationError
from durable_agents.journal.memory import InMemoryJournal
from durable_agents_local.functions import FunctionSpec
from durable_agents_local.worker_environment import function_environment
from durable_agents_local.worker_options import WorkerOptions

registry = AgentRegistry()
CALLS: Counter[str] = Counter()
UNWOUND: list[int] = []  # the steps of each run whose agent unwound


@agent(name="carried", version="1", registry=registry)
def carried(ctx: DurableContext, steps: int) -> int:
    try:
        total = 0
        for i in range(steps):
            total += ctx.step(lambda i=i: _count(f"s{i}", i), name=f"s{i}")
        return total
    finally:
        UNWOUND.append(steps)


def _count(name: str, value: int) -> int:
    CALLS[name] += 1
    return value


@pytest.fixture(autouse=True)
def _fresh() -> None:
    CALLS.clear()
    UNWOUND.clear()


def _on_thread(fn: Any) -> Any:
    """Calls ``fn`` on another thread and returns what it returned (or raises what it raised)."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    worker = threading.Thread(target=body)
    worker.start()
    worker.join(10)
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_greenlets_are_the_default_and_both_carriers_are_made_by_name() -> None:
    assert default_carrier() == "greenlet"
    assert StickyRuns().carrier == "greenlet"
    assert isinstance(new_carrier("greenlet", "r", lambda: 1), AgentGreenlet)
    assert isinstance(new_carrier("thread", "r", lambda: 1), AgentThread)
    with pytest.raises(ValueError, match="unknown carrier"):
        new_carrier("fiber", "r", lambda: 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not available"):
        StickyRuns(carrier="fiber")  # type: ignore[arg-type]


def test_a_greenlet_carrier_returns_raises_and_refuses_another_thread() -> None:
    returned = new_carrier("greenlet", "r", lambda: 42)
    assert returned.advance() == 42
    failing = new_carrier("greenlet", "r", lambda: 1 // 0)
    with pytest.raises(ZeroDivisionError):
        failing.advance()
    fresh = new_carrier("greenlet", "r", lambda: 1)
    assert not _on_thread(fresh.resumable)
    with pytest.raises(RuntimeError, match="another thread"):
        _on_thread(fresh.advance)
    assert fresh.advance() == 1  # its own thread still can


def test_an_agent_parked_on_a_greenlet_goes_on_only_on_its_own_thread() -> None:
    journal = InMemoryJournal()
    runtime = Runtime(journal, registry=registry, sticky=StickyRuns(carrier="greenlet"))
    header, _ = runtime.start_run("carried", 4)
    runtime.execute(header.run_id, remaining_ms=60_000)  # s0, parks before s1
    runtime.execute(header.run_id, remaining_ms=60_000)  # s1: resumed on this thread
    assert runtime.sticky is not None and runtime.sticky.resumed == 1
    # The next delivery lands on another thread: the parked greenlet cannot go on there, so
    # the run is replayed (s0 and s1 from the journal), and the greenlet is let go.
    outcome = _on_thread(lambda: runtime.execute(header.run_id, remaining_ms=60_000))
    assert outcome.kind is OutcomeKind.CONTINUE
    assert runtime.sticky.resumed == 1 and runtime.sticky.abandoned == 1
    # That thread's own agent parked on a greenlet of a thread now gone: this one replays.
    while runtime.execute(header.run_id, remaining_ms=60_000).kind is OutcomeKind.CONTINUE:
        pass
    assert journal.get_run(header.run_id).status is RunStatus.SUCCEEDED
    assert Counter({"s0": 1, "s1": 1, "s2": 1, "s3": 1}) == CALLS  # nothing ran twice


def test_an_abandoned_greenlet_unwinds_on_its_thread_and_writes_nothing() -> None:
    journal = InMemoryJournal()
    runtime = Runtime(journal, registry=registry, sticky=StickyRuns(carrier="greenlet"))
    header, _ = runtime.start_run("carried", 3)
    runtime.execute(header.run_id, remaining_ms=60_000)
    before = journal.load(header.run_id).entries
    assert runtime.sticky is not None and len(live_agents()) >= 1
    runtime.sticky.clear()  # on its own thread: unwound at once
    assert UNWOUND.count(3) == 1
    assert journal.load(header.run_id).entries == before


def test_settings_and_local_mode_choose_the_carrier() -> None:
    env = {"JOURNAL_TABLE": "j", "EVENT_BUS_NAME": "b"}
    assert Settings.from_env(env).sticky_carrier == "greenlet"
    assert Settings.from_env({**env, "STICKY_CARRIER": "thread"}).sticky_carrier == "thread"
    with pytest.raises(ConfigurationError, match="STICKY_CARRIER"):
        Settings.from_env({**env, "STICKY_CARRIER": "fiber"})
    spec = FunctionSpec("Fn", "m.handler", Path("."), 3, 128, 0, {})
    endpoint = "http://127.0.0.1:5010"
    assert (
        function_environment([spec], WorkerOptions(), endpoint, "LOCALKEY")["STICKY_CARRIER"]
        == "thread"
    )
    single = function_environment([spec], WorkerOptions(concurrency=1), endpoint, "LOCALKEY")
    assert "STICKY_CARRIER" not in single


def test_sticky_continuation_is_opt_in() -> None:
    """ADR 0021: off unless STICKY_RUNS asks for it, in the template and without the variable."""
    env = {"JOURNAL_TABLE": "j", "EVENT_BUS_NAME": "b"}
    assert Settings.from_env(env).sticky_runs == 0
    assert Settings.from_env({**env, "STICKY_RUNS": "16"}).sticky_runs == 16
    with pytest.raises(ConfigurationError, match="STICKY_RUNS"):
        Settings.from_env({**env, "STICKY_RUNS": "-1"})
    template = (Path(__file__).parents[2] / "template.yaml").read_text(encoding="utf-8")
    assert 'STICKY_RUNS: "0"' in template
