"""The run console (``/console``) over the Api handler, DynamoDB on moto.

Pages: the runs list (filters, paging), one run's timeline (also what a browser gets from
``GET /runs/{id}/history``), pending approvals and reviews. Actions (cancel, approve/reject, a
review decision) post forms, go through the Api's own checks and answer 303; a form from
another site is refused (403) and changes nothing. Every value is escaped; times are full ISO
dates with their timezone; another tenant's run is the same 404 as none.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any
from urllib.parse import urlencode

import pytest

from api.console_page import STYLE, render_pending_page, render_runs_page, root_of
from api.console_timeline import render_timeline_page
from durable_agents.core.models import (
    EffectStatus,
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
    RunHeader,
    RunSnapshot,
    RunStatus,
    SideEffectRecord,
    WaitStatus,
)
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.engine.runtime import Runtime
from durable_agents_local.testing import AgentTestRunner, TestResult
from tests.contract.test_versions_contract import drive
from tests.unit.approvals_harness import OPERATOR, OUTSIDER, SUMMARY, Pending, pending, request
from tests.unit.conftest import Deployment
from tests.unit.test_api_approvals import api  # noqa: F401 - the fixture
from tests.unit.test_api_reruns import PROVIDER, shop_runtime, v1_failure
from tests.unit.test_api_reviews import op_id, paused  # noqa: F401 - the fixture
from tests.unit.test_api_run_events import _suspended, rt, status_value  # noqa: F401 - fixture
from tests.unit.test_api_tenancy import MISSING_RUN, TENANT_A, TENANT_B, TENANT_MAP

FULL_DATE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}\+00:00")
HOSTILE = '<script>alert("x")</script>&"\''
SAME_ORIGIN = {
    "Content-Type": "application/x-www-form-urlencoded",
    "Sec-Fetch-Site": "same-origin",
    "Accept": "text/html",
}
_ = pending  # the fixture, imported for the tests below


def form(
    path: str, fields: dict[str, str], headers: dict[str, str] | None = None, **kw: Any
) -> Any:
    return request("POST", path, raw_body=urlencode(fields), headers=headers or SAME_ORIGIN, **kw)


def page(path: str, **kw: Any) -> Any:
    reply = request("GET", path, headers={"Accept": "text/html"}, **kw)
    assert reply.status == 200, reply.text
    return reply


def _no_raw(html: str) -> None:
    assert "<script" not in html  # every value escaped; the console has no script of its own


# ------------------------------------------------------------------------------ rendering
def _hostile_snapshot() -> RunSnapshot:
    run_id = "run-1"
    header = RunHeader(
        run_id=run_id,
        agent=HOSTILE,
        versions={"workflow_version": HOSTILE},
        status=RunStatus.FAILED,
        input=json.dumps({"q": HOSTILE}),
        created_at_ms=1_700_000_000_000,
        updated_at_ms=1_700_000_005_000,
        error=ErrorInfo(type="Boom", message=HOSTILE),
        parent_run_id="parent-1",
    )
    step = f"{run_id}:fetch:1"
    entries = [
        Entry(run_id, "00000001", step, OpKind.STEP, HOSTILE, EntryType.STARTED, attempt=1,
              recorded_at_ms=1_700_000_001_000, lease_expires_at_ms=1_700_000_061_000),
        Entry(run_id, "00000001", step, OpKind.STEP, HOSTILE, EntryType.SUCCEEDED,
              value='"ok"', recorded_at_ms=1_700_000_002_500),
        Entry(run_id, "00000002", f"{run_id}:sub:1", OpKind.INVOKE, "sub", EntryType.SCHEDULED,
              value=json.dumps({"child_run_id": "run-1.sub.abc"}),
              recorded_at_ms=1_700_000_003_000),
        Entry(run_id, "00000004", f"{run_id}:cb:1", OpKind.CALLBACK, "cb", EntryType.SCHEDULED,
              value=json.dumps({"callback_id": "cb-1", "secret": "s3cr3t-value"}),
              due_at_ms=1_700_086_400_000, recorded_at_ms=1_700_000_004_000),
    ]  # fmt: skip
    effect = SideEffectRecord(
        run_id=run_id,
        position="00000003",
        operation_id=f"{run_id}:charge:1",
        tool="charge",
        tool_schema_version="1",
        canonical_request=json.dumps({"note": HOSTILE}),
        idempotency_key=f"{run_id}:charge:1",
        status=EffectStatus.COMMITTED,
        attempt=1,
        prepared_at_ms=1_700_000_003_500,
        updated_at_ms=1_700_000_003_900,
        lease_expires_at_ms=None,
        stale_at_ms=None,
        external_id=HOSTILE,
    )
    return RunSnapshot(header, entries, [effect])


def test_the_timeline_escapes_everything_and_shows_full_dates() -> None:
    snapshot = _hostile_snapshot()
    html = render_timeline_page(
        snapshot, [("run-1:fetch:1", HOSTILE)], root="../../", children=["run-1.sub.abc"]
    )
    _no_raw(html)
    # agent, step name, error, streamed text, external id (input and versions are JSON)
    assert html.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&quot;&#x27;") == 5
    # Start, end, lease of the step; the callback's deadline: ISO with the timezone.
    for ms in (1_700_000_001_000, 1_700_000_002_500, 1_700_086_400_000):
        from durable_agents.core.clock import iso

        assert f'<time datetime="{iso(ms)}">{iso(ms)}</time>' in html
    assert "2023-11-14T22:13:21.000+00:00" in html and "1.500 s" in html
    assert 'href="../../console/runs/run-1.sub.abc"' in html  # the child, linked
    assert 'href="../../console/runs/parent-1"' in html
    assert "charge" in html and ">committed<" in html  # the side effect and its status
    assert "s3cr3t-value" not in html  # a callback's scheduled value holds its secret
    # A FAILED run cannot be cancelled: its one form is the re-run's.
    assert re.findall(r'<form[^>]*class="([^"]+)"', html) == ["rerun"]


def test_a_failed_operation_and_run_show_their_tracebacks_collapsed_and_escaped() -> None:
    story = f'Traceback (most recent call last):\n  File "agent.py", line 7, in fetch\n{HOSTILE}'
    snapshot = _hostile_snapshot()
    run_id, step = "run-1", "run-1:parse:1"
    failed = [
        Entry(run_id, "00000005", step, OpKind.STEP, "parse", EntryType.STARTED, attempt=1,
              recorded_at_ms=1_700_000_004_100),
        Entry(run_id, "00000005", step, OpKind.STEP, "parse", EntryType.FAILED, attempt=1,
              error=ErrorInfo("ValueError", "bad", "builtins", traceback=story + " (step)"),
              recorded_at_ms=1_700_000_004_200),
    ]  # fmt: skip
    header = snapshot.header.replace(error=ErrorInfo("Boom", "run", traceback=story + " (run)"))
    html = render_timeline_page(
        RunSnapshot(header, [*snapshot.entries, *failed], snapshot.effects), [], root="../../"
    )
    _no_raw(html)
    escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&quot;&#x27;"
    for whose in ("step", "run"):
        # Folded by the browser (no script): a <details> around the escaped text.
        shown = (
            '<details class="traceback"><summary>traceback</summary><pre>Traceback (most recent'
            f" call last):\n  File &quot;agent.py&quot;, line 7, in fetch\n{escaped} ({whose})"
            "</pre></details>"
        )
        assert shown in html
    # An error recorded before tracebacks were kept shows as before, without a <details>.
    old = render_timeline_page(_hostile_snapshot(), [], root="../../")
    assert "<details" not in old


def test_a_review_shows_why_and_its_unclear_outcomes_traceback_collapsed() -> None:
    # A note is shown as sentences a person reads, not a Python dict; the story of the
    # attempt whose outcome is unknown is folded under it, escaped.
    story = f'Traceback (most recent call last):\n  File "tools.py", line 9, in send\n{HOSTILE}'
    snapshot = _hostile_snapshot()
    note = {
        "reason": f"outcome unknown and the call is not idempotent: {HOSTILE}",
        "unclear": "TimeoutError: the bank did not answer",
        "unclear_traceback": story,
        "failures": 1,
    }
    record = snapshot.effects[0].replace(status=EffectStatus.NEEDS_REVIEW, note=note)
    html = render_pending_page([], [record], root="../")
    _no_raw(html)
    assert "{&#x27;" not in html and "&#x27;failures&#x27;" not in html  # no dict repr
    escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&quot;&#x27;"
    assert f"<dt>Why</dt><dd>outcome unknown and the call is not idempotent: {escaped}" in html
    assert "<dt>Unclear outcome</dt><dd>TimeoutError: the bank did not answer</dd>" in html
    assert (
        '<details class="traceback"><summary>traceback</summary><pre>Traceback (most recent'
        f" call last):\n  File &quot;tools.py&quot;, line 9, in send\n{escaped}</pre></details>"
    ) in html
    # The run's timeline shows the same for the call.
    timeline = render_timeline_page(
        RunSnapshot(snapshot.header, snapshot.entries, [record]), [], root="../../"
    )
    assert "<dt>Unclear outcome</dt>" in timeline and f"in send\n{escaped}</pre>" in timeline
    # Once the call settled, its earlier unclear look is history: no story shown.
    settled = record.replace(status=EffectStatus.COMMITTED, note={"unclear": "x", **note})
    assert "Unclear outcome" not in render_pending_page([], [settled], root="../")


def test_the_runs_list_escapes_filters_and_keeps_them_when_paging() -> None:
    snapshot = _hostile_snapshot()
    html = render_runs_page(
        [snapshot.header],
        filters={"status": "", "agent": HOSTILE, "since": "", "limit": "10", "cursor": ""},
        next_cursor="abc=",
        root="./",
    )
    _no_raw(html)
    assert FULL_DATE.search(html)
    (next_link,) = re.findall(r'<a rel="next" href="([^"]+)"', html)
    assert next_link.startswith("console?") and "cursor=abc%3D" in next_link
    assert "limit=10" in next_link and "agent=%3Cscript%3E" in next_link


def test_links_are_relative_to_the_page() -> None:
    assert root_of("/console") == "./"
    assert root_of("/console/runs/x/cancel") == "../../../"


# ----------------------------------------------------------------------- pages over the Api
def test_pages_carry_the_strict_headers(pending: Pending) -> None:
    reply = page("/console")
    digest = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
    csp = reply.headers["Content-Security-Policy"]
    assert f"style-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
    assert "script-src" not in csp and "form-action 'self'" in csp
    assert reply.headers["Cache-Control"] == "no-store"
    assert pending.run_id in reply.html and FULL_DATE.search(reply.html)


def test_every_console_route_needs_an_iam_caller(pending: Pending) -> None:
    for method, path in (
        ("GET", "/console"),
        ("GET", f"/console/runs/{pending.run_id}"),
        ("GET", "/console/approvals"),
        ("POST", f"/console/runs/{pending.run_id}/cancel"),
        ("POST", f"/console/runs/{pending.run_id}/terminate"),
        ("POST", f"/console/runs/{pending.run_id}/redrive"),
        ("POST", f"/console/runs/{pending.run_id}/events"),
        ("POST", f"/console/runs/{pending.run_id}/budget"),
        ("POST", "/console/runs"),
    ):
        reply = request(method, path, user_arn=None)
        assert reply.status == 401, (path, reply.text)


def test_filters_and_a_bad_filter(pending: Pending) -> None:
    assert pending.run_id in page("/console", query={"status": "suspended"}).html
    assert pending.run_id not in page("/console", query={"status": "SUCCEEDED"}).html
    assert pending.run_id not in page("/console", query={"agent": "someone-else"}).html
    bad = request("GET", "/console", query={"limit": "0"}, headers={"Accept": "text/html"})
    assert bad.status == 400 and "limit must be between" in bad.html


@pytest.mark.parametrize("cursor", ["x", "eyJub3QiOiAiYSBjdXJzb3IifQ"])
def test_a_malformed_cursor_is_a_400_not_a_crash(pending: Pending, cursor: str) -> None:
    # Found by the Api fuzz: the console listed with it and answered 502.
    bad = request("GET", "/console", query={"cursor": cursor}, headers={"Accept": "text/html"})
    assert bad.status == 400 and "cursor" in bad.html


def test_the_timeline_and_history_negotiation(pending: Pending) -> None:
    html = page(f"/console/runs/{pending.run_id}").html
    assert 'data-kind="approval"' in html and pending.approval_id in html
    assert "Cancel run" in html  # SUSPENDED: cancellable
    browser = page(f"/runs/{pending.run_id}/history").html
    assert 'data-kind="approval"' in browser and 'href="../../console"' in browser
    api_client = request("GET", f"/runs/{pending.run_id}/history")
    assert api_client.json["events"][0]["event"] == "run_started"  # JSON clients unchanged


def test_pending_approvals_show_their_actions_escaped(pending: Pending) -> None:
    html = page("/console/approvals").html
    _no_raw(html)
    assert "Refund &lt;b&gt;42 EUR&lt;/b&gt;" in html and SUMMARY not in html
    assert f'action="../console/approvals/{pending.approval_id}"' in html
    assert 'value="approve"' in html and 'value="reject"' in html


def test_approving_from_the_console_records_the_decision(pending: Pending) -> None:
    reply = form(
        f"/console/approvals/{pending.approval_id}", {"decision": "approve", "comment": "ok"}
    )
    assert reply.status == 303, reply.text
    assert reply.headers["Location"] == "../../console/approvals?done=approval-approved"
    assert pending.finish()["approved"] is True
    again = form(f"/console/approvals/{pending.approval_id}", {"decision": "reject"})
    assert again.status == 409 and "already approved" in again.html


def test_an_outsider_may_not_approve(pending: Pending) -> None:
    reply = form(f"/console/approvals/{pending.approval_id}", {"decision": "approve"},
                 user_arn=OUTSIDER)  # fmt: skip
    assert reply.status == 403


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "https://evil.example"},
        {},
    ],
)
def test_a_form_from_another_site_is_refused_and_changes_nothing(
    pending: Pending,
    api: Deployment,  # noqa: F811
    headers: dict[str, str],
) -> None:
    from api.services import get_runtime

    store = get_runtime().store
    before = store.load(pending.run_id)
    base = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/html", **headers}
    for path, fields in (
        (f"/console/approvals/{pending.approval_id}", {"decision": "approve"}),
        (f"/console/runs/{pending.run_id}/cancel", {"reason": "csrf"}),
        (f"/console/runs/{pending.run_id}/terminate", {"reason": "csrf"}),
        (f"/console/runs/{pending.run_id}/redrive", {}),
        (f"/console/runs/{pending.run_id}/rerun", {"from": "start"}),
        (f"/console/runs/{pending.run_id}/events", {"name": "message", "data": "1"}),
        (f"/console/runs/{pending.run_id}/budget", {"add_tokens": "5", "reason": "csrf"}),
        ("/console/runs", {"agent": "refund", "input": "42"}),
    ):
        reply = form(path, fields, headers=base)
        assert reply.status == 403, reply.text
    assert store.get_wait(pending.approval_id).status is WaitStatus.PENDING
    assert store.get_run(pending.run_id).cancel_requested is None
    assert [r.run_id for r in store.list_runs(limit=10).runs] == [pending.run_id]  # none new
    assert store.load(pending.run_id) == before  # no event, no stop, nothing recorded
    assert api.published() == []


def test_an_origin_naming_this_host_is_accepted(pending: Pending) -> None:
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://h.example",
               "Host": "h.example"}  # fmt: skip
    assert form(f"/console/runs/{pending.run_id}/cancel", {"reason": "r"}, headers).status == 303


def test_cancel_from_the_console(pending: Pending, api: Deployment) -> None:  # noqa: F811
    reply = form(f"/console/runs/{pending.run_id}/cancel", {"reason": "customer <withdrew>"})
    assert reply.status == 303, reply.text
    assert reply.headers["Location"] == (
        f"../../../console/runs/{pending.run_id}?done=cancel-requested"
    )
    from api.services import get_runtime

    requested = get_runtime().store.get_run(pending.run_id).cancel_requested
    assert requested is not None and requested["reason"] == "customer <withdrew>"
    assert requested["by"].endswith("durable-agents-operator/alice") and OPERATOR
    assert [e["detail-type"] for e in api.published()] == ["Step Ready"]
    html = page(f"/console/runs/{pending.run_id}", query={"done": "cancel-requested"}).html
    assert "Cancel requested" in html and "customer &lt;withdrew&gt;" in html
    assert "Cancel run" not in html


def test_a_review_decided_from_the_console(paused: tuple[AgentTestRunner, TestResult]) -> None:  # noqa: F811
    runner, result = paused
    html = page("/console/approvals").html
    assert op_id(result) in html and "test-notify" in html
    fields = {"decision": "committed", "result": '{"message_id": "msg-1"}', "external_id": "msg-1"}
    reply = form(f"/console/reviews/{op_id(result)}", fields)
    assert reply.status == 303, reply.text
    assert runner.resume(result.run_id).output == "msg-1"
    bad = form(f"/console/reviews/{op_id(result)}", {"decision": "retry", "result": "{"})
    assert bad.status == 400


# ---------------------------------------------------------------------------------- tenancy
def test_another_tenants_run_is_the_same_404_as_none(
    pending: Pending, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    from api.services import get_runtime

    store = get_runtime().store
    header = store.get_run(pending.run_id)
    assert header.tenant == DEFAULT_TENANT  # the harness's run: neither a nor b
    for caller in (TENANT_A, TENANT_B):
        for method, suffix in (
            ("GET", ""),
            ("POST", "/cancel"),
            ("POST", "/terminate"),
            ("POST", "/redrive"),
            ("POST", "/rerun"),
            ("POST", "/events"),
        ):
            fields = {"name": "message", "data": '"hi"'} if suffix == "/events" else {}
            mine = (
                form(f"/console/runs/{pending.run_id}{suffix}", fields, user_arn=caller)
                if method == "POST"
                else request("GET", f"/console/runs/{pending.run_id}", user_arn=caller)
            )
            none = (
                form(f"/console/runs/{MISSING_RUN}{suffix}", fields, user_arn=caller)
                if method == "POST"
                else request("GET", f"/console/runs/{MISSING_RUN}", user_arn=caller)
            )
            assert mine.status == none.status == 404
            assert mine.text.replace(pending.run_id, MISSING_RUN) == none.text
        listed = request("GET", "/console", user_arn=caller, headers={"Accept": "text/html"})
        assert listed.status == 200 and pending.run_id not in listed.html
        approvals = request("GET", "/console/approvals", user_arn=caller)
        assert pending.approval_id not in approvals.html
        decided = form(f"/console/approvals/{pending.approval_id}", {"decision": "approve"},
                       user_arn=caller)  # fmt: skip
        assert decided.status == 404
    assert store.get_wait(pending.approval_id).status is WaitStatus.PENDING
    after = store.get_run(pending.run_id)
    assert after.cancel_requested is None and after.updated_at_ms == header.updated_at_ms


def test_the_console_modules_examples_run() -> None:
    import doctest

    from api import console_page

    result = doctest.testmod(console_page)
    assert result.attempted >= 1 and result.failed == 0


# ------------------------------------------------- input, result, history and more actions
def test_input_and_result_are_at_the_top_compact_and_long_ones_folded() -> None:
    snapshot = _hostile_snapshot()
    long_result = json.dumps({"text": HOSTILE * 40})
    header = snapshot.header.replace(status=RunStatus.SUCCEEDED, error=None, result=long_result)
    html = render_timeline_page(RunSnapshot(header, [], []), [], root="../../")
    _no_raw(html)
    top = html.index('<section class="card io">')
    assert top < html.index("<h2>Timeline</h2>")
    # The input: short, one compact line (its quotes escaped); the result: long, folded.
    assert '<code class="json">{&quot;q&quot;:&quot;&lt;script&gt;' in html[top:]
    assert '<details class="json"><summary><code>{&quot;text&quot;:' in html[top:]
    assert "characters)</span></summary><pre>{\n  &quot;text&quot;" in html[top:]
    assert 'href="../../runs/run-1/history?format=json"' in html
    # SUCCEEDED: nothing to do but re-run it.
    assert re.findall(r'<form[^>]*class="([^"]+)"', html) == ["rerun"]


def test_the_history_link_answers_json_even_to_a_browser(pending: Pending) -> None:
    html = page(f"/console/runs/{pending.run_id}").html
    (link,) = re.findall(r'<a href="([^"]+)" type="application/json">', html)
    assert link == f"../../runs/{pending.run_id}/history?format=json"
    browser = request(
        "GET",
        f"/runs/{pending.run_id}/history",
        query={"format": "json"},
        headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
    )
    assert browser.status == 200 and browser.json["events"][0]["event"] == "run_started"
    bad = request("GET", f"/runs/{pending.run_id}/history", query={"format": "xml"})
    assert bad.status == 400 and "format must be json" in bad.text


def test_terminate_from_the_console(pending: Pending, api: Deployment) -> None:  # noqa: F811
    html = page(f"/console/runs/{pending.run_id}").html
    assert "Terminate run" in html and "Send event" in html and "Redrive run" in html
    reply = form(f"/console/runs/{pending.run_id}/terminate", {"reason": "runaway <loop>"})
    assert reply.status == 303, reply.text
    assert reply.headers["Location"] == (
        f"../../../console/runs/{pending.run_id}?done=terminate-requested"
    )
    from api.services import get_runtime

    requested = get_runtime().store.get_run(pending.run_id).cancel_requested
    assert requested is not None and requested["mode"] == "terminate"
    assert requested["reason"] == "runaway <loop>"
    assert [e["detail-type"] for e in api.published()] == ["Step Ready"]
    html = page(f"/console/runs/{pending.run_id}", query={"done": "terminate-requested"}).html
    assert "Terminate requested" in html and "runaway &lt;loop&gt;" in html
    # Being stopped: no cancel, no second terminate, no event; a redrive still may wake it.
    assert "Cancel run" not in html and "Terminate run" not in html and "Send event" not in html
    assert "Redrive run" in html
    too_long = form(f"/console/runs/{pending.run_id}/terminate", {"reason": "x" * 1001})
    assert too_long.status == 422


def test_a_cancel_escalates_to_terminate_from_the_console(pending: Pending) -> None:
    assert form(f"/console/runs/{pending.run_id}/cancel", {"reason": "r"}).status == 303
    html = page(f"/console/runs/{pending.run_id}").html
    assert "Cancel run" not in html and "Terminate run" in html
    assert form(f"/console/runs/{pending.run_id}/terminate", {"reason": "now"}).status == 303
    from api.services import get_runtime

    requested = get_runtime().store.get_run(pending.run_id).cancel_requested
    assert requested is not None and requested["mode"] == "terminate"


def test_redrive_from_the_console_and_a_finished_run_has_no_actions(
    pending: Pending,
    api: Deployment,  # noqa: F811
) -> None:
    reply = form(f"/console/runs/{pending.run_id}/redrive", {})
    assert reply.status == 303, reply.text
    assert reply.headers["Location"] == f"../../../console/runs/{pending.run_id}?done=redriven"
    ready = [e for e in api.published() if e["detail-type"] == "Step Ready"]
    assert [e["detail"]["run_id"] for e in ready] == [pending.run_id]
    assert (
        "Run re-driven" in page(f"/console/runs/{pending.run_id}", query={"done": "redriven"}).html
    )
    json_only = request(
        "POST",
        f"/console/runs/{pending.run_id}/redrive",
        {},
        headers={"Sec-Fetch-Site": "same-origin"},
    )
    assert json_only.status in (400, 415), json_only.text  # a form, not JSON
    assert form(f"/console/approvals/{pending.approval_id}", {"decision": "approve"}).status == 303
    pending.finish()
    html = page(f"/console/runs/{pending.run_id}").html
    assert re.findall(r'<form[^>]*class="([^"]+)"', html) == ["rerun"]  # SUCCEEDED: re-run
    for action, fields in (
        ("redrive", {}),
        ("terminate", {}),
        ("events", {"name": "message", "data": "1"}),
    ):
        late = form(f"/console/runs/{pending.run_id}/{action}", fields)
        assert late.status == 409, (action, late.text)


def test_send_an_event_from_the_console(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = _suspended(rt, api)
    html = page(f"/console/runs/{run_id}", user_arn=TENANT_A).html
    assert f'action="../../console/runs/{run_id}/events"' in html
    reply = form(
        f"/console/runs/{run_id}/events",
        {"name": "message", "data": '{"text": "hi <b>"}', "idempotency_key": "m-1"},
        user_arn=TENANT_A,
    )
    assert reply.status == 303, reply.text
    assert reply.headers["Location"] == f"../../../console/runs/{run_id}?done=event-sent"
    ready = [e for e in api.published() if e["detail-type"] == "Step Ready"]
    assert [e["detail"]["run_id"] for e in ready] == [run_id]
    again = form(
        f"/console/runs/{run_id}/events",
        {"name": "message", "data": '{"text": "hi <b>"}', "idempotency_key": "m-1"},
        user_arn=TENANT_A,
    )
    assert again.status == 303 and api.published() == []  # the same event: recorded once
    assert drive(rt, run_id) is RunStatus.SUSPENDED
    assert status_value(run_id).json["value"] == {"turns": 1}
    empty = form(f"/console/runs/{run_id}/events", {"name": "message"}, user_arn=TENANT_A)
    assert empty.status == 303  # no data: null
    assert drive(rt, run_id) is RunStatus.SUSPENDED
    bye = form(f"/console/runs/{run_id}/events", {"name": "message", "data": '"bye"'},
               user_arn=TENANT_A)  # fmt: skip
    assert bye.status == 303
    assert drive(rt, run_id) is RunStatus.SUCCEEDED
    assert json.loads(rt.store.get_run(run_id).result or "") == [{"text": "hi <b>"}, None, "bye"]


def test_a_bad_event_form_is_a_400_that_says_why_and_records_nothing(
    rt: Runtime,  # noqa: F811
    api: Deployment,  # noqa: F811
) -> None:
    run_id = _suspended(rt, api)
    before = rt.store.load(run_id)
    path = f"/console/runs/{run_id}/events"
    for fields, why in (
        ({"name": "message", "data": "{not json"}, "the data field: the body is not valid JSON"),
        ({"name": "message", "data": "[" * 200 + "]" * 200}, "the data field"),
        ({"name": "no spaces", "data": "1"}, "invalid event name"),
        ({"name": "message", "data": "1", "idempotency_key": "\u0000"}, "idempotency_key"),
        ({"name": "message", "data": '"\\ud83d"'}, "the data field"),
    ):
        bad = form(path, fields, user_arn=TENANT_A)
        assert bad.status == 400, (fields, bad.text)
        assert why in bad.html.replace("&#x27;", "'"), (why, bad.html)
    unknown = form(path, {"name": "message", "extra": "x"}, user_arn=TENANT_A)
    assert unknown.status == 422
    assert rt.store.load(run_id) == before
    assert api.published() == []


def test_start_a_run_from_the_console(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    html = page("/console", user_arn=TENANT_A).html
    assert 'action="./console/runs"' in html and '<option value="listener">' in html
    (key,) = re.findall(r'name="idempotency_key" value="([^"]+)"', html)
    assert key != re.findall(r'name="idempotency_key" value="([^"]+)"',
                             page("/console", user_arn=TENANT_A).html)[0]  # fmt: skip
    fields = {"agent": "listener", "input": '{"hello": "<world>"}', "idempotency_key": key}
    reply = form("/console/runs", fields, user_arn=TENANT_A)
    assert reply.status == 303, reply.text
    location = reply.headers["Location"]
    assert location.startswith("../console/runs/") and location.endswith("?done=run-started")
    run_id = location.removeprefix("../console/runs/").split("?")[0]
    run = rt.store.get_run(run_id)
    assert run.tenant == "a" and run.agent == "listener"
    assert json.loads(run.input or "") == {"hello": "<world>"}
    assert [e["detail-type"] for e in api.published()] == ["Step Ready"]
    # The same form sent twice (a double click): the same run, nothing new.
    twice = form("/console/runs", fields, user_arn=TENANT_A)
    assert twice.headers["Location"] == f"../console/runs/{run_id}?done=run-start-repeated"
    assert [r.run_id for r in rt.store.list_runs(limit=10).runs] == [run_id]
    shown = page(f"/console/runs/{run_id}", query={"done": "run-started"}, user_arn=TENANT_A)
    assert "Run started." in shown.html and "&lt;world&gt;" in shown.html
    # Another tenant does not see it, and its key is its own: the same form starts its own run.
    other = form("/console/runs", fields, user_arn=TENANT_B)
    assert other.status == 303 and run_id not in other.headers["Location"]


def test_a_bad_start_form_is_refused_and_starts_nothing(
    rt: Runtime,  # noqa: F811
    api: Deployment,  # noqa: F811
) -> None:
    for fields, status, why in (
        ({"agent": "listener", "input": "{"}, 400, "the input field: the body is not valid JSON"),
        ({"agent": "nobody", "input": "1"}, 404, "nobody"),
        ({"agent": "", "input": "1"}, 422, "agent"),
        ({"agent": "listener", "idempotency_key": "\u0000"}, 400, "idempotency_key"),
    ):
        bad = form("/console/runs", fields, user_arn=TENANT_A)
        assert bad.status == status, (fields, bad.text)
        assert why in bad.html, (why, bad.html)
    key = {"agent": "listener", "input": "1", "idempotency_key": "k-1"}
    assert form("/console/runs", key, user_arn=TENANT_A).status == 303
    clash = form("/console/runs", {**key, "input": "2"}, user_arn=TENANT_A)
    assert clash.status == 409, clash.text
    assert len(rt.store.list_runs(limit=10).runs) == 1


# ------------------------------------------------------------------------------ re-runs
def test_the_rerun_form_is_only_on_a_finished_run_and_escapes_the_operations() -> None:
    snapshot = _hostile_snapshot()
    hostile_op = f"run-1:{HOSTILE}:5"
    entry = Entry("run-1", "00000005", hostile_op, OpKind.STEP, "x", EntryType.SUCCEEDED,
                  value="1", recorded_at_ms=1_700_000_004_500)  # fmt: skip
    snapshot = RunSnapshot(snapshot.header, [*snapshot.entries, entry], snapshot.effects)
    html = render_timeline_page(snapshot, [], root="../../")
    _no_raw(html)
    (form_html,) = re.findall(r'<form[^>]*class="rerun".*?</form>', html, re.S)
    assert 'action="../../console/runs/run-1/rerun"' in form_html
    options = re.findall(r'<option value="([^"]*)"( selected)?>', form_html)
    # failed (chosen for a FAILED run), start, then every top-level operation as shown.
    assert options[:3] == [("failed", " selected"), ("start", ""), ("fetch:1", "")]
    assert ("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&quot;&#x27;:5", "") in options
    assert 'name="version"' in form_html and 'name="repeat_effects"' in form_html
    assert "made again" in form_html  # the warning next to the checkbox
    assert 'name="dry_run" value="true"' in form_html and ">Re-run</button>" in form_html
    for status in (RunStatus.RUNNING, RunStatus.SUSPENDED, RunStatus.PAUSED):
        running = RunSnapshot(snapshot.header.replace(status=status), snapshot.entries, [])
        assert 'class="rerun"' not in render_timeline_page(running, [], root="../../")
    done = RunSnapshot(snapshot.header.replace(status=RunStatus.TERMINATED), snapshot.entries, [])
    terminated = render_timeline_page(done, [], root="../../")
    assert '<option value="start" selected>' in terminated  # not FAILED: from the start


@pytest.fixture
def shop(api: Deployment, monkeypatch: pytest.MonkeyPatch) -> Runtime:  # noqa: F811
    """The re-run tests' checkout (charges, then fails in ship at version 1), tenant a."""
    return shop_runtime(monkeypatch)


