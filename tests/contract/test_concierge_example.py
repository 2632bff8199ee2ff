"""The concierge example learns a preference in one run and uses it in the next; a replay sees
what the first execution saw even after memory changed. Both journals x both memory stores
(in memory; DynamoDB on moto with the template's tables)."""

from __future__ import annotations

import pytest

from agents.concierge import concierge
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.memory_store import MemoryStore, namespace_for
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner


@pytest.fixture
def memory(memory_store: MemoryStore) -> MemoryStore:
    """Both memory stores (``memory_store`` in tests/conftest.py)."""
    return memory_store


def test_a_preference_learned_once_is_used_by_the_next_run(
    journal: JournalStore, memory: MemoryStore
) -> None:
    runner = AgentTestRunner(concierge, journal=journal, memory=memory, mode="faithful")
    told = runner.run({"user": "ada", "question": "Is my order late?", "prefer": "brief"})
    assert told.output.style == "brief" and told.output.learned
    later = runner.run({"user": "ada", "question": "Can I change the address?"})
    assert later.output.style == "brief" and not later.output.learned
    assert later.output.answer.startswith("In short:")
    other = runner.run({"user": "bob", "question": "Hello?"})
    assert other.output.style == "neutral"  # another user's scope


class ChangeThePreference(InvocationHooks):
    """Before the ``answer`` step is claimed — in a later invocation than the memory read —
    another session changes the preference."""

    def __init__(self, memory: MemoryStore, namespace: str, now_ms: int):
        self.memory, self.namespace, self.now_ms = memory, namespace, now_ms
        self.changed = False

    def before_claim(self, op_id: str) -> None:
        if ":answer:" in op_id and not self.changed:
            self.changed = True
            assert self.memory.put(
                self.namespace, "style", '"brief"', op_id="other-session", expires_at=None,
                now_ms=self.now_ms,
            )  # fmt: skip


def test_a_replay_sees_what_the_run_saw_even_after_memory_changed(
    journal: JournalStore, memory: MemoryStore
) -> None:
    runner = AgentTestRunner(concierge, journal=journal, memory=memory, mode="faithful")
    runner.run({"user": "ada", "question": "q", "prefer": "detailed"})
    header, _ = runner.runtime.start_run("example-concierge", {"user": "ada", "question": "Why?"})
    namespace = namespace_for(header.tenant, "user:ada")
    hooks = ChangeThePreference(memory, namespace, runner.clock.now_ms())
    invocations = 0
    while not runner.journal.get_run(header.run_id).status.terminal:
        runner.runtime.execute(header.run_id, budget=1, hooks=hooks)  # one op per invocation
        invocations += 1
    # Invocation 1 read memory; invocation 2 replayed that read after the change, then answered.
    assert hooks.changed and invocations == 2
    item = memory.get(namespace, "style", now_ms=runner.clock.now_ms())
    assert item is not None and item.value == '"brief"'
    output = runner.inspect(header.run_id).output
    assert output.style == "detailed"  # what the run read, not what memory says now
    assert output.answer.startswith("Here is the whole story")
