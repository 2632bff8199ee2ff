"""The reconciler's gauges (runs PAUSED, approvals and reviews pending, by agent), both backends."""

from __future__ import annotations

from durable_agents.admin.gauges import measure
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner
from tests.contract.test_review_reviewers_contract import parked
from tests.contract.test_waits_contract import approval_agent


def test_gauges_count_what_waits_for_a_person_by_agent(journal: JournalStore) -> None:
    assert measure(journal).agents() == []
    parked(journal, [])  # a "pay" run PAUSED, its charge in NEEDS_REVIEW
    runner = AgentTestRunner(approval_agent(), journal=journal, mode="faithful")
    assert runner.run(100).status == "SUSPENDED"
    assert runner.run(200).status == "SUSPENDED"
    gauges = measure(journal)
    assert dict(gauges.runs_paused) == {"pay": 1}
    assert dict(gauges.reviews_pending) == {"pay": 1}
    assert dict(gauges.approvals_pending) == {"refunder": 2}
    assert gauges.agents() == ["pay", "refunder"]
    assert gauges.capped == []


def test_a_reading_is_bounded_and_says_so(journal: JournalStore) -> None:
    runner = AgentTestRunner(approval_agent(), journal=journal, mode="faithful")
    for cents in (1, 2, 3):
        runner.run(cents)
    gauges = measure(journal, limit=2)
    assert gauges.capped == ["ApprovalsPending"]
    assert dict(gauges.approvals_pending) == {"refunder": 2}
    assert measure(journal, limit=3).capped == []
