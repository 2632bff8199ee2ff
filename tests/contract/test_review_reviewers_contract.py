"""Who may decide a review is frozen into the record when the call is parked (issue 9, finding 2).

A review may wait days; a redeploy in between that changes, drops or renames a tool's
``reviewers`` must not change who decides a call parked under the old rules, and a tool the
deciding process does not know must not silently fall back to ``REVIEW_OPERATORS``. Both journal
backends (in-memory and DynamoDB on moto) via the ``journal`` fixture.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.review import (
    Decision,
    NotAReviewerError,
    ReviewRequest,
    resolve,
)
from durable_agents.admin.views import effect_view
from durable_agents.core.models import EffectChange, EffectStatus
from durable_agents.core.principals import Principal
from durable_agents.journal.store import JournalStore
from durable_agents.tools import Tool, ToolCall, ToolRegistry, ToolResult, tool
from durable_agents_local.testing import AgentTestRunner, Crash, TestResult
from tests.contract.test_side_effects_contract import Payment, Provider, Receipt

OLD = "iam:arn:aws:iam::123456789012:role/payments-oncall"
NEW = "iam:arn:aws:iam::123456789012:role/intern"
OPERATOR = "iam:arn:aws:iam::123456789012:role/ops"


def caller(pattern: str) -> Principal:
    return Principal(via="iam", identity=pattern.removeprefix("iam:"))


def declare(
    provider: Provider, reviewers: list[str]
) -> tuple[Tool[Payment, Receipt], ToolRegistry]:
    registry = ToolRegistry()

    @tool(name="charge", registry=registry, reviewers=reviewers)  # no lookup, not idempotent
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return provider.charge(request, call)

    return charge, registry


class Deployed:
    """The release currently deployed: which ``charge`` the agent calls."""

    def __init__(self, charge: Tool[Payment, Receipt]):
        self.charge = charge


def agent_of(deployed: Deployed) -> Any:
    @agent(name="pay", version="1", registry=AgentRegistry())
    def pay(ctx: DurableContext, cents: int) -> str:
        return ctx.tool(deployed.charge, Payment(customer="c-1", cents=cents)).payment_id

    return pay


def parked(
    journal: JournalStore, reviewers: list[str], deployed: Deployed | None = None
) -> tuple[AgentTestRunner, TestResult, str]:
    """A charge whose worker died after it executed: the call waits for a person."""
    charge, _ = declare(Provider(dedupe=False), reviewers)
    if deployed is None:
        deployed = Deployed(charge)
    deployed.charge = charge
    runner = AgentTestRunner(agent_of(deployed), journal=journal, mode="faithful")
    result = runner.run(500, crash=Crash("charge", "after_execute"))
    assert result.status == "PAUSED"
    (record,) = journal.effects_in_review()
    return runner, result, record.operation_id


def decide(
    runner: AgentTestRunner,
    tools: ToolRegistry,
    operation_id: str,
    who: str,
    *,
    operators: tuple[str, ...] = (OPERATOR,),
) -> Any:
    return resolve(
        runner.journal,
        tools,
        runner.clock,
        operation_id,
        ReviewRequest(Decision.RETRY, decided_by=caller(who).display, via="iam"),
        reviewer=caller(who),
        operators=operators,
    )


def test_a_redeploy_that_changes_the_reviewers_does_not_change_who_decides(
    journal: JournalStore,
) -> None:
    runner, result, op_id = parked(journal, [OLD])
    _, redeployed = declare(Provider(dedupe=False), [NEW])  # same tool, new reviewers
    with pytest.raises(NotAReviewerError, match="intern"):
        decide(runner, redeployed, op_id, NEW)
    assert journal.effects_in_review()[0].status is EffectStatus.NEEDS_REVIEW  # untouched
    decided = decide(runner, redeployed, op_id, OLD)
    assert decided.note["decided_by"] == OLD.removeprefix("iam:")
    assert decided.note["reviewers"] == [OLD]
    assert decided.note["reviewers_from"] == "record"
    assert runner.resume(result.run_id).status == "SUCCEEDED"  # the retry was granted


def test_a_tool_missing_at_decision_time_is_still_decided_by_its_frozen_reviewers(
    journal: JournalStore,
) -> None:
    runner, _, op_id = parked(journal, [OLD])
    nothing = ToolRegistry()  # the deciding process does not import the tool (or it was removed)
    with pytest.raises(NotAReviewerError, match="reviewers of tool 'charge'"):
        decide(runner, nothing, op_id, OPERATOR)  # an operator who is not among them
    decided = decide(runner, nothing, op_id, OLD)
    assert decided.note["reviewers"] == [OLD]


def test_a_tool_that_declared_no_reviewers_stays_with_the_operators(
    journal: JournalStore,
) -> None:
    runner, _, op_id = parked(journal, [])
    _, redeployed = declare(Provider(dedupe=False), [NEW])  # reviewers added after the park
    with pytest.raises(NotAReviewerError, match="REVIEW_OPERATORS"):
        decide(runner, redeployed, op_id, NEW)
    with pytest.raises(NotAReviewerError, match="no REVIEW_OPERATORS are configured"):
        decide(runner, redeployed, op_id, OPERATOR, operators=())
    decided = decide(runner, redeployed, op_id, OPERATOR)
    assert decided.note["reviewers"] == [OPERATOR]
    assert decided.note["reviewers_from"] == "operators"


def test_the_frozen_reviewers_are_shown_with_the_review(journal: JournalStore) -> None:
    _, _, op_id = parked(journal, [OLD])
    (record,) = journal.effects_in_review()
    view = effect_view(record)
    assert view["reviewers"] == [OLD]
    assert view["note"]["frozen_reviewers"] == [OLD]
    assert op_id == view["operation_id"]


def test_a_record_parked_before_reviewers_were_frozen_is_decided_by_operators_only(
    journal: JournalStore,
) -> None:
    runner, _, op_id = parked(journal, [OLD])
    (record,) = journal.effects_in_review()
    # What a record parked by the previous release looks like: no frozen list.
    note = {k: v for k, v in (record.note or {}).items() if k != "frozen_reviewers"}
    legacy = record.replace(note=note)
    journal.commit(
        record.run_id, [], None, EffectChange(legacy, frozenset({record.status}), record.attempt)
    )
    assert effect_view(legacy)["reviewers"] is None
    _, tools = declare(Provider(dedupe=False), [OLD])
    with pytest.raises(NotAReviewerError, match="parked before"):
        decide(runner, tools, op_id, OLD)  # the registry is not consulted for it
    decided = decide(runner, tools, op_id, OPERATOR)
    assert decided.note["reviewers"] == [OPERATOR]
    assert decided.note["reviewers_from"] == "operators (record predates frozen reviewers)"


def test_going_back_to_review_freezes_the_reviewers_of_that_park(journal: JournalStore) -> None:
    deployed = Deployed(declare(Provider(dedupe=False), [OLD])[0])
    runner, result, op_id = parked(journal, [OLD], deployed)
    _, tools = declare(Provider(dedupe=False), [OLD])
    decide(runner, tools, op_id, OLD)
    # The granted attempt dies after executing too, under a release whose tool has new reviewers.
    deployed.charge = declare(Provider(dedupe=False), [NEW])[0]
    again = runner.resume(result.run_id, crash=Crash("charge", "after_execute"))
    assert again.status == "PAUSED"
    (record,) = journal.effects_in_review()
    assert record.note is not None
    assert record.note["frozen_reviewers"] == [NEW]
    assert record.note["earlier_decisions"][0]["reviewers"] == [OLD]
