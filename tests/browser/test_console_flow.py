"""Flow control in the console, in headless Chromium against local mode (ADR 0030).

The flow examples (``agents.flow``, the scripted model): a ``research-lead`` tree spends its
token budget and a member stops ``BUDGET_EXCEEDED``. In Chromium: the runs list shows it with
its own styling and filters by it, the operators' flow overview lists the limited agent, the
run's page shows its budget (used / limit, its share), and its "Extend budget" form raises the
budget as the local caller: the tree goes on and ends, and the extension is on the page with
who and why. Without Chromium the tests skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from durable_agents_local.processes import WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle
from tests.browser.test_approval_page import (
    CSS,
    _console_errors,
    _text,
    chromium,
    local_stack,
    logs_on_failure,
)
from tests.browser.test_approval_page import pytestmark as approval_page_marks
from tests.integration.local_stack import wait_until

pytestmark = approval_page_marks
REASON = "worth finishing <the research>"


@pytest.fixture(scope="module")
def flow_local(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[WorkerProcess, ServicesHandle]]:
    with local_stack(
        tmp_path_factory, "--agents", "agents.flow", "--model-script", "agents:scripts/flow.json"
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
def flow_browser(
    flow_local: tuple[WorkerProcess, ServicesHandle], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


def _status(api: str, run_id: str) -> str:
    return str(http_json("GET", f"{api}/runs/{run_id}")[1]["status"])


def _over_budget(api: str) -> list[str]:
    _, listed = http_json("GET", f"{api}/runs?status=BUDGET_EXCEEDED&children=true")
    return [r["run_id"] for r in listed["runs"]]


def _start_tree(api: str) -> tuple[str, str]:
    """A research-lead tree; returns its root and a member stopped BUDGET_EXCEEDED."""
    status, body = http_json(
        "POST", f"{api}/runs", {"agent": "research-lead", "input": {"topic": "durability"}}
    )
    assert status == 201, body
    root = body["run"]["run_id"]

    def member() -> str | None:
        ids = [r for r in _over_budget(api) if r == root or r.startswith(f"{root}.")]
        return ids[0] if ids else None

    return root, wait_until(member, 60, "a member to exceed the budget")


def test_a_run_over_its_budget_is_styled_filtered_and_shows_its_budget(
    flow_browser: Any,
    flow_local: tuple[WorkerProcess, ServicesHandle],
) -> None:
    worker, _ = flow_local
    browser = flow_browser
    with logs_on_failure(worker):
        api = worker.base_url
        _, paused = _start_tree(api)

        # The runs list: its own pill (not the grey default), and a filter by the status.
        browser.set_window_size(1280, 900)
        browser.get(f"{api}/console?status=BUDGET_EXCEEDED&children=true")
        selected = browser.find_element(CSS, "#status option[selected]")
        assert selected.get_attribute("value") == "BUDGET_EXCEEDED"
        pills = browser.find_elements(CSS, "span.pill.s-budget_exceeded")
        assert pills and pills[0].text.lower() == "budget_exceeded"
        assert pills[0].value_of_css_property("color") == "rgba(181, 71, 8, 1)"
        assert paused in _text(browser, "table")
        # The operators' flow overview (local mode has no tenants): the limited agent listed.
        assert browser.find_elements(CSS, 'section.flow tr[data-agent="batch-worker"]')
        assert _console_errors(browser) == []

        # The run's page: its budget and its share, and the form to extend it.
        browser.get(f"{api}/console/runs/{paused}")
        card = _text(browser, "section.flow")
        assert "Tokens (used / limit)" in card and "This run's share" in card
        assert "Exceeded\nyes" in card or "Exceeded yes" in card
        form = browser.find_element(CSS, "form.budget")
        assert form.get_attribute("method") == "post"
        assert form.get_attribute("action").endswith(f"/console/runs/{paused}/budget")
        assert browser.find_element(CSS, "#budget-reason").get_attribute("required") == "true"
        assert _console_errors(browser) == []


def test_extend_budget_from_the_console_and_the_tree_goes_on(
    flow_browser: Any,
    flow_local: tuple[WorkerProcess, ServicesHandle],
) -> None:
    worker, _ = flow_local
    browser = flow_browser
    with logs_on_failure(worker):
        api = worker.base_url
        root, paused = _start_tree(api)
        browser.get(f"{api}/console/runs/{paused}")
        tokens = browser.find_element(CSS, "#budget-tokens")
        tokens.clear()
        tokens.send_keys("100000")
        browser.find_element(CSS, "#budget-reason").send_keys(REASON)
        browser.find_element(CSS, "form.budget button").click()
        wait_until(lambda: "done=budget-extended" in browser.current_url, 10, "the redirect")
        assert "Budget extended" in _text(browser, ".banner")
        assert REASON in _text(browser, "table.extensions")
        assert _console_errors(browser) == []

        # The tree goes on and ends; the root's page shows the extension too, and no form.
        wait_until(lambda: _status(api, root) == "SUCCEEDED", 90, "the tree to finish")
        browser.get(f"{api}/console/runs/{root}")
        assert REASON in _text(browser, "table.extensions")
        assert browser.find_elements(CSS, "form.budget") == []
