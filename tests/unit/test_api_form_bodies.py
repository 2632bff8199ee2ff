"""A form-encoded body on an operator's JSON route gets a JSON 4xx, not the HTML error page.

Forms are how a person's browser posts a decision (``/links/approvals/{id}``,
``/people/approvals/{id}``, ``/approvals/{id}``); ``curl -d`` sends one too, by default, to
any route. Only the decision routes answer a form with a page.
"""

from __future__ import annotations

import pytest

from tests.unit import test_api_approvals as approvals_suite
from tests.unit.test_api_approvals import Pending
from tests.unit.test_api_hostile_input import send

api = approvals_suite.api
pending = approvals_suite.pending

CURL_FORM = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "*/*"}


@pytest.mark.parametrize(
    "path",
    ["/runs", "/reviews/run-0123456789abcdef:charge-card:1", "/approvals/{approval}/links"],
)
def test_a_form_on_an_operator_route_gets_a_json_error(pending: Pending, path: str) -> None:
    status, body = send(
        "POST",
        path.format(approval=pending.approval_id),
        "agent=example-research&input=x",
        headers=CURL_FORM,
    )
    assert 400 <= status < 500, body
    assert body["error"]["message"]
