"""The signed-link approval page in headless Chromium, against local mode over real HTTP.

A support run waits for a refund approval; a link minted for ``group:support-leads`` opens the
page in Chromium (selenium + the Debian ``chromium-driver``); the test checks what the page
shows, types a comment, clicks Approve, sees the confirmation, and the run finishes with
exactly one refund in the payments ledger.

Without Chromium the test skips and says how to enable it. To refresh the screenshot in the
docs: ``APPROVAL_PAGE_SCREENSHOT=docs/approval-page.png pytest tests/browser``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.processes import ServicesProcess, WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle
from tests.integration.local_stack import wait_until

ROOT = Path(__file__).resolve().parents[2]
ENABLE = (
    "headless Chromium is needed: install it with "
    "`apt-get install chromium chromium-driver` (and selenium: pip install -e '.[dev]'); "
    "set CHROMIUM / CHROMEDRIVER to use other binaries"
)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
MESSAGE = {"customer": "cus-ada", "message": "My order A-1001 arrived broken, I want a refund"}
CSS = "css selector"  # selenium.webdriver.common.by.By.CSS_SELECTOR
COMMENT = "Photos of the damaged parcel check out — refund approved."


def _binary(variable: str, *names: str) -> str | None:
    """The executable ``$variable`` names (if set), else the first of ``names`` on PATH."""
    candidates = [os.environ[variable]] if os.environ.get(variable) else names
    return next((path for path in map(shutil.which, candidates) if path), None)


CHROMIUM = _binary("CHROMIUM", "chromium", "chromium-browser")
CHROMEDRIVER = _binary("CHROMEDRIVER", "chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError:  # pragma: no cover - the dev extra installs it
    webdriver = None

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(webdriver is None or not CHROMIUM or not CHROMEDRIVER, reason=ENABLE),
]


@contextmanager
def logs_on_failure(worker: WorkerProcess) -> Iterator[None]:
    try:
        yield
    except BaseException:
        print("--- worker log ---", *worker.lines, sep="\n")
        raise


@contextmanager
def local_stack(
    tmp_path_factory: pytest.TempPathFactory, *args: str, moto_store: bool = True
) -> Iterator[tuple[WorkerProcess, ServicesHandle]]:
    """Local mode and the fake services in their own processes, stopped at the end.

    Args:
        tmp_path_factory: For the services' ledgers.
        *args: More ``durable-agents local`` flags.
        moto_store: Attach the worker to a moto server started here; False: the worker runs
            on its own store (the embedded one, unless ``args`` say otherwise).
    """
    moto = MotoProcess(free_port()) if moto_store else None
    services = ServicesProcess(tmp_path_factory.mktemp("services") / "ledgers.json")
    worker: WorkerProcess | None = None
    try:
        if moto is not None:
            moto.start()
        handle = services.start()
        worker = WorkerProcess(
            api_port=free_port(),
            moto_endpoint=moto.endpoint if moto is not None else None,
            store_key=moto.store_key if moto is not None else None,
            args=["--services-url", services.url, "--log-level", "ERROR", *args],
            cwd=ROOT,
        )
        worker.start()
        yield worker, handle
    finally:
        if worker is not None:
            worker.stop()
        services.stop()
        if moto is not None:
            moto.stop()


@pytest.fixture(scope="module")
def local(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[WorkerProcess, ServicesHandle]]:
    with local_stack(tmp_path_factory) as stack:
        yield stack


@pytest.fixture(scope="module")
def browser(
    local: tuple[WorkerProcess, ServicesHandle], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    # Depends on `local`, so Chromium (and any socket it holds open) goes before the worker.
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


def chromium(profile: Path, *flags: str) -> Any:
    """Headless Chromium with the suite's flags (and ``flags``), its console log kept."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, *flags):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(20)
    return driver


def _text(driver: Any, css: str) -> str:
    return str(driver.find_element(CSS, css).text)


def _console_errors(driver: Any) -> list[str]:
    """Console errors, CSP violations included (the missing favicon is not one of ours)."""
    return [
        str(entry["message"])
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]


