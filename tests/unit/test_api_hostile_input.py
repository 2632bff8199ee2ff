"""Hostile input to the Api handler: every one gets a 4xx JSON answer with a message.

In API Gateway a handler that raises is a 502 (and a Lambda invocation spent on a crash);
these requests come from anyone (``/links/...`` is auth NONE) or from any IAM caller, so the
handler must reject each of them itself: a body too large, too deep, with a number too long
or too many form fields, a malformed cursor, an oversized ``Idempotency-Key``, ids longer than
DynamoDB keys allow (moto accepts those on reads; DynamoDB does not), a non-UTF-8 body.
The limits are documented in docs/security.md.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.unit import test_api_approvals as approvals_suite
from tests.unit.conftest import Deployment, FakeLambdaContext
from tests.unit.test_api_approvals import Pending, mint, token_of

# The approvals suite's fixtures (a link key in Secrets Manager, an agent waiting on approval).
api = approvals_suite.api
pending = approvals_suite.pending

EVENTS = Path(__file__).resolve().parents[2] / "events"
OPERATOR = "arn:aws:sts::123456789012:assumed-role/durable-agents-operator/alice"
_IAM = object()


def send(
    method: str,
    path: str,
    raw_body: str | bytes | None = None,
    *,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
    user_arn: Any = _IAM,
) -> tuple[int, dict[str, Any]]:
    """Calls the handler with a crafted proxy event; bytes bodies are sent base64-encoded.

    Returns the status and the JSON body; fails the test if the handler raised (a 502).
    """
    from api.app import handler

    event = copy.deepcopy(json.loads((EVENTS / "api_start_run.json").read_text()))
    is_b64 = isinstance(raw_body, bytes)
    event.update(
        httpMethod=method,
        path=path,
        resource=path,
        pathParameters=None,
        queryStringParameters=query,
        multiValueQueryStringParameters={k: [v] for k, v in query.items()} if query else None,
        body=base64.b64encode(raw_body).decode() if isinstance(raw_body, bytes) else raw_body,
        isBase64Encoded=is_b64,
    )
    base = {k: v for k, v in event["headers"].items() if k != "Authorization"}
    event["headers"] = {**base, "Accept": "application/json", **(headers or {})}
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    event["requestContext"]["httpMethod"] = method
    event["requestContext"]["identity"]["userArn"] = OPERATOR if user_arn is _IAM else user_arn
    response = handler(event, FakeLambdaContext())
    headers_out = {**(response.get("headers") or {})}
    for key, values in (response.get("multiValueHeaders") or {}).items():
        headers_out.setdefault(key, values[-1])
    assert headers_out["Content-Type"].startswith("application/json"), response
    return response["statusCode"], json.loads(response["body"])


def assert_rejected(reply: tuple[int, dict[str, Any]], status: int, *words: str) -> None:
    code, body = reply
    assert code == status, body
    message = body["error"]["message"]
    assert message and all(w in message for w in words), message


DEEP = "[" * 1000 + "]" * 1000
LONG_NUMBER = '{"decision": "approve", "n": ' + "7" * 5000 + "}"
LONG_FLOAT = '{"decision": "approve", "n": 1.' + "5" * 5000 + "}"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


# ------------------------------------------------------------------ signed links (auth NONE)
@pytest.mark.parametrize(
    ("body", "headers", "status", "words"),
    [
        (DEEP, {}, 400, ("nested",)),
        ('{"a":' * 40 + "1" + "}" * 40, {}, 400, ("nested",)),
        (LONG_NUMBER, {}, 400, ("digits",)),
        (LONG_FLOAT, {}, 400, ("digits",)),
        (urlencode({f"f{i}": "x" for i in range(25)}), FORM, 400, ("fields",)),
        ("x" * 20_000, FORM, 413, ("bytes",)),
        (b"\xff\xfe{}", {}, 400, ("UTF-8",)),
    ],
    ids=["deep", "deep-object", "long-int", "long-float", "form-fields", "too-large", "utf8"],
)
def test_link_post_without_a_token_rejects_hostile_bodies(
    pending: Pending, body: str | bytes, headers: dict[str, str], status: int, words: tuple[str]
) -> None:
    reply = send(
        "POST", f"/links/approvals/{pending.approval_id}", body, headers=headers, user_arn=None
    )
    assert_rejected(reply, status, *words)


def test_link_post_verifies_a_query_token_before_reading_the_body(pending: Pending) -> None:
    path = f"/links/approvals/{pending.approval_id}"
    # A forged token in the query: 401, whatever the body (it is never parsed).
    reply = send("POST", path, DEEP, query={"token": "forged.token"}, user_arn=None)
    assert_rejected(reply, 401, "malformed")
    # A real one: the body is then parsed, under the same limits.
    token = token_of(mint(pending))
    assert_rejected(send("POST", path, DEEP, query={"token": token}, user_arn=None), 400)
    done = send("POST", path, '{"decision": "approve"}', query={"token": token}, user_arn=None)
    assert done[0] == 200 and done[1]["status"] == "approved"


# ------------------------------------------------------------------------ IAM routes: bodies
@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (DEEP, 400, ("nested",)),
        ('{"agent": "example-research", "input": ' + "9" * 5000 + "}", 400, ("digits",)),
        ('{"agent": "example-research", "input": "' + "x" * 300_000 + '"}', 413, ("bytes",)),
        (b'{"agent": "\xff"}', 400, ("UTF-8",)),
    ],
    ids=["deep", "long-int", "too-large", "utf8"],
)
def test_start_run_rejects_hostile_bodies(
    deployment: Deployment, body: str | bytes, status: int, words: tuple[str]
) -> None:
    assert_rejected(send("POST", "/runs", body), status, *words)


def test_a_base64_body_that_is_not_base64_is_400(deployment: Deployment) -> None:
    from api.app import handler

    event = copy.deepcopy(json.loads((EVENTS / "api_start_run.json").read_text()))
    event.update(body="%%%not base64%%%", isBase64Encoded=True)
    response = handler(event, FakeLambdaContext())
    assert response["statusCode"] == 400, response
    assert "base64" in json.loads(response["body"])["error"]["message"]


@pytest.mark.parametrize(
    ("key", "words"),
    [("k" * 3000, ("256",)), ("order\x0042", ("printable",)), ("line\nbreak", ("printable",))],
    ids=["long", "nul", "newline"],
)
def test_idempotency_key_header_is_bounded_and_printable(
    deployment: Deployment, key: str, words: tuple[str]
) -> None:
    body = json.dumps({"agent": "example-research", "input": {"topic": "x"}})
    reply = send("POST", "/runs", body, headers={"Idempotency-Key": key})
    assert_rejected(reply, 400, "Idempotency-Key", *words)


def test_idempotency_key_in_the_body_is_printable(deployment: Deployment) -> None:
    body = json.dumps({"agent": "example-research", "idempotency_key": "a\x07b"})
    assert_rejected(send("POST", "/runs", body), 400, "printable")


# ------------------------------------------------------------------------ IAM routes: cursors
def _b64(value: Any) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "!!!not-base64!!!",
        "abc",  # bad padding
        _b64(b"\xff\xfe"),
        _b64(b"not json"),
        _b64([1, 2, 3]),
        _b64({"pk": "RUN#x"}),  # not a DynamoDB key
        _b64({"pk": {"S": "x"}, "sk": {"S": "y"}, "gsi1pk": {"S": "STATUS#FAILED"}}),
        _b64(
            {
                "pk": {"S": "x"},
                "sk": {"S": "y"},
                "gsi1pk": {"S": "STATUS#FAILED"},  # another status's partition
                "gsi1sk": {"S": "z"},
            }
        ),
        "A" * 5000,
    ],
    ids=[
        "not-b64",
        "padding",
        "not-utf8",
        "not-json",
        "list",
        "no-types",
        "missing-key",
        "other-partition",
        "long",
    ],
)
def test_list_runs_rejects_a_malformed_cursor(deployment: Deployment, cursor: str) -> None:
    reply = send("GET", "/runs", query={"status": "running", "cursor": cursor})
    assert_rejected(reply, 400, "cursor")


def test_list_runs_follows_its_own_cursor(deployment: Deployment) -> None:
    for topic in ("a", "b", "c"):
        body = json.dumps({"agent": "example-research", "input": {"topic": topic}})
        assert send("POST", "/runs", body)[0] == 201
    status, first = send("GET", "/runs", query={"status": "running", "limit": "2"})
    assert status == 200 and len(first["runs"]) == 2 and first["cursor"]
    query = {"status": "running", "limit": "2", "cursor": first["cursor"]}
    status, rest = send("GET", "/runs", query=query)
    assert status == 200 and len(rest["runs"]) == 1


# ---------------------------------------------------------------------------- ids and bounds
LONG_ID = "r" * 3000


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", f"/runs/{LONG_ID}", None),
        ("GET", f"/runs/{LONG_ID}/history", None),
        ("GET", f"/runs/{LONG_ID}/stream", None),
        ("POST", f"/runs/{LONG_ID}/redrive", None),
        ("POST", f"/runs/{LONG_ID}/migrate", '{"to_version": "2"}'),
        ("POST", f"/reviews/{'op' * 1500}", '{"decision": "committed"}'),
    ],
    ids=["run", "history", "stream", "redrive", "migrate", "review"],
)
def test_ids_longer_than_a_key_are_400(
    deployment: Deployment, method: str, path: str, body: str | None
) -> None:
    assert_rejected(send(method, path, body), 400)


@pytest.mark.parametrize("run_id", ["run id", "run%00x", "-leading"], ids=["space", "nul", "dash"])
def test_run_ids_with_foreign_characters_are_400(deployment: Deployment, run_id: str) -> None:
    assert_rejected(send("GET", f"/runs/{run_id}"), 400, "run id")


@pytest.mark.parametrize(
    "path", [f"/approvals/{'a' * 300}", f"/callbacks/{'c' * 300}/success"], ids=["approval", "cb"]
)
def test_wait_ids_longer_than_ours_are_404_without_a_read(
    deployment: Deployment, path: str
) -> None:
    method = "GET" if path.startswith("/approvals") else "POST"
    assert_rejected(send(method, path), 404)


def test_stream_cursor_is_bounded(deployment: Deployment) -> None:
    body = json.dumps({"agent": "example-research", "input": {"topic": "x"}})
    run_id = send("POST", "/runs", body)[1]["run"]["run_id"]
    reply = send("GET", f"/runs/{run_id}/stream", query={"after": "c" * 2000})
    assert_rejected(reply, 400, "after")
    reply = send("GET", f"/runs/{run_id}/stream", headers={"Last-Event-ID": "c\x00"})
    assert_rejected(reply, 400, "after")


def test_stream_long_poll_is_bounded_to_10_seconds(deployment: Deployment) -> None:
    from api.routes.streams import MAX_WAIT_SECONDS

    assert MAX_WAIT_SECONDS <= 10
    body = json.dumps({"agent": "example-research", "input": {"topic": "x"}})
    run_id = send("POST", "/runs", body)[1]["run"]["run_id"]
    assert_rejected(send("GET", f"/runs/{run_id}/stream", query={"wait": "20"}), 400, "wait")
    assert_rejected(send("GET", f"/runs/{run_id}/stream", query={"wait": "nan"}), 400, "wait")


@pytest.mark.parametrize("path", ["/approvals", "/reviews"])
def test_a_listing_limit_of_thousands_of_digits_is_a_400(api: Deployment, path: str) -> None:
    # int() refuses a string of more than 4,300 digits with a ValueError (found by the fuzz).
    status, body = send("GET", path, query={"limit": "9" * 5000})
    assert status == 400, body
    assert "limit" in body["error"]["message"]
