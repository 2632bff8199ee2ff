"""A browser threat suite in headless Chromium: a hostile page attacks a real local-mode stack.

The hostile pages are served by a tiny ``http.server`` of this module on another port of
127.0.0.1 (another origin of the same site), and, in a second Chromium started with
``--host-resolver-rules=MAP evil.test 127.0.0.1``, from ``http://evil.test:<port>`` (another
site). Each attack is refused, and each test checks through the Api, as the local operator,
that nothing changed:

* a blind ``fetch(..., {mode: "no-cors"})`` or an auto-submitted form that starts a run (JSON
  sent as ``text/plain``, the ``enctype=text/plain`` form trick), decides a pending approval,
  cancels or terminates a run (with no body at all: only the cross-site check stands in the
  way), or sends an event into a run: 403 from ``api.cross_site``. A form's answer is the page
  the browser then shows, so its refusal is read there; a no-cors answer is opaque to the page,
  so each request's status is read from the worker's log (one line per Api invocation), and
  the state tells the rest. Starting a run and deciding the approval would be refused even
  without the cross-site check (415 for a body that is not JSON; the local caller is not among
  ``group:support-leads``), so there the forms' pages show that the cross-site check answered
  first; cancelling, terminating and sending an event would succeed without it (each of those
  tests does it as the local operator at the end, to show the target was live);
* a blind form to the store (S3's POST-object upload is an HTML form): 403 from
  ``isolated_moto.refuse_browsers`` (it carries ``Origin``), and no object is written; the
  same form posted without a browser's headers is refused too unless it carries the store's
  session key (``isolated_moto.require_store_key``), and stored with it;
* reading the Api from the page (``fetch`` in cors mode): Chromium withholds every answer, as
  the Api sends no ``Access-Control-Allow-Origin``;
* probing for ids: an ``<img>``, ``<script>``, ``<iframe>`` and ``<object>`` of a run and an
  approval that exist and of ids that do not fire the same events, because the Api answers
  every one 403 (``api.cross_site.check_not_embedded``);
* framing the console: refused (``X-Frame-Options: DENY``, ``frame-ancestors 'none'``), and
  Chromium shows nothing of it in the frame;
* DNS rebinding: a page whose name resolves to 127.0.0.1 reaches the Api, the store and the
  OIDC issuer with its own name in ``Host``: 421 from each, even for same-origin requests.

The ``local`` fixture runs no ``--local-oidc`` issuer, so the issuer case starts the same
server (``durable_agents_local.oidc.LocalIssuer``) in this process. Without Chromium the tests
skip, like the other browser tests.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.exceptions
import pytest

from durable_agents_local.oidc import LocalIssuer
from durable_agents_local.processes import WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle
from durable_agents_local.store_key import key_for
from tests.browser.test_approval_page import (  # noqa: F401 - the fixtures
    MESSAGE,
    browser,
    chromium,
    local,
    logs_on_failure,
)
from tests.browser.test_approval_page import pytestmark as approval_page_marks
from tests.integration.local_stack import wait_until

try:
    from selenium.common.exceptions import WebDriverException
except ImportError:  # pragma: no cover - the dev extra installs it; the marks skip then
    WebDriverException = Exception  # type: ignore[assignment,misc]

pytestmark = approval_page_marks
EVIL = "evil.test"
REFUSED_CROSS_SITE = "not accepted from other sites"
# Time for anything a request might have set off (a wake, a reconciler pass) to show.
SETTLE_SECONDS = 1.0
# The worker's line for each Api invocation (durable_agents_local.invoke.summarize).
ANSWERED = re.compile(r"ApiFunction\s+(?P<request>POST \S+) -> (?P<status>\d{3})\b")
ANSWERED_GET = re.compile(r"ApiFunction\s+(?P<request>GET \S+) -> (?P<status>\d{3})\b")
_MARKERS = itertools.count()

Stack = tuple[WorkerProcess, ServicesHandle]


class HostileSite:
    """Serves the attacker's pages on 127.0.0.1:``port``, for any ``Host`` (evil.test too)."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        self._names = itertools.count()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = site.pages.get(urlsplit(self.path).path)
                payload = (page or "no such page").encode()
                self.send_response(200 if page is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def add(self, html: str) -> str:
        """Publishes a page; returns its path."""
        path = f"/attack-{next(self._names)}.html"
        self.pages[path] = html
        return path

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileSite]:
    site = HostileSite()
    try:
        yield site
    finally:
        site.stop()


