"""The differential property: a cold replay, a tail read and a parked agent decide alike.

For random agent programs (steps, model calls, tools, timers, retries, approvals, callbacks
held open and awaited later, event waits with and without a timeout, parallel and map batches
with ``CompletionPolicy(min_successful=1)`` quorums that leave an approval pending, child
contexts, ``ctx.now``/``ctx.uuid``, memory, ``continue_as_new`` turns) and random schedules of
outside actions at random boundaries (approvals decided, callbacks completed, events sent,
cancel and terminate requests, the runtime's parts swapped, invocations landing on another
container, time passing, the run deleted by TTL and started again under its id), the three
ways a container carries a run on must agree after every moment: the same outcome, the same
published events, the same stored items, the same ledger of what ran outside the journal
(``differential.py``: what is compared, and the two random tokens that are not).

Each example is one seed (``differential.random_case``): hypothesis picks the seeds
(derandomized: the same ones every run), the harness draws the program and the schedule from
it. ``RELIABILITY_EXAMPLES`` sets the examples (``make reliability``: 800); the default keeps
``make pytest`` short. A failure prints the case; ``RELIABILITY_SHRINK=1`` also shrinks it to a
minimal program and schedule (``differential.shrink``). ``FOUND`` keeps the differences the
property found, each as its minimal case.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from tests.conftest import TEMPLATE
from tests.reliability import tally
from tests.reliability.differential import (
    Case,
    Differential,
    DifferentialMismatchError,
    LedgerModel,
    case_from_json,
    create_tables,
    random_case,
    shrink,
    table_items,
)

pytestmark = pytest.mark.reliability

EXAMPLES = int(os.environ.get("RELIABILITY_EXAMPLES", "12"))
SHRINK = os.environ.get("RELIABILITY_SHRINK") == "1"
_RUN_IDS = itertools.count(1)

Tables = tuple[Any, dict[str, str]]


def _settings(examples: int) -> Any:
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
        # A seed shrinks to nothing meaningful: ``differential.shrink`` shrinks the case.
        phases=[Phase.explicit, Phase.generate],
    )


@pytest.fixture(scope="module")
def moto_tables() -> Iterator[Tables]:
    """One moto, one client, the three set-ups' tables for the whole module (each example
    empties them and uses a run id of its own)."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        yield client, create_tables(client, TEMPLATE)


def _run(moto_tables: Tables, case: Case) -> Any:
    client, tables = moto_tables
    program, schedule, carrier = case
    run_id = f"run-{next(_RUN_IDS):016x}"
    return Differential(client, tables, run_id, program, schedule, carrier).run()


def check(moto_tables: Tables, case: Case, label: str) -> None:
    """Runs one case, counted in the fault suite's report under ``label``.

    Raises:
        DifferentialMismatchError: If the set-ups differed (shrunk with RELIABILITY_SHRINK=1).
    """
    tally.schedules[label] += 1
    try:
        trace = _run(moto_tables, case)
    except DifferentialMismatchError as exc:
        tally.violations[label] += 1
        if not SHRINK:
            raise
        kinds = exc.kinds()

        def fails(candidate: Case) -> bool:
            try:
                _run(moto_tables, candidate)
            except DifferentialMismatchError as again:
                return bool(again.kinds() & kinds)
            return False

        smallest = shrink(exc.case, fails)
        try:
            _run(moto_tables, smallest)
        except DifferentialMismatchError as minimal:
            raise AssertionError(f"{exc}\n\nshrunk to:\n{minimal}") from exc
        raise
    tally.injected.update({f"diff.{kind}": n for kind, n in trace.actions.items()})


@pytest.mark.timeout(max(300, 10 * EXAMPLES))  # ~1-3 s an example; pytest's default is 300 s
@_settings(EXAMPLES)
@given(seed=st.integers(0, 2**32 - 1))
def test_cold_tail_and_parked_decide_alike(moto_tables: Tables, seed: int) -> None:
    check(moto_tables, random_case(seed), "differential")


