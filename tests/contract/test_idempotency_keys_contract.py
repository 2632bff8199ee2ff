"""An idempotency key is checked by the runtime, the same on every journal (issue 31, 9).

``Runtime.start_run`` stored any key: a 3,000-character one worked in the in-memory journal
and failed on DynamoDB with a raw ``ValidationException`` (its item's partition key,
``IDEM@<tenant>#<agent>#<key>``, is at most 2,048 bytes). The runtime now refuses, before
anything is written, a key that is empty, longer than ``MAX_IDEMPOTENCY_KEY_CHARS`` (256,
what the Api takes) or not printable (control characters, a lone surrogate), with the
``InvalidNameError`` the Api answers 400. The largest key it accepts fits DynamoDB.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.ids import MAX_IDEMPOTENCY_KEY_CHARS
from durable_agents.core.models import RunStatus
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import InvalidNameError


@pytest.fixture
def echo_runtime(runtime: Runtime, registry: AgentRegistry) -> Runtime:
    @agent(name="echo", version="1", registry=registry)
    def echo(ctx: DurableContext, value: Any) -> Any:
        return value

    return runtime


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("k" * 3000, ("3000", "256")),
        ("k" * (MAX_IDEMPOTENCY_KEY_CHARS + 1), ("257", "256")),
        ("", ("empty",)),
        ("order-42\n", ("printable",)),
        ("order\x0042", ("printable",)),
        ("order-\ud83d", ("printable",)),
    ],
    ids=["3000", "one-too-many", "empty", "trailing-newline", "nul", "lone-surrogate"],
)
def test_a_key_that_is_not_one_is_refused_before_anything_is_written(
    echo_runtime: Runtime, key: str, words: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidNameError, match="idempotency key") as raised:
        echo_runtime.start_run("echo", {"n": 1}, idempotency_key=key)
    assert all(w in str(raised.value) for w in words), str(raised.value)
    assert len(str(raised.value)) < 400  # the key is not echoed whole
    assert echo_runtime.store.list_runs().runs == []


def test_the_longest_key_accepted_fits_every_journal(echo_runtime: Runtime) -> None:
    # 256 characters of 4 bytes each: the most UTF-8 a key can take (1,024 bytes).
    key = "\U0001f600" * MAX_IDEMPOTENCY_KEY_CHARS
    run, created = echo_runtime.start_run("echo", {"n": 1}, idempotency_key=key)
    again, created_again = echo_runtime.start_run("echo", {"n": 1}, idempotency_key=key)
    assert created and not created_again and again.run_id == run.run_id
    assert echo_runtime.store.get_run(run.run_id).idempotency_key == key
    assert again.status is RunStatus.RUNNING