@pytest.fixture(scope="module")
def rebinding_browser(
    local: Stack,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    """Chromium in which ``evil.test`` resolves to 127.0.0.1: a DNS name after rebinding."""
    driver = chromium(
        tmp_path_factory.mktemp("chromium-rebinding"),
        f"--host-resolver-rules=MAP {EVIL} 127.0.0.1",
        # Tries https:// first for a name (not for an IP): nothing listens there, so skip it.
        "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable",
    )
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(params=["same-site", "cross-site"])
def attacker(
    request: pytest.FixtureRequest, hostile: HostileSite
) -> tuple[Any, Callable[[str], str]]:
    """A browser, and how to get a URL for a hostile page's path.

    ``same-site``: the page is on 127.0.0.1 at another port (another origin; Chromium sends
    ``Sec-Fetch-Site: same-site``). ``cross-site``: it is on ``evil.test`` (``cross-site``).
    """
    if request.param == "same-site":
        driver = request.getfixturevalue("browser")
        host = "127.0.0.1"
    else:
        driver = request.getfixturevalue("rebinding_browser")
        host = EVIL
    return driver, lambda path: f"http://{host}:{hostile.port}{path}"


@pytest.fixture(scope="module")
def approval(local: Stack) -> dict[str, Any]:  # noqa: F811
    """A support run waiting for a refund approval (``group:support-leads``)."""
    worker, _ = local
    api = worker.base_url
    with logs_on_failure(worker):
        status, body = http_json(
            "POST",
            f"{api}/runs",
            {"agent": "example-support", "input": MESSAGE, "idempotency_key": "threats"},
        )
        assert status in (200, 201), body
        run_id = body["run"]["run_id"]

        def pending() -> Any:
            _, listed = http_json("GET", f"{api}/approvals?status=pending")
            return next((a for a in listed["approvals"] if a["run_id"] == run_id), None)

        found = wait_until(pending, 60, "the refund approval")
        wait_until(lambda: _run(api, run_id)["status"] == "SUSPENDED", 60, "the run to suspend")
        return dict(found)


def _run(api: str, run_id: str) -> dict[str, Any]:
    status, run = http_json("GET", f"{api}/runs/{run_id}")
    assert status == 200, run
    return dict(run)


def _run_ids(api: str) -> set[str]:
    ids: set[str] = set()
    cursor = ""
    while True:
        status, page = http_json("GET", f"{api}/runs?children=true&limit=100{cursor}")
        assert status == 200, page
        ids.update(r["run_id"] for r in page["runs"])
        if not page["cursor"]:
            return ids
        cursor = f"&cursor={urllib.parse.quote(page['cursor'])}"


def _history(api: str, run_id: str) -> list[Any]:
    status, body = http_json("GET", f"{api}/runs/{run_id}/history")
    assert status == 200, body
    return list(body["events"])


def _chat(api: str) -> str:
    """A chat run waiting for its next message (``POST /runs/{id}/events/message``)."""
    status, body = http_json(
        "POST", f"{api}/runs", {"agent": "example-chat", "input": {"message": "hello"}}
    )
    assert status == 201, body
    run_id = str(body["run"]["run_id"])

    def waiting() -> bool:
        run = _run(api, run_id)
        assert run["status"] not in ("FAILED", "SUCCEEDED", "CANCELLED"), run
        return run["status"] == "SUSPENDED"

    wait_until(waiting, 60, f"chat run {run_id} to wait for a message")

    def settled() -> bool:  # its view no longer changes: what a test compares stays put
        first = _run(api, run_id)
        time.sleep(0.2)
        return first == _run(api, run_id)

    wait_until(settled, 30, f"chat run {run_id} to settle")
    return run_id


def _script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element."""
    return json.dumps(value).replace("<", "\\u003c")


def _fetch_page(attempts: list[tuple[str, dict[str, Any]]]) -> str:
    """A page that sends every ``fetch(url, init)`` and then sets its title to "done"."""
    return f"""<!doctype html><title>attacking</title><script>
const attempts = {_script_json(attempts)};
Promise.allSettled(attempts.map(([url, init]) => fetch(url, init))).then((results) => {{
  window.attackResults = results.map((r) => r.status === "fulfilled"
    ? {{type: r.value.type, status: r.value.status}}
    : {{error: String(r.reason)}});
  document.title = "done";
}});
</script>"""


def _form_page(action: str, fields: dict[str, str], enctype: str | None = None) -> str:
    """A page that posts a form to ``action`` as soon as it loads (the browser follows)."""
    inputs = "".join(
        f'<input type="hidden" name="{escape(name)}" value="{escape(value)}">'
        for name, value in fields.items()
    )
    encoding = f' enctype="{escape(enctype)}"' if enctype else ""
    return (
        f'<!doctype html><title>attacking</title><form method="POST" '
        f'action="{escape(action)}"{encoding}>{inputs}</form>'
        "<script>document.forms[0].submit()</script>"
    )


def _run_fetches(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    attempts: list[tuple[str, dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Loads a hostile page that sends ``attempts``; returns what its script could see."""
    driver, url = attacker
    driver.get(url(hostile.add(_fetch_page(attempts))))
    wait_until(lambda: driver.title == "done", 20, "the hostile page's requests")
    results = driver.execute_script("return window.attackResults")
    assert len(results) == len(attempts)
    # An opaque answer (no-cors) or a network error: the page learns nothing, not even a status.
    for result in results:
        assert result.get("type") == "opaque" or "error" in result, result
        assert result.get("status", 0) == 0, result
    return list(results)


def _body_text(driver: Any) -> str:
    try:
        return str(driver.execute_script("return document.body ? document.body.innerText : ''"))
    except WebDriverException:  # the page was navigating away
        return ""


def _submit_form(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    api: str,
    action: str,
    fields: dict[str, str],
    enctype: str | None = None,
    succeeded: Callable[[], bool] | None = None,
) -> str:
    """Loads a hostile page that posts a form to ``api``; returns the page ``api`` answered.

    ``succeeded``: whether the attack took effect, checked while waiting (a 204 answer, say,
    leaves the browser on the hostile page: there is no answer to wait for then).
    """
    driver, url = attacker
    driver.get(url(hostile.add(_form_page(action, fields, enctype))))

    def answered() -> str:
        assert succeeded is None or not succeeded(), f"the form to {action} took effect"
        try:
            if not str(driver.current_url).startswith(api):
                return ""
            ready = driver.execute_script("return document.readyState") == "complete"
        except WebDriverException:  # between the two pages
            return ""
        return _body_text(driver) if ready else ""

    return str(wait_until(answered, 20, f"the form's answer from {action}"))


class ApiAnswers:
    """What the Api answered to the POSTs that reach it from now on, read from the worker's log.

    A no-cors answer is opaque to the page, but the Api logs each invocation: a GET for a run
    that does not exist marks where this test's requests begin.
    """

    def __init__(self, worker: WorkerProcess) -> None:
        self._worker = worker
        self._marker = f"run-threat-marker-{next(_MARKERS)}"
        http_json("GET", f"{worker.base_url}/runs/{self._marker}")
        wait_until(lambda: self._marked() is not None, 10, "the marker in the worker's log")

    def _marked(self) -> list[str] | None:
        lines = list(self._worker.lines)
        starts = [i for i, line in enumerate(lines) if self._marker in line]
        return lines[starts[-1] + 1 :] if starts else None

    def posts(self) -> Counter[tuple[str, int]]:
        """Each POST since the marker, with its status, and how many times."""
        lines = self._marked()
        assert lines is not None, "the marker left the worker's log"
        found = (ANSWERED.search(line) for line in lines)
        return Counter((m["request"], int(m["status"])) for m in found if m)

    def gets(self) -> Counter[tuple[str, int]]:
        """Each GET since the marker, with its status, and how many times."""
        lines = self._marked()
        assert lines is not None, "the marker left the worker's log"
        found = (ANSWERED_GET.search(line) for line in lines)
        return Counter((m["request"], int(m["status"])) for m in found if m)

    def expect_refused(self, api: str, paths: dict[str, int]) -> None:
        """Each path was POSTed exactly as many times as it maps to, and each refused (403)."""
        prefix = len(urlsplit(api).scheme) + 3 + len(urlsplit(api).netloc)
        expected = Counter({(f"POST {path[prefix:]}", 403): n for path, n in paths.items()})
        try:
            wait_until(lambda: self.posts() == expected, 10, "the Api's answers")
        except AssertionError:
            assert self.posts() == expected  # shows what it answered


def _nothing_happened_after(check: Callable[[], None]) -> None:
    """Checks now, and again once anything the requests might have set off had time to show."""
    check()
    time.sleep(SETTLE_SECONDS)
    check()


# 1a. Starting a run.


def test_a_hostile_page_cannot_start_a_run(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    local: Stack,  # noqa: F811
) -> None:
    worker, _ = local
    api = worker.base_url
    with logs_on_failure(worker):
        before = _run_ids(api)
        answers = ApiAnswers(worker)
        body = json.dumps({"agent": "example-chat", "input": {"message": "from a hostile page"}})
        plain = {"Content-Type": "text/plain"}
        _run_fetches(
            attacker,
            hostile,
            [
                # JSON as text/plain: a "simple" request, sent without a preflight.
                (
                    f"{api}/runs",
                    {"method": "POST", "mode": "no-cors", "headers": plain, "body": body},
                ),
                # No Content-Type at all (a Blob without a type).
                (f"{api}/runs", {"method": "POST", "mode": "no-cors", "body": body}),
                # A real JSON request needs a preflight, which nothing answers: never sent.
                (
                    f"{api}/runs",
                    {
                        "method": "POST",
                        "headers": {"Content-Type": "application/json"},
                        "body": body,
                    },
                ),
            ],
        )
        # The classic: a text/plain form whose one field spells the JSON ("name=value").
        name, value = body[:-2] + ', "pad": "', '"}'
        answer = _submit_form(attacker, hostile, api, f"{api}/runs", {name: value}, "text/plain")
        assert REFUSED_CROSS_SITE in answer
        # The console's start form, posted from another site.
        fields = {"agent": "example-chat", "input": '{"message": "from a hostile page"}'}
        answer = _submit_form(attacker, hostile, api, f"{api}/console/runs", fields)
        assert REFUSED_CROSS_SITE in answer

        # Two fetches and the form reached the Api (the JSON one never left the browser).
        answers.expect_refused(api, {f"{api}/runs": 3, f"{api}/console/runs": 1})
        _nothing_happened_after(lambda: _assert_equal(_run_ids(api), before, "the runs"))


def _assert_equal(after: Any, before: Any, what: str) -> None:
    assert after == before, f"{what} changed"


# 1b. Deciding an approval.


def test_a_hostile_page_cannot_decide_an_approval(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    local: Stack,  # noqa: F811
    approval: dict[str, Any],
) -> None:
    worker, services = local
    api = worker.base_url
    aid = approval["approval_id"]
    with logs_on_failure(worker):
        answers = ApiAnswers(worker)
        decision = {"decision": "approve", "comment": "approved by a hostile page"}
        for action in (f"{api}/approvals/{aid}", f"{api}/console/approvals/{aid}"):
            answer = _submit_form(attacker, hostile, api, action, decision)
            # Refused as cross-site, before the approver check (the local caller is none).
            assert REFUSED_CROSS_SITE in answer, answer
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        _run_fetches(
            attacker,
            hostile,
            [
                # A form body: these routes take one, so only the cross-site check refuses it.
                (
                    f"{api}/approvals/{aid}",
                    {
                        "method": "POST",
                        "mode": "no-cors",
                        "headers": form,
                        "body": "decision=approve&comment=hostile",
                    },
                ),
                (
                    f"{api}/console/approvals/{aid}",
                    {
                        "method": "POST",
                        "mode": "no-cors",
                        "headers": form,
                        "body": "decision=reject&comment=hostile",
                    },
                ),
                (
                    f"{api}/approvals/{aid}",
                    {
                        "method": "POST",
                        "mode": "no-cors",
                        "headers": {"Content-Type": "text/plain"},
                        "body": json.dumps(decision),
                    },
                ),
            ],
        )

        answers.expect_refused(
            api, {f"{api}/approvals/{aid}": 3, f"{api}/console/approvals/{aid}": 2}
        )

        def still_pending() -> None:
            status, now = http_json("GET", f"{api}/approvals/{aid}")
            assert status == 200, now
            assert now["status"] == "pending", now
            assert not now.get("decision"), now
            assert _run(api, approval["run_id"])["status"] != "SUCCEEDED"
            # Approved, the run would pay the refund.
            assert not [e for e in services.ledger("payments") if e["event"] == "charge.created"]

        _nothing_happened_after(still_pending)


# 1c. Cancelling or terminating a run.


def test_a_hostile_page_cannot_stop_a_run(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    local: Stack,  # noqa: F811
) -> None:
    worker, _ = local
    api = worker.base_url
    with logs_on_failure(worker):
        run_id = _chat(api)
        before = _run(api, run_id)
        answers = ApiAnswers(worker)
        console = f"{api}/console/runs/{run_id}"
        for action in (
            f"{console}/cancel",
            f"{console}/terminate",
            f"{console}/redrive",
            f"{console}/rerun",
            f"{console}/budget",  # extending the budget would wake the runs it paused
            f"{api}/runs/{run_id}/cancel",
        ):
            extra = {"add_tokens": "99999"} if action.endswith("/budget") else {}
            fields = {"reason": "hostile", **extra}
            answer = _submit_form(attacker, hostile, api, action, fields)
            assert REFUSED_CROSS_SITE in answer, answer
        # No body: only the cross-site check stands between this and a cancelled run.
        bare = {"method": "POST", "mode": "no-cors"}
        reason = {
            **bare,
            "headers": {"Content-Type": "text/plain"},
            "body": json.dumps({"reason": "hostile"}),
        }
        # Whoever may cancel may extend a run's budget: the same check stands in the way.
        extension = {**reason, "body": json.dumps({"add_tokens": 10**6, "reason": "hostile"})}
        _run_fetches(
            attacker,
            hostile,
            [
                (f"{api}/runs/{run_id}/cancel", bare),
                (f"{api}/runs/{run_id}/terminate", bare),
                (f"{api}/runs/{run_id}/cancel", reason),
                (f"{api}/runs/{run_id}/terminate", reason),
                (f"{api}/runs/{run_id}/budget", extension),
            ],
        )
        answers.expect_refused(
            api,
            {
                f"{console}/cancel": 1,
                f"{console}/terminate": 1,
                f"{console}/redrive": 1,
                f"{console}/rerun": 1,
                f"{console}/budget": 1,
                f"{api}/runs/{run_id}/cancel": 3,
                f"{api}/runs/{run_id}/terminate": 2,
                f"{api}/runs/{run_id}/budget": 1,
            },
        )
        _nothing_happened_after(lambda: _assert_equal(_run(api, run_id), before, "the run"))

        # The same request without a browser's headers (the local operator) does cancel it.
        status, body = http_json("POST", f"{api}/runs/{run_id}/cancel", {"reason": "cleanup"})
        assert status in (200, 202), body
        wait_until(lambda: _run(api, run_id)["status"] == "CANCELLED", 60, "the cancel")


# 1d. Sending an event into a run.


def test_a_hostile_page_cannot_send_an_event(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    local: Stack,  # noqa: F811
) -> None:
    worker, _ = local
    api = worker.base_url
    with logs_on_failure(worker):
        run_id = _chat(api)
        before = (_run(api, run_id), _history(api, run_id))
        events = f"{api}/runs/{run_id}/events/message"
        answers = ApiAnswers(worker)
        bye = json.dumps({"text": "bye"})  # would end the conversation: the run would finish
        _run_fetches(
            attacker,
            hostile,
            [
                (events, {"method": "POST", "mode": "no-cors"}),  # no body: a null event
                (
                    events,
                    {
                        "method": "POST",
                        "mode": "no-cors",
                        "headers": {"Content-Type": "text/plain"},
                        "body": bye,
                    },
                ),
                (
                    events,
                    {
                        "method": "POST",
                        "mode": "no-cors",
                        "headers": {"Content-Type": "application/x-www-form-urlencoded"},
                        "body": "text=bye",
                    },
                ),
            ],
        )
        answer = _submit_form(attacker, hostile, api, events, {"text": "bye"})
        assert REFUSED_CROSS_SITE in answer, answer
        console_events = f"{api}/console/runs/{run_id}/events"  # the console's form
        answer = _submit_form(
            attacker, hostile, api, console_events, {"name": "message", "data": bye}
        )
        assert REFUSED_CROSS_SITE in answer, answer

        answers.expect_refused(api, {events: 4, console_events: 1})
        _nothing_happened_after(
            lambda: _assert_equal(
                (_run(api, run_id), _history(api, run_id)), before, "the run or its history"
            )
        )

        # Sent by the local operator, the same event is recorded and ends the run.
        status, body = http_json("POST", events, {"text": "bye"})
        assert status == 202, body
        wait_until(lambda: _run(api, run_id)["status"] == "SUCCEEDED", 60, "the chat to end")


# 1e. Reading the Api (the same-origin policy: local mode answers no CORS request).


def test_a_hostile_page_cannot_read_the_api(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    local: Stack,  # noqa: F811
    approval: dict[str, Any],
) -> None:
    worker, _ = local
    api = worker.base_url
    paths = [
        "/runs",
        f"/runs/{approval['run_id']}/history",
        "/approvals?status=pending",
        f"/approvals/{approval['approval_id']}",
        "/flow",
        "/openapi.json",
    ]
    cors: list[tuple[str, dict[str, Any]]] = [(f"{api}{path}", {}) for path in paths]
    results = _run_fetches(attacker, hostile, cors)
    # Every answer was withheld from the page: no Access-Control-Allow-Origin on any of them.
    assert all("Failed to fetch" in r.get("error", "") for r in results), results
    for path in paths:
        request = urllib.request.Request(f"{api}{path}", headers={"Origin": "http://evil.test"})
        with urllib.request.urlopen(request, timeout=10) as response:  # loopback
            assert response.status == 200, path
            assert "Access-Control-Allow-Origin" not in response.headers, path


# 1f. Framing the console (clickjacking).


@pytest.mark.parametrize("page", ["/console", "/console/approvals"])
def test_the_console_refuses_to_be_framed(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    local: Stack,  # noqa: F811
    page: str,
) -> None:
    worker, _ = local
    api = worker.base_url
    driver, url = attacker

    # The headers, as any client gets them.
    request = urllib.request.Request(f"{api}{page}", headers={"Accept": "text/html"})
    with urllib.request.urlopen(request, timeout=10) as response:  # loopback
        assert response.status == 200
        assert response.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
        assert "<title>" in response.read().decode()

    # In Chromium: the console in a frame of a hostile page, next to a page that may be framed.
    allowed = hostile.add("<!doctype html><title>framed</title><p id=ok>framed fine</p>")
    framing = hostile.add(
        f"""<!doctype html><title>framing</title>
<script>
let loaded = 0;
function frameLoaded() {{ if (++loaded === 2) document.title = "done"; }}
</script>
<iframe id=console onload="frameLoaded()" src="{escape(api + page)}"></iframe>
<iframe id=control onload="frameLoaded()" src="{escape(url(allowed))}"></iframe>"""
    )
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(url(framing))
    wait_until(lambda: driver.title == "done", 20, "the frames to load")
    try:
        driver.switch_to.frame(driver.find_element("css selector", "#control"))
        assert "framed fine" in _body_text(driver)  # webdriver does see inside a frame...
        driver.switch_to.default_content()
        driver.switch_to.frame(driver.find_element("css selector", "#console"))
        shown = _body_text(driver)
        source = str(driver.page_source)
    finally:
        driver.switch_to.default_content()
    # ...and there is nothing of the console's in this one (Chromium's error page, at most).
    assert "Runs" not in shown and "Approvals" not in shown and "durable-agents" not in shown
    assert "<table" not in source and "<form" not in source
    refused = [e["message"] for e in driver.get_log("browser") if "frame" in e["message"]]
    assert any("X-Frame-Options" in m or "frame-ancestors" in m for m in refused), refused


# 1f'. Probing for ids: an element's load or error event must not tell whether an id exists.

PROBES = ("img", "script", "iframe", "object")


def _probe_page(urls: dict[str, str]) -> str:
    """A page that embeds each URL as every element kind and records its load/error event."""
    elements = "".join(
        f'<{kind} data-probe="{escape(name)}:{kind}" onload="seen(this, \'load\')" '
        f"onerror=\"seen(this, 'error')\" "
        f'{"data" if kind == "object" else "src"}="{escape(url)}"></{kind}>'
        for name, url in urls.items()
        for kind in PROBES
    )
    expected = len(urls) * len(PROBES)
    # Inline handlers: a frame's load event does not reach a listener on the window.
    return f"""<!doctype html><title>probing</title><script>
window.events = {{}};
function seen(element, type) {{
  const name = element.getAttribute("data-probe");
  if (!(name in window.events)) window.events[name] = type;
  if (Object.keys(window.events).length === {expected}) document.title = "done";
}}
</script>{elements}"""


def test_a_hostile_page_cannot_probe_for_ids(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    local: Stack,  # noqa: F811
    approval: dict[str, Any],
) -> None:
    worker, _ = local
    api = worker.base_url
    driver, url = attacker
    answers = ApiAnswers(worker)
    targets = {
        "run": f"{api}/runs/{approval['run_id']}",
        "no-run": f"{api}/runs/run-probe-does-not-exist",
        "approval": f"{api}/approvals/{approval['approval_id']}",
        "no-approval": f"{api}/approvals/apr-probedoesnotexist",
    }
    driver.get(url(hostile.add(_probe_page(targets))))
    wait_until(lambda: driver.title == "done", 20, "the probes' events")
    events = driver.execute_script("return window.events")
    # What the page saw is the same for an id that exists and one that does not...
    for kind in PROBES:
        assert events[f"run:{kind}"] == events[f"no-run:{kind}"], events
        assert events[f"approval:{kind}"] == events[f"no-approval:{kind}"], events
    # ...because the Api refused every one of them before looking (403, not 200 or 404).
    prefix = len(api)
    expected = {f"GET {target[prefix:]}" for target in targets.values()}
    wait_until(lambda: {r for r, _ in answers.gets()} >= expected, 10, "the Api's answers")
    statuses = {status for request, status in answers.gets() if request in expected}
    assert statuses == {403}, answers.gets()


# 1g. A blind form to the store (S3's POST-object upload is a plain HTML form).


def test_a_hostile_page_cannot_write_to_the_store(
    attacker: tuple[Any, Callable[[str], str]],
    hostile: HostileSite,
    local: Stack,  # noqa: F811
) -> None:
    worker, _ = local
    store = f"http://127.0.0.1:{_store_port(worker)}"
    s3 = boto3.client(
        "s3",
        endpoint_url=store,
        region_name="us-east-1",
        aws_access_key_id=key_for(store),  # the store's session key, from its key file
        aws_secret_access_key="testing",
    )
    bucket = s3.list_buckets()["Buckets"][0]["Name"]  # local mode made the template's buckets
    key = f"threat-suite/hostile-{next(_MARKERS)}.txt"

    def stored(name: str) -> bool:
        try:
            s3.head_object(Bucket=bucket, Key=name)
        except botocore.exceptions.ClientError as exc:
            assert exc.response["Error"]["Code"] == "404", exc.response
            return False
        return True

    answer = _submit_form(
        attacker,
        hostile,
        store,
        f"{store}/{bucket}",
        {"key": key, "file": "pwned"},
        succeeded=lambda: stored(key),
    )
    assert "answers AWS SDK clients only, not a web page" in answer, answer
    _nothing_happened_after(lambda: _assert_equal(stored(key), False, "the bucket"))

    # The same form without a browser's headers is refused too unless it carries the store's
    # session key (another local process does not have it); with the key, from a process of
    # local mode's user, it is an upload: the store would have taken the page's form.
    control = f"{key}.control"
    form = urllib.parse.urlencode({"key": control, "file": "not from a page"}).encode()
    credential = (
        f"AWS4-HMAC-SHA256 Credential={key_for(store)}/20260101/us-east-1/s3/aws4_request, "
        "SignedHeaders=host, Signature=0"
    )
    for authorization in (None, credential):
        request = urllib.request.Request(
            f"{store}/{bucket}",
            data=form,
            method="POST",
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                **({"Authorization": authorization} if authorization else {}),
            },
        )
        if authorization is None:
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)  # loopback
            assert refused.value.code == 403
            assert "session key" in refused.value.read().decode()
            assert not stored(control)
            continue
        with urllib.request.urlopen(request, timeout=10) as response:  # loopback
            assert response.status in (200, 201, 204)
    assert stored(control)