def test_a_lead_approves_a_refund_in_the_browser(
    browser: Any, local: tuple[WorkerProcess, ServicesHandle], tmp_path: Path
) -> None:
    worker, services = local
    with logs_on_failure(worker):
        api = worker.base_url
        status, body = http_json(
            "POST", f"{api}/runs", {"agent": "example-support", "input": MESSAGE}
        )
        assert status == 201, body
        run_id = body["run"]["run_id"]

        def pending() -> Any:
            status, listed = http_json("GET", f"{api}/approvals?status=pending")
            assert status == 200, listed
            return next((a for a in listed["approvals"] if a["run_id"] == run_id), None)

        approval = wait_until(pending, 30, "the refund approval")
        wait_until(
            lambda: http_json("GET", f"{api}/runs/{run_id}")[1]["status"] == "SUSPENDED",
            30,
            "the run to suspend",
        )
        aid = approval["approval_id"]
        status, minted = http_json(
            "POST", f"{api}/approvals/{aid}/links", {"approver": "group:support-leads"}
        )
        assert status == 201, minted
        assert minted["url"].startswith(f"{api}/links/approvals/{aid}?token=")

        # The page: the exact request, who asked, who may decide, the deadline.
        browser.set_window_size(900, 1000)
        browser.get(minted["url"])
        assert browser.title.startswith("Approval: ")
        assert _text(browser, ".pill") == "PENDING"
        request_json = _text(browser, "pre.request")
        for fragment in ('"order_id": "A-1001"', '"amount_cents": 6500', '"customer": "cus-ada"'):
            assert fragment in request_json
        details = _text(browser, "dl")
        assert run_id in details and "example-support" in details and aid in details
        assert "group:support-leads" in details
        assert approval["deadline"][:10] in browser.find_element(
            CSS, "time[datetime]:last-of-type"
        ).get_attribute("datetime")
        label = browser.find_element(CSS, "label[for=comment]")
        assert label.text.startswith("Comment")
        # The inline stylesheet applied (its CSP hash matches), and nothing was blocked or failed.
        approve = browser.find_element(CSS, "button[value=approve]")
        assert approve.value_of_css_property("background-color") == "rgba(26, 127, 55, 1)"
        assert _console_errors(browser) == []

        # Readable on a phone: no horizontal scrolling, the buttons stack at full width.
        browser.set_window_size(390, 844)
        scroll, client = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert scroll <= client
        assert approve.size["width"] >= 300

        # The screenshot (the whole page at desktop width), before deciding.
        browser.set_window_size(900, 1000)
        page_height, viewport = browser.execute_script(
            "return [document.documentElement.scrollHeight, window.innerHeight]"
        )
        browser.set_window_size(900, 1000 + int(page_height) - int(viewport))
        shot = tmp_path / "approval-page.png"
        assert browser.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("APPROVAL_PAGE_SCREENSHOT"):
            target = Path(os.environ["APPROVAL_PAGE_SCREENSHOT"])
            target = target if target.is_absolute() else ROOT / target
            shutil.copyfile(shot, target)

        # Decide.
        browser.find_element(CSS, "#comment").send_keys(COMMENT)
        browser.find_element(CSS, "button[value=approve]").click()
        wait_until(lambda: browser.title == "Decision recorded", 15, "the confirmation page")
        assert _text(browser, "h1") == "Decision recorded"
        assert "You approved this request" in _text(browser, "main")
        assert _console_errors(browser) == []

        # The run resumes and pays the refund exactly once.
        def succeeded() -> Any:
            status, run = http_json("GET", f"{api}/runs/{run_id}")
            assert status == 200 and run["status"] not in ("FAILED", "PAUSED"), run
            return run if run["status"] == "SUCCEEDED" else None

        run = wait_until(succeeded, 30, f"run {run_id} to succeed")
        assert "refunded 65.00 EUR" in run["result"]["answer"]
        refunds = [e for e in services.ledger("payments") if e["event"] == "charge.created"]
        assert len(refunds) == 1
        assert refunds[0]["data"]["charge"]["amount_cents"] == 6500

        status, decided = http_json("GET", f"{api}/approvals/{aid}")
        assert status == 200, decided
        assert decided["status"] == "approved"
        assert decided["decision"]["comment"] == COMMENT
        assert decided["decision"]["via"] == "link"
        assert decided["decision"]["decided_by"].startswith("group:support-leads (signed link ")

        # Opening the link again shows the decision, and no form.
        browser.get(minted["url"])
        assert _text(browser, ".pill") == "APPROVED"
        assert COMMENT in _text(browser, ".banner")
        assert browser.find_elements(CSS, "form") == []