@pytest.mark.reliability_full
@pytest.mark.timeout(max(300, 10 * EXAMPLES))
@_settings(max(EXAMPLES // 8, 1))
@given(seed=st.integers(0, 2**32 - 1))
def test_longer_programs_and_schedules_decide_alike(moto_tables: Tables, seed: int) -> None:
    """Programs of up to 9 operations and schedules of up to 12 actions (fewer examples)."""
    check(moto_tables, random_case(seed, max_ops=9, max_actions=12), "differential-long")


# What the property found, each shrunk to its minimal case (program, schedule, carrier). The
# first four differ on the code before issue 29's fixes (1177a12), the last on f42ad05; all
# hold since. A difference the code still has would be a strict xfail in STILL_DIFFERENT.
FOUND = {
    # Defect 1: a cancel arrives after a quorum batch settled with its approval branch still
    # pending. A cold container's whole read sees the approval closed under the batch's
    # settled position and takes the cancel as observed, so the agent goes on (its next step
    # runs); a warm one's tail read does not return that closing entry, so it tells the agent
    # (its cleanup runs instead). Shrunk from seed 247's case.
    "defect-1-quorum-leftover-approval": (
        '[{"ops": [["batch", 0, "parallel", true, [[["approval", 0, null]], [["step", 0]]]], '
        '["step", 1]], "turns": 1, "turn": 0, "epoch": 0, "on_cancel": "raise"}, '
        '[[[1, 0], ["cancel"]]], "greenlet"]'
    ),
    # Defect 4: the model provider swapped while the agent is parked (it parked inside the
    # model call, after taking the provider): the parked agent asked the old provider.
    "defect-4-provider-swapped-while-parked": (
        '[{"ops": [["step", 0], ["llm", 1]], "turns": 1, "turn": 0, "epoch": 0, '
        '"on_cancel": "raise"}, [[[1, 0], ["swap", "provider-attr"]]], "greenlet"]'
    ),
    # Defect 4: the same with the memory store: the parked agent wrote to the old store.
    "defect-4-memory-swapped-while-parked": (
        '[{"ops": [["step", 0], ["mem_put", 1]], "turns": 1, "turn": 0, "epoch": 0, '
        '"on_cancel": "raise"}, [[[1, 0], ["swap", "memory"]]], "greenlet"]'
    ),
    # Defect 5: the run is terminated elsewhere while an agent is parked, expires, and a new
    # run is started with its id; the new run's first invocation lands on another container,
    # its second on the parked one, whose counts match: the old run's agent went on in the new
    # run (its step and its result carry the old run's input, epoch 0).
    "defect-5-parked-agent-in-a-new-run-with-its-id": (
        '[{"ops": [["step", 0], ["step", 1]], "turns": 1, "turn": 0, "epoch": 0, '
        '"on_cancel": "raise"}, [[[0, 2], ["restart", 1]]], "greenlet"]'
    ),
    # A warm container's journal kept a finished run's expiry (f42ad05, defect 3's fix: a
    # write for a finished run carries its expiry). The run is cancelled on it, expires, and a
    # new run is started with its id: every entry the warm container wrote for the new run
    # carried the old run's ttl, already past, so DynamoDB's TTL would delete the live run's
    # journal; a cold container wrote none (fixed by 37e1548).
    "expiry-of-a-finished-run-stamped-on-a-new-run-with-its-id": (
        '[{"ops": [["step", 0]], "turns": 1, "turn": 0, "epoch": 0, "on_cancel": "raise"}, '
        '[[[0, 0], ["cancel"]], [[1, 0], ["restart", 0]]], "greenlet"]'
    ),
}
# Fixed: a kept expiry past its time, or of a run read unfinished, is dropped.
STILL_DIFFERENT: dict[str, str] = {}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=[pytest.mark.xfail(reason=STILL_DIFFERENT[name], strict=True)]
            if name in STILL_DIFFERENT
            else [],
        )
        for name in FOUND
    ],
)
def test_found_differences_stay_fixed(moto_tables: Tables, name: str) -> None:
    check(moto_tables, case_from_json(FOUND[name]), "differential-found")


def test_the_harness_sees_a_difference_it_is_shown(moto_tables: Tables) -> None:
    """A check of the check: the parked set-up's model provider answers otherwise (as a
    provider kept from before a swap would), and the property must fail, naming the model
    call's entry, the run's result and the ledger; the stored items it compares are there."""
    client, tables = moto_tables
    program, schedule, carrier = case_from_json(
        '[{"ops": [["step", 0], ["llm", 1]], "turns": 1, "turn": 0, "epoch": 0, '
        '"on_cancel": "raise"}, [], "greenlet"]'
    )
    differential = Differential(
        client, tables, f"run-{next(_RUN_IDS):016x}", program, schedule, carrier
    )
    parked = differential.setups[-1]
    assert parked.name == "parked" and parked.warm is not None
    parked.warm.providers["diff"] = LedgerModel("mutant")
    with pytest.raises(DifferentialMismatchError) as failed:
        differential.run()
    assert {"ledger", "item.value", "item.result"} <= failed.value.kinds(), failed.value
    assert "mutant: re q1@e0t0" in str(failed.value)
    stored = table_items(tables["cold"])
    assert (f"RUN#{differential.run_id}", "#RUN") in stored and len(stored) >= 5, stored
