"""The console's Approve button under ``--act-as``, in headless Chromium (issue 33, item 4).

Without the switch the local caller is refused on a ``group:support-leads`` approval (403,
``test_console.py``). Local mode started with ``--act-as group:support-leads`` — on the default,
embedded store — lets the same click decide: the run goes on to pay the refund once, and the
decision names who clicked and the group they acted as.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from durable_agents_local.identity import LOCAL_CALLER_ARN
from durable_agents_local.processes import WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle
from tests.browser.test_approval_page import (
    CSS,
    MESSAGE,
    _console_errors,
    _text,
    chromium,
    local_stack,
    logs_on_failure,
)
from tests.browser.test_approval_page import pytestmark as approval_page_marks
from tests.integration.local_stack import wait_until

pytestmark = approval_page_marks
GROUP = "group:support-leads"


def worker_caller(worker: WorkerProcess) -> str:
    """The local IAM caller (``--caller-arn``'s default): who clicked."""
    return LOCAL_CALLER_ARN


@pytest.fixture(scope="module")
def acting(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[WorkerProcess, ServicesHandle]]:
    state = str(tmp_path_factory.mktemp("state"))
    with local_stack(
        tmp_path_factory, "--state-dir", state, "--act-as", GROUP, moto_store=False
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
def acting_browser(
    acting: tuple[WorkerProcess, ServicesHandle], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


def test_approve_in_the_console_as_the_group_local_mode_acts_as(
    acting_browser: Any, acting: tuple[WorkerProcess, ServicesHandle]
) -> None:
    browser = acting_browser
    worker, services = acting
    with logs_on_failure(worker):
        api = worker.base_url
        assert any(f"act-as    {GROUP}" in line for line in worker.lines), list(worker.lines)
        status, body = http_json(
            "POST", f"{api}/runs", {"agent": "example-support", "input": MESSAGE}
        )
        assert status == 201, body
        run_id = body["run"]["run_id"]

        def pending() -> dict[str, Any] | None:
            _, listed = http_json("GET", f"{api}/approvals?status=pending")
            return next((a for a in listed["approvals"] if a["run_id"] == run_id), None)

        approval = wait_until(pending, 60, "the refund's approval")
        paid_before = len(services.ledger("payments"))
        assert paid_before == 0  # the refund waits for the approval

        browser.set_window_size(1280, 900)
        browser.get(f"{api}/console/approvals")
        card = browser.find_element(CSS, f'section.approval[data-run="{run_id}"]')
        assert GROUP in card.text
        card.find_element(CSS, "button[value=approve]").click()
        wait_until(lambda: "done=approval-approved" in browser.current_url, 10, "the redirect")
        assert _console_errors(browser) == []
        assert browser.find_elements(CSS, f'section.approval[data-run="{run_id}"]') == []

        wait_until(
            lambda: http_json("GET", f"{api}/runs/{run_id}")[1]["status"] == "SUCCEEDED",
            60,
            "the approved run to finish",
        )
        _, decided = http_json("GET", f"{api}/approvals/{approval['approval_id']}")
        assert decided["status"] == "approved", decided
        assert decided["decision"]["approved"] is True, decided
        by = decided["decision"]["decided_by"]
        assert by == f"{worker_caller(worker)} (local mode, acting as {GROUP})", decided
        # The refund was paid once, after the approval (nothing before it).
        assert len(services.ledger("payments")) == paid_before + 1, services.ledger("payments")
        # The run's page shows it finished, with nothing left to act on.
        browser.get(f"{api}/console/runs/{run_id}")
        assert "succeeded" in _text(browser, "dl").lower()