# 2. DNS rebinding: a name the attacker controls now resolves to 127.0.0.1.


def _store_port(worker: WorkerProcess) -> int:
    """The port of the moto server the worker uses (its ``--moto-endpoint``)."""
    command = worker._command
    endpoint = command[command.index("--moto-endpoint") + 1]
    port = urlsplit(endpoint).port
    assert port is not None, endpoint
    return port


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalIssuer]:
    """The ``--local-oidc`` issuer (the ``local`` fixture runs none), on a free port."""
    started = LocalIssuer(0)
    started.start()
    try:
        yield started
    finally:
        started.stop()


SAME_ORIGIN_REQUESTS = """
const [requests, done] = [arguments[0], arguments[arguments.length - 1]];
Promise.all(requests.map(([path, init]) => fetch(path, init).then(
  async (r) => ({status: r.status, text: await r.text()}),
  (e) => ({error: String(e)}),
))).then(done);
"""


@pytest.mark.parametrize("target", ["api", "store", "issuer"])
def test_a_rebound_name_is_misdirected(
    rebinding_browser: Any,
    local: Stack,  # noqa: F811
    request: pytest.FixtureRequest,
    target: str,
) -> None:
    worker, _ = local
    api = worker.base_url
    json_type = {"Content-Type": "application/json"}
    if target == "api":
        port = worker.api_port
        page = "/console"
        requests: list[tuple[str, dict[str, Any]]] = [
            ("/runs", {}),
            (
                "/runs",
                {
                    "method": "POST",
                    "headers": json_type,
                    "body": json.dumps({"agent": "example-chat", "input": {"message": "rebound"}}),
                },
            ),
        ]
    elif target == "store":
        port = _store_port(worker)
        page = "/"
        target_header = {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.ListTables",
        }
        requests = [("/", {}), ("/", {"method": "POST", "headers": target_header, "body": "{}"})]
    else:
        port = request.getfixturevalue("issuer").port
        page = "/.well-known/jwks.json"
        requests = [
            ("/.well-known/openid-configuration", {}),
            (
                "/token",
                {
                    "method": "POST",
                    "headers": json_type,
                    "body": json.dumps({"user": "mallory", "groups": ["support-leads"]}),
                },
            ),
        ]

    with logs_on_failure(worker):
        before = _run_ids(api)
        rebinding_browser.get(f"http://{EVIL}:{port}{page}")
        shown = _body_text(rebinding_browser)
        assert "answers only Host" in shown and f"{EVIL}:{port}" in shown, shown
        # The page now is of the rebound origin: its own requests are same-origin, readable.
        rebinding_browser.set_script_timeout(20)
        answers = rebinding_browser.execute_async_script(SAME_ORIGIN_REQUESTS, requests)
        for answer in answers:
            assert answer.get("status") == 421, answer
            assert "answers only Host" in answer["text"], answer
            assert "keys" not in answer["text"] and "TableNames" not in answer["text"]
        _nothing_happened_after(lambda: _assert_equal(_run_ids(api), before, "the runs"))
