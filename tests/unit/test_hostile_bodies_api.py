"""Bodies that are not valid Unicode are refused at the door, on every route (issue 31, 5).

A JSON string with a lone surrogate (``"\\ud83d"``, escaped, so the body itself is valid
UTF-8): ``json.loads`` returns a ``str`` that cannot be encoded. ``POST /runs`` failed late
on it; an event, a callback outcome or an approval comment was recorded, and the run that
took it failed with ``PayloadError ... surrogates not allowed``. Every route refuses it at
the door with a 400, and records nothing.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import boto3
import pytest

from durable_agents.core.models import RunStatus
from durable_agents.engine.runtime import Runtime
from tests.contract.test_versions_contract import drive
from tests.unit.approvals_harness import Pending, request
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api_approvals import api, pending  # noqa: F401 - the fixtures
from tests.unit.test_api_callbacks import Waiting, waiting  # noqa: F401 - the fixture
from tests.unit.test_api_reviews import paused  # noqa: F401 - the fixture
from tests.unit.test_api_run_events import _suspended, rt  # noqa: F401 - the fixture
from tests.unit.test_api_tenancy import TENANT_A

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
CONSOLE_FORM = {**FORM, "Sec-Fetch-Site": "same-origin", "Accept": "text/html"}

# Lone surrogates as JSON writes them (escaped): a value, a key, deep inside, the whole body.
SURROGATE_BODIES = [
    '{"text": "\\ud83d"}',
    '{"\\udc00": 1}',
    '[{"a": ["ok", {"b": "x\\udfffy"}]}]',
    '"\\ud83d"',
]
SURROGATE_IDS = ["value", "key", "nested", "whole"]


def table_items() -> list[dict[str, Any]]:
    """Every item of the journal table (the test's whole state), in key order."""
    items = boto3.client("dynamodb", region_name="us-east-1").scan(TableName=TABLE)["Items"]
    return sorted(items, key=lambda i: (i["pk"]["S"], i["sk"]["S"]))


def assert_unicode_refusal(reply: Any) -> None:
    assert reply.status == 400, reply.text
    message = reply.json["error"]["message"]
    assert "not valid Unicode" in message and "surrogate" in message, message


# ------------------------------------------------------------------ (5) lone surrogates
@pytest.mark.parametrize("body", SURROGATE_BODIES, ids=SURROGATE_IDS)
def test_an_event_with_a_lone_surrogate_is_400_and_not_recorded(
    rt: Runtime,  # noqa: F811
    api: Deployment,  # noqa: F811
    body: str,
) -> None:
    run_id = _suspended(rt, api)
    before = table_items()
    reply = request("POST", f"/runs/{run_id}/events/message", raw_body=body, user_arn=TENANT_A)
    assert_unicode_refusal(reply)
    assert table_items() == before
    assert api.published() == []
    # The run still takes a good event and finishes with it.
    assert request("POST", f"/runs/{run_id}/events/message", "bye", user_arn=TENANT_A).status == 202
    assert drive(rt, run_id) is RunStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("success", '{"pages": "\\ud83d"}'),
        ("success", '"\\udc00"'),
        ("failure", '{"error_type": "X", "error_message": "\\ud83d"}'),
        ("failure", '{"error_type": "X\\ud83d"}'),
    ],
    ids=["success-value", "success-whole", "failure-message", "failure-type"],
)
def test_a_callback_outcome_with_a_lone_surrogate_is_400_and_not_recorded(
    waiting: Waiting,  # noqa: F811
    action: str,
    body: str,
) -> None:
    before = table_items()
    assert_unicode_refusal(waiting.post(action, raw_body=body))
    assert table_items() == before
    assert waiting.deployment.published() == []
    assert waiting.post("success", {"pages": 1}).status == 200  # still pending


@pytest.mark.parametrize(
    "body",
    [
        '{"agent": "example-research", "input": {"topic": "\\ud83d"}}',
        '{"agent": "example-research", "input": {"\\ud83d": "x"}}',
        '{"agent": "example-research", "idempotency_key": "k\\ud83d"}',
    ],
    ids=["input-value", "input-key", "idempotency-key"],
)
def test_starting_a_run_with_a_lone_surrogate_is_400_and_records_nothing(
    api: Deployment,  # noqa: F811
    body: str,
) -> None:
    before = table_items()
    assert_unicode_refusal(request("POST", "/runs", raw_body=body))
    assert table_items() == before


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        ('{"decision": "approve", "comment": "\\ud83d"}', {}),
        ('{"decision": "approve\\udc00"}', {}),
        ("decision=approve&comment=%ED%A0%BD", FORM),  # a surrogate's UTF-8 bytes, percent-encoded
        ("decision=approve&comment=%FF", FORM),  # not UTF-8 at all
    ],
    ids=["json-comment", "json-decision", "form-surrogate", "form-not-utf8"],
)
def test_an_approval_decision_with_a_lone_surrogate_is_400_and_not_recorded(
    pending: Pending,  # noqa: F811
    body: str,
    headers: dict[str, str],
) -> None:
    before = table_items()
    reply = request(
        "POST",
        f"/approvals/{pending.approval_id}",
        raw_body=body,
        headers={**headers, "Accept": "application/json"},
    )
    assert reply.status == 400, reply.text
    assert "not valid Unicode" in reply.json["error"]["message"], reply.text
    assert table_items() == before
    assert request("GET", f"/approvals/{pending.approval_id}").json["status"] == "pending"


def test_the_console_review_form_refuses_a_result_with_a_lone_surrogate(
    paused: Any,  # noqa: F811
) -> None:
    _, result = paused
    before = table_items()
    fields = "decision=committed&result=" + quote('{"message_id": "\\ud83d"}')
    reply = request(
        "POST",
        f"/console/reviews/{result.run_id}:test-notify:1",
        raw_body=fields,
        headers=CONSOLE_FORM,
    )
    assert reply.status == 400, reply.text
    assert table_items() == before


def test_a_surrogate_pair_is_one_character_and_accepted(
    waiting: Waiting,  # noqa: F811
) -> None:
    reply = waiting.post("success", raw_body='{"mood": "\\ud83d\\ude00"}')
    assert reply.status == 200, reply.text
    assert waiting.finish() == {"result": {"mood": "\U0001f600"}}