def test_rerun_from_the_console_previews_then_reruns_without_charging_twice(
    shop: Runtime,
    api: Deployment,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = v1_failure(shop, monkeypatch)
    html = page(f"/console/runs/{run_id}", user_arn=TENANT_A).html
    assert '<option value="failed" selected>' in html
    (charge,) = re.findall(r'<option value="(charge:[^"]*)"', html)
    path = f"/console/runs/{run_id}/rerun"
    runs_before = shop.store.list_runs(limit=10).runs
    api.published()  # drained: what the failed run published

    # Preview: the plan and the charge it would reuse; nothing written.
    preview = form(path, {"from": charge, "dry_run": "true"}, user_arn=TENANT_A)
    assert preview.status == 200, preview.text
    assert "Side effects that would be reused" in preview.html and ">charge<" in preview.html
    assert f'value="{charge}"' in preview.html and 'class="rerun-confirm"' in preview.html
    repeated = form(path, {"from": charge, "repeat_effects": "true", "dry_run": "true"},
                    user_arn=TENANT_A)  # fmt: skip
    assert "would be made again" in repeated.html and "each of these is made again" in repeated.html
    assert shop.store.list_runs(limit=10).runs == runs_before
    assert api.published() == [] and len(PROVIDER.ledger) == 1

    # Another site's form, another tenant: refused, nothing written.
    cross = {**SAME_ORIGIN, "Sec-Fetch-Site": "cross-site"}
    assert form(path, {"from": charge}, headers=cross, user_arn=TENANT_A).status == 403
    mine = form(path, {"from": "start"}, user_arn=TENANT_B)
    none = form(f"/console/runs/{MISSING_RUN}/rerun", {"from": "start"}, user_arn=TENANT_B)
    assert mine.status == none.status == 404
    assert mine.text.replace(run_id, MISSING_RUN) == none.text
    assert form(path, {"from": "nope"}, user_arn=TENANT_A).status == 400  # no such operation
    assert shop.store.list_runs(limit=10).runs == runs_before and api.published() == []

    # The rerun: 303 to the new run's page, which says where it came from.
    reply = form(path, {"from": charge}, user_arn=TENANT_A)
    assert reply.status == 303, reply.text
    location = reply.headers["Location"]
    assert location.startswith("../../../console/runs/") and location.endswith(
        "?done=rerun-started"
    )
    new_id = location.removeprefix("../../../console/runs/").split("?")[0]
    assert new_id != run_id and shop.store.get_run(new_id).rerun["of"] == run_id
    assert drive(shop, new_id) is RunStatus.SUCCEEDED
    assert len(PROVIDER.ledger) == 1  # the charge was reused, not made again
    shown = page(f"/console/runs/{new_id}", query={"done": "rerun-started"}, user_arn=TENANT_A)
    assert "Re-run started" in shown.html
    assert re.search(
        rf'Re-run of <a href="../../console/runs/{re.escape(run_id)}"><code>[^<]+</code></a> '
        rf"from <code>{re.escape(charge)}</code>",
        shown.html,
    )
    assert "Reused from" in shown.html and f"{run_id}:{charge}" in shown.html
    # The same form again names the same rerun.
    again = form(path, {"from": charge}, user_arn=TENANT_A)
    assert again.status == 303 and again.headers["Location"].endswith(
        f"{new_id}?done=rerun-repeated"
    )


def test_a_run_that_has_not_finished_is_not_rerun_from_the_console(pending: Pending) -> None:
    reply = form(f"/console/runs/{pending.run_id}/rerun", {"from": "start", "dry_run": "true"})
    assert reply.status == 409, reply.text
    assert "only a finished run can be re-run" in reply.text
