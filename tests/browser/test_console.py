"""The run console in headless Chromium, against local mode over real HTTP (one stack).

A support run (``example-support``) triages through a child run, calls tools, streams the
model's text and waits for a refund approval. In Chromium: the runs list (a filter, then paging
with the cursor), the run's timeline (the child linked, a tool call's side effect and external
id, the streamed text, the approval's deadline), the child's page linking back, what a browser
gets from ``/runs/{id}/history``, and the approvals page. Deciding there as the local caller is
refused (it is not one of the approvers: the Api's own check), and cancelling from the timeline
stops the run, end to end.

The same run makes the screenshots in ``docs/``: ``CONSOLE_SCREENSHOTS=docs pytest
tests/browser/test_console.py`` (``make screenshots``). Without Chromium the test skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from durable_agents_local.processes import WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle
from tests.browser.test_approval_page import (  # noqa: F401 - the fixtures
    CSS,
    MESSAGE,
    ROOT,
    _console_errors,
    _text,
    browser,
    local,
    logs_on_failure,
)
from tests.browser.test_approval_page import pytestmark as approval_page_marks
from tests.integration.local_stack import wait_until

pytestmark = approval_page_marks
FULL_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}\+00:00$")
REASON = "customer withdrew the request"


def _shot(driver: Any, tmp_path: Path, name: str) -> None:
    """A full-page PNG at desktop width; copied to ``$CONSOLE_SCREENSHOTS`` when it is set."""
    driver.set_window_size(1440, 900)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1440, max(900, int(height) + 120))
    shot = tmp_path / name
    assert driver.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("CONSOLE_SCREENSHOTS"):
        target = Path(os.environ["CONSOLE_SCREENSHOTS"])
        target = target if target.is_absolute() else ROOT / target
        shutil.copyfile(shot, target / name)
    driver.set_window_size(1280, 900)


def _rows(driver: Any, kind: str) -> list[Any]:
    return list(driver.find_elements(CSS, f'tr.op[data-kind="{kind}"]'))


def test_the_console_shows_a_run_and_cancels_it(
    browser: Any,  # noqa: F811
    local: tuple[WorkerProcess, ServicesHandle],  # noqa: F811
    tmp_path: Path,
) -> None:
    worker, _ = local
    with logs_on_failure(worker):
        api = worker.base_url
        run_ids = []
        for key in ("console-1", "console-2"):  # two runs waiting: something to page through
            status, body = http_json(
                "POST",
                f"{api}/runs",
                {"agent": "example-support", "input": MESSAGE, "idempotency_key": key},
            )
            assert status == 201, body
            run_ids.append(body["run"]["run_id"])
        run_id, other_id = run_ids

        def waiting(run: str) -> bool:
            _, listed = http_json("GET", f"{api}/approvals?status=pending")
            asked = any(a["run_id"] == run for a in listed["approvals"])
            return asked and http_json("GET", f"{api}/runs/{run}")[1]["status"] == "SUSPENDED"

        for each in run_ids:
            wait_until(lambda run=each: waiting(run), 60, f"run {each} to wait for its approval")

        # The runs list: the run and its child; the stylesheet applied (CSP hash), no errors.
        browser.set_window_size(1280, 900)
        browser.get(f"{api}/console")
        assert browser.title.startswith("Runs")
        listed = _text(browser, "table")
        assert run_id in listed and "example-support" in listed
        assert "triage" not in listed  # sub-agent runs are hidden unless asked for
        browser.find_element(CSS, "#children").click()
        browser.find_element(CSS, "form.filters button").click()
        wait_until(lambda: "children=true" in browser.current_url, 10, "the children filter")
        listed = _text(browser, "table")
        assert run_id in listed and "triage" in listed
        top = browser.find_element(CSS, "header.top")
        assert top.value_of_css_property("background-color") == "rgba(28, 32, 36, 1)"
        assert all(
            FULL_DATE.match(t.get_attribute("datetime") or "")
            for t in browser.find_elements(CSS, "td time")
        )
        assert _console_errors(browser) == []
        _shot(browser, tmp_path, "console-runs.png")

        # A filter from the form, then paging one run at a time with the cursor.
        browser.find_element(CSS, "#children").click()  # hidden again
        browser.find_element(CSS, "#agent").send_keys("example-support")
        browser.find_element(CSS, "form.filters button").click()
        wait_until(lambda: "agent=example-support" in browser.current_url, 10, "the filter")
        shown = [a.text for a in browser.find_elements(CSS, "tbody tr td:first-child a")]
        assert run_id in shown and all(".triage." not in s for s in shown)
        browser.get(f"{api}/console?status=SUSPENDED&limit=1")
        first = browser.find_element(CSS, "tbody tr td:first-child a").text
        browser.find_element(CSS, 'a[rel="next"]').click()
        wait_until(lambda: "cursor=" in browser.current_url, 10, "the next page")
        second = browser.find_element(CSS, "tbody tr td:first-child a").text
        assert {first, second} == {run_id, other_id}  # each once, one per page

        # The timeline: the child linked, a tool call's effect, streamed text, the deadline.
        browser.get(f"{api}/console")
        browser.find_element(CSS, f'a[href$="console/runs/{run_id}"]').click()
        wait_until(lambda: browser.title.startswith(f"Run {run_id}"), 10, "the timeline")
        (invoke,) = _rows(browser, "invoke")
        child_link = invoke.find_element(CSS, "a")
        assert ".triage." in child_link.text
        tools = _rows(browser, "tool")
        assert tools and "committed" in tools[0].text.lower()
        assert "external id" in tools[0].text.lower()
        assert browser.find_elements(CSS, "pre.streamed"), "the model's streamed text"
        (approval,) = _rows(browser, "approval")
        assert "deadline" in approval.text.lower()
        assert FULL_DATE.match(approval.find_element(CSS, "time").get_attribute("datetime"))
        assert _console_errors(browser) == []
        _shot(browser, tmp_path, "console-timeline.png")
        child_id = child_link.text
        child_link.click()
        wait_until(lambda: browser.title.startswith(f"Run {child_id}"), 10, "the child")
        assert run_id in _text(browser, "dl")  # "Parent run", linked back

        # A browser asking for the history gets the timeline page, not JSON.
        browser.get(f"{api}/runs/{run_id}/history")
        assert browser.title.startswith(f"Run {run_id}")
        assert _rows(browser, "approval")

        # Pending approvals with their actions; the local caller is not an approver: 403.
        browser.get(f"{api}/console/approvals")
        card = browser.find_element(CSS, f'section.approval[data-run="{run_id}"]')
        assert "group:support-leads" in card.text
        _shot(browser, tmp_path, "console-approvals.png")
        card.find_element(CSS, "button[value=approve]").click()
        wait_until(lambda: "not decide" in browser.title, 10, "the refusal page")
        assert waiting(run_id)  # nothing was decided
        (refused,) = _console_errors(browser)  # the 403 itself, and nothing else
        assert "403" in refused

        # Cancel from the timeline, end to end: the run's agent sees it and the run ends.
        browser.get(f"{api}/console/runs/{run_id}")
        browser.find_element(CSS, "#reason").send_keys(REASON)
        browser.find_element(CSS, "form.cancel button").click()
        wait_until(lambda: "done=cancel-requested" in browser.current_url, 10, "the redirect")
        assert "Cancel requested" in _text(browser, ".banner")
        assert REASON in _text(browser, "dl")
        assert _console_errors(browser) == []
        wait_until(
            lambda: http_json("GET", f"{api}/runs/{run_id}")[1]["status"] == "CANCELLED",
            60,
            "the run to be cancelled",
        )
        browser.get(f"{api}/console/runs/{run_id}")
        assert "cancelled" in _text(browser, "dl").lower()
        assert browser.find_elements(CSS, "form.cancel") == []


def test_the_console_starts_a_run_shows_its_input_and_terminates_it(
    browser: Any,  # noqa: F811
    local: tuple[WorkerProcess, ServicesHandle],  # noqa: F811
) -> None:
    worker, _ = local
    with logs_on_failure(worker):
        api = worker.base_url
        # Start a run from the runs page: the agent chosen from those registered, JSON input.
        browser.set_window_size(1280, 900)
        browser.get(f"{api}/console")
        agents = [
            o.get_attribute("value") for o in browser.find_elements(CSS, "#start-agent option")
        ]
        assert "example-support" in agents
        browser.find_element(CSS, '#start-agent option[value="example-support"]').click()
        browser.find_element(CSS, "#start-input").send_keys(json.dumps(MESSAGE))
        browser.find_element(CSS, "form.start button").click()
        wait_until(lambda: "done=run-started" in browser.current_url, 10, "the new run's page")
        assert "Run started" in _text(browser, ".banner")
        run_id = browser.current_url.split("/console/runs/")[1].split("?")[0]
        _, run = http_json("GET", f"{api}/runs/{run_id}")
        assert run["agent"] == "example-support" and run["input"] == MESSAGE
        # Its input, at the top, as compact JSON.
        assert "cus-ada" in _text(browser, "section.io")
        wait_until(
            lambda: http_json("GET", f"{api}/runs/{run_id}")[1]["status"] == "SUSPENDED",
            60,
            "the run to wait for its approval",
        )

        # Its history as JSON, from the page's link, even though a browser prefers HTML.
        browser.get(f"{api}/console/runs/{run_id}")
        browser.find_element(CSS, 'section.io a[type="application/json"]').click()
        wait_until(lambda: "format=json" in browser.current_url, 10, "the JSON history")
        history = json.loads(_text(browser, "body"))
        assert history["run_id"] == run_id and history["events"]

        # Terminate from the timeline: the run stops without running its code again.
        browser.get(f"{api}/console/runs/{run_id}")
        browser.find_element(CSS, "#terminate-reason").send_keys("runaway")
        browser.find_element(CSS, "form.terminate button").click()
        wait_until(lambda: "done=terminate-requested" in browser.current_url, 10, "redirect")
        assert "Terminate requested" in _text(browser, ".banner")
        assert _console_errors(browser) == []
        wait_until(
            lambda: http_json("GET", f"{api}/runs/{run_id}")[1]["status"] == "TERMINATED",
            60,
            "the run to be terminated",
        )
        browser.get(f"{api}/console/runs/{run_id}")
        assert "terminated" in _text(browser, "dl").lower()
        # Finished: no action left but a re-run.
        forms = browser.find_elements(CSS, "form")
        assert [f.get_attribute("class") for f in forms] == ["rerun"]

        # Re-run it from its first operation: the new run's page says where it came from.
        options = browser.find_elements(CSS, "#rerun-from option")
        assert [o.get_attribute("value") for o in options[:2]] == ["failed", "start"]
        chosen = options[2].get_attribute("value")  # the first operation, as the timeline shows
        assert chosen and chosen in _text(browser, "table.timeline")
        options[2].click()
        browser.find_element(CSS, "form.rerun button.danger").click()
        wait_until(lambda: "done=rerun-started" in browser.current_url, 10, "the re-run's page")
        assert "Re-run started" in _text(browser, ".banner")
        new_id = browser.current_url.split("/console/runs/")[1].split("?")[0]
        assert new_id != run_id
        origin = _text(browser, "p.rerun-of")
        assert origin == f"Re-run of {run_id} from {chosen}", origin
        assert (
            browser.find_element(CSS, "p.rerun-of a")
            .get_attribute("href")
            .endswith(f"/console/runs/{run_id}")
        )
        assert _console_errors(browser) == []
        _, rerun = http_json("GET", f"{api}/runs/{new_id}")
        assert rerun["rerun_of"] == run_id and rerun["rerun_from"] == chosen
        # It waits for its approval again: stopped here, so no other test sees it.
        status, body = http_json("POST", f"{api}/runs/{new_id}/terminate", {"reason": "done"})
        assert status in (200, 202), body
