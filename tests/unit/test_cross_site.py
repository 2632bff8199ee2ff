"""Another site cannot make a browser change state through the Api (issue 31, finding 2).

Every state-changing route is refused (403, nothing changed) when the browser says the request
comes from another site (``Sec-Fetch-Site``) or from another origin (``Origin``); a JSON route
refuses a body that is not ``application/json`` (415), which shuts out the ``text/plain`` post
a browser sends cross-site without a preflight. Requests from this origin and requests without
either header (curl, the SDKs, the CLI) still work, and so do the approval page's forms.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from durable_agents.core.models import WaitStatus
from tests.unit.approvals_harness import Pending, mint, pending, request, token_of
from tests.unit.conftest import Deployment
from tests.unit.test_api_approvals import api  # noqa: F401 - the fixture
from tests.unit.test_api_callbacks import Waiting, waiting  # noqa: F401 - the fixture
from tests.unit.test_api_reviews import op_id, paused  # noqa: F401 - the fixture

_ = pending  # the fixture, imported for the tests below

HOST = "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com"  # the Host of the harness's events
CROSS_SITE = [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Origin": "https://evil.example"},
    {"Origin": "null"},  # a sandboxed frame of another site, with no Sec-Fetch-Site
    {"Origin": "http://["},  # not a URL at all: must be a 403, not an exception
    {"Sec-Fetch-Site": "cross-site", "Origin": f"https://{HOST}"},
]
CROSS_SITE_IDS = ["sec-fetch-cross", "sec-fetch-same-site", "origin", "null", "bad-origin", "mixed"]
JSON = {"Content-Type": "application/json", "Accept": "application/json"}


def _store() -> Any:
    from api.services import get_runtime

    return get_runtime().store


def _run_state(run_id: str) -> tuple[Any, Any]:
    run = _store().get_run(run_id)
    return run.status, run.cancel_requested


def _refused(reply: Any, status: int = 403) -> None:
    assert reply.status == status, reply.text
    if reply.headers.get("Content-Type", "").startswith("application/json"):
        kind = "CrossSiteRequestError" if status == 403 else "UnsupportedMediaTypeError"
        assert reply.json["error"]["type"] == kind


@pytest.mark.parametrize("headers", CROSS_SITE, ids=CROSS_SITE_IDS)
def test_a_cross_site_start_is_refused_and_starts_nothing(
    api: Deployment,  # noqa: F811
    headers: dict[str, str],
) -> None:
    body = {"agent": "refund-agent", "input": 42}
    _refused(request("POST", "/runs", body, headers={**JSON, **headers}))
    assert api.published() == []
    assert request("GET", "/runs").json["runs"] == []


@pytest.mark.parametrize("headers", CROSS_SITE, ids=CROSS_SITE_IDS)
def test_cross_site_requests_on_a_run_are_refused_and_change_nothing(
    pending: Pending,
    api: Deployment,  # noqa: F811
    headers: dict[str, str],
) -> None:
    before = _run_state(pending.run_id)
    run = f"/runs/{pending.run_id}"
    for path, body in (
        (f"{run}/events/nudge", {"payload": {"x": 1}}),
        (f"{run}/cancel", {"reason": "csrf"}),
        (f"{run}/terminate", {"reason": "csrf"}),
        (f"{run}/redrive", None),
    ):
        _refused(request("POST", path, body, headers={**JSON, **headers}))
        _refused(request("POST", path, headers={"Accept": "application/json", **headers}))
    assert _run_state(pending.run_id) == before
    assert api.published() == []


@pytest.mark.parametrize("headers", CROSS_SITE, ids=CROSS_SITE_IDS)
def test_a_cross_site_approval_decision_is_refused_and_decides_nothing(
    pending: Pending,
    api: Deployment,  # noqa: F811
    headers: dict[str, str],
) -> None:
    path = f"/approvals/{pending.approval_id}"
    form = urlencode({"decision": "approve"})
    as_form = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/html"}
    _refused(request("POST", path, raw_body=form, headers={**as_form, **headers}))
    _refused(request("POST", path, {"decision": "approve"}, headers={**JSON, **headers}))
    _refused(request("POST", f"{path}/links", {"approver": "user:ada@example.com"},
                     headers={**JSON, **headers}))  # fmt: skip
    assert _store().get_wait(pending.approval_id).status is WaitStatus.PENDING
    assert api.published() == []


@pytest.mark.parametrize("headers", CROSS_SITE, ids=CROSS_SITE_IDS)
def test_a_cross_site_callback_completion_is_refused_and_completes_nothing(
    waiting: Waiting,  # noqa: F811
    headers: dict[str, str],
) -> None:
    for action in ("success", "failure", "heartbeat"):
        _refused(waiting.post(action, {"error_type": "X"}, headers={**JSON, **headers}))
    assert waiting.deployment.published() == []
    assert waiting.post("success", {"pages": 1}).status == 200  # it was still open


@pytest.mark.parametrize("headers", CROSS_SITE, ids=CROSS_SITE_IDS)
def test_a_cross_site_review_decision_is_refused_and_decides_nothing(
    paused: Any,  # noqa: F811
    headers: dict[str, str],
) -> None:
    _, result = paused
    path = f"/reviews/{op_id(result)}"
    body = {"decision": "retry", "comment": "csrf"}
    _refused(request("POST", path, body, headers={**JSON, **headers}))
    reply = request("POST", path, body)  # still undecided: the same decision is accepted
    assert reply.status == 200, reply.text


# "": none (the harness's events always carry the header; an empty one is how it says none).
TEXT_PLAIN = ["text/plain", "text/plain;charset=UTF-8", "multipart/form-data; boundary=x", ""]


@pytest.mark.parametrize("content_type", TEXT_PLAIN)
def test_a_json_route_refuses_a_body_that_is_not_json_typed(
    pending: Pending,
    api: Deployment,  # noqa: F811
    content_type: str,
) -> None:
    headers = {"Accept": "application/json", "Content-Type": content_type}
    run = f"/runs/{pending.run_id}"
    for path, body in (
        ("/runs", {"agent": "refund-agent", "input": 42}),
        (f"{run}/events/nudge", {"payload": {"x": 1}}),
        (f"{run}/cancel", {"reason": "plain"}),
        (f"/approvals/{pending.approval_id}", {"decision": "approve"}),
    ):
        reply = request("POST", path, raw_body=json.dumps(body), headers=headers)
        _refused(reply, 415)
        assert "application/json" in reply.json["error"]["message"]
    assert _store().get_wait(pending.approval_id).status is WaitStatus.PENDING
    assert _run_state(pending.run_id)[1] is None
    assert api.published() == []


def test_a_json_route_that_takes_no_form_refuses_one(pending: Pending) -> None:
    reply = request(
        "POST",
        f"/runs/{pending.run_id}/cancel",
        raw_body=urlencode({"reason": "form"}),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    _refused(reply, 415)
    assert _run_state(pending.run_id)[1] is None


@pytest.mark.parametrize(
    "headers",
    [
        {},  # curl, the SDKs, the CLI
        {"Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},  # typed or bookmarked by the person
        {"Origin": f"https://{HOST}"},
        {"Sec-Fetch-Site": "same-origin", "Origin": f"https://{HOST}"},
        # Through `durable-agents console` (the signing proxy): the browser's page and its post
        # are both the proxy's, so the browser says same-origin, and the Origin it sends (the
        # proxy's) is forwarded to the Api's host. A page cannot set Sec-Fetch-Site, so when
        # present it decides.
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:8765"},
    ],
)
def test_same_origin_and_header_less_requests_still_work(
    pending: Pending, headers: dict[str, str]
) -> None:
    reply = request(
        "POST", f"/runs/{pending.run_id}/cancel", {"reason": "ok"}, headers={**JSON, **headers}
    )
    assert reply.status == 202, reply.text
    assert _run_state(pending.run_id)[1] is not None


def test_a_browser_without_sec_fetch_site_posts_the_approval_page(pending: Pending) -> None:
    # Safari before 16.4 sends no Sec-Fetch-Site; the page's Referrer-Policy (same-origin)
    # lets it send the page's own Origin with the form, which names the Api's host.
    page = request("GET", f"/approvals/{pending.approval_id}", headers={"Accept": "text/html"})
    assert page.headers["Referrer-Policy"] == "same-origin"
    old_safari = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Accept": "text/html",
        "Host": "api.example",
        "Origin": "https://api.example",
    }
    reply = request(
        "POST",
        f"/approvals/{pending.approval_id}",
        raw_body=urlencode({"decision": "approve"}),
        headers=old_safari,
    )
    assert reply.status == 200, reply.text


def test_the_approval_pages_own_form_still_works(pending: Pending) -> None:
    # A link page (Referrer-Policy: no-referrer) posts with Origin: null; Sec-Fetch-Site decides.
    browser = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Accept": "text/html",
        "Sec-Fetch-Site": "same-origin",
        "Origin": "null",
    }
    reply = request(
        "POST",
        f"/approvals/{pending.approval_id}",
        raw_body=urlencode({"decision": "approve", "comment": "from the page"}),
        headers=browser,
    )
    assert reply.status == 200 and "Decision recorded" in reply.html
    settled = _store().get_wait(pending.approval_id)
    assert settled.status is WaitStatus.COMPLETED and settled.outcome["approved"] is True


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "same-origin", "Origin": "null"},
        {"Origin": "null"},  # an older browser: no Sec-Fetch-Site
        {"Sec-Fetch-Site": "cross-site"},  # the link was opened elsewhere; the token decides
    ],
)
def test_a_signed_links_form_works_and_its_token_is_what_authorizes_it(
    pending: Pending, headers: dict[str, str]
) -> None:
    token = token_of(mint(pending))
    form = urlencode({"token": token, "decision": "approve"})
    browser = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/html"}
    path = f"/links/approvals/{pending.approval_id}"
    forged = urlencode({"token": "forged", "decision": "approve"})
    assert request("POST", path, raw_body=forged, headers={**browser, **headers},
                   user_arn=None).status == 401  # fmt: skip
    plain = {"Content-Type": "text/plain", "Accept": "application/json"}
    reply = request("POST", path, raw_body=json.dumps({"token": token, "decision": "approve"}),
                    headers={**plain, **headers}, user_arn=None)  # fmt: skip
    _refused(reply, 415)
    reply = request("POST", path, raw_body=form, headers={**browser, **headers}, user_arn=None)
    assert reply.status == 200 and "Decision recorded" in reply.html


def _event(headers: dict[str, str]) -> APIGatewayProxyEvent:
    return APIGatewayProxyEvent({"httpMethod": "POST", "path": "/", "headers": headers})


@pytest.mark.parametrize("origin", ["http://[", "http://[::1", "https://[zz]", "\x00"])
def test_the_consoles_check_refuses_an_unreadable_origin_without_raising(origin: str) -> None:
    from api.routes.console import CrossSiteFormError, check_same_origin

    with pytest.raises(CrossSiteFormError):
        check_same_origin(_event({"Origin": origin, "Host": "h.example"}))
    check_same_origin(_event({"Origin": "https://h.example", "Host": "h.example"}))


# Reads: another site's page may navigate to the Api (a link in an email, a bookmark), but
# not embed or fetch it (Fetch Metadata's resource isolation policy): an <img>, <script> or
# no-cors fetch of /runs/{id} would tell, through its load or error event, whether the id
# exists. Refused before routing, the same way for an id that exists and one that does not.
EMBEDDED = [
    {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"},
    {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "script"},
    {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"},
    {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"},
    {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "object"},
]


@pytest.mark.parametrize("headers", EMBEDDED, ids=["img", "script", "fetch", "iframe", "object"])
def test_another_sites_page_cannot_embed_or_fetch_a_read(
    pending: Pending, headers: dict[str, str]
) -> None:
    for path in (f"/runs/{pending.run_id}", "/runs/run-that-does-not-exist",
                 f"/approvals/{pending.approval_id}", "/approvals/apr-doesnotexist",
                 "/runs", "/openapi.json"):  # fmt: skip
        reply = request("GET", path, headers=headers)
        _refused(reply)
        assert pending.run_id not in reply.text


def test_another_sites_link_still_opens_a_page(pending: Pending) -> None:
    # A person clicking a link in a webmail: a top-level navigation, cross-site.
    clicked = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate",
               "Sec-Fetch-Dest": "document", "Accept": "text/html"}  # fmt: skip
    reply = request("GET", f"/approvals/{pending.approval_id}", headers=clicked)
    assert reply.status == 200 and "Approve" in reply.html
    own = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
    assert request("GET", f"/runs/{pending.run_id}", headers=own).status == 200
    assert request("GET", f"/runs/{pending.run_id}").status == 200  # no browser at all
