"""Schemathesis fuzzes every route of the Api's OpenAPI document (served at ``GET /openapi.json``).

For every operation, valid (positive) and invalid (negative) requests are generated from the
document, with and without credentials and with the seeded run and approval ids, and sent to
local mode's WSGI app in-process (``tests/reliability/api_fuzz.py`` says why). Each response:

* is not a server error (schemathesis ``not_a_server_error``: no 5xx but the documented 503);
* has a documented status code, content type and body schema (``status_code_conformance``,
  ``content_type_conformance``, ``response_schema_conformance``);
* if it is a rejection (4xx), changed nothing: no AWS call that writes succeeded during it.

A third plan, ``hostile``, takes valid requests and corrupts them the ways that once got past
the parsers (issue 31): Unicode digits ("²", "٣") and trailing newlines in the seeded path ids
and in query values, numbers of thousands of digits, and bodies with a lone surrogate (a
``"\\ud83d"`` escape in JSON, a surrogate's bytes ``%ED%A0%BD`` in a form). On top of the
checks above, a body that is not valid Unicode is never accepted (it once was recorded, and
the run that read it failed).

``make test`` runs ``API_FUZZ_REQUESTS`` (default 1,000, derandomized); ``make reliability``
(``RELIABILITY_FULL=1``) runs at least 10,000 with fresh randomness and prints the count.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from werkzeug.test import Client

from tests.reliability import api_fuzz
from tests.reliability.api_fuzz import FuzzStack, describe, fuzz_stack

pytestmark = pytest.mark.reliability

FULL = os.environ.get("RELIABILITY_FULL") == "1"
REQUESTS = int(os.environ.get("API_FUZZ_REQUESTS", "10000" if FULL else "1000"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
SERVED_5XX = {503}  # documented: a dependency unavailable or not configured


@pytest.fixture(scope="module")
def stack() -> Iterator[FuzzStack]:
    with fuzz_stack() as built:
        yield built


def _strategies(schema: Any, stack: FuzzStack, mode: GenerationMode) -> dict[str, Any]:
    """One strategy per operation: generated data, with credentials and seeded ids mixed in."""
    out: dict[str, Any] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        path = operation.path
        headers: dict[str, str] = {"X-Local-Caller-Arn": stack.caller_arn}
        query: dict[str, str] = {}
        if path.startswith("/people/"):
            headers["Authorization"] = f"Bearer {stack.jwt}"
        if path.startswith("/links/"):
            query["token"] = stack.link_token
        if path.startswith("/console/"):  # past the console forms' same-origin check
            headers["Sec-Fetch-Site"] = "same-origin"
        seeded = stack.seeded(path)
        variants = [
            operation.as_strategy(generation_mode=mode, headers=headers),
            operation.as_strategy(generation_mode=mode, headers=headers, query=query or None),
        ]
        if seeded:
            variants.append(
                operation.as_strategy(
                    generation_mode=mode,
                    headers=headers,
                    query=query or None,
                    path_parameters=seeded,
                )
            )
        out[operation.label] = st.one_of(variants)
    return out


# Text that once reached int() or a key unchecked: Unicode digits ("²" passes str.isdigit and
# int() raises; int() reads "٣" as 3), a trailing newline (r"^...$" matches before it), more
# digits than int() converts (4,300).
HOSTILE_TEXT = ["²", "٣", "1²", "0\n", "1\n", "\n", "9" * 5000]
LONE_SURROGATES = ["\ud83d", "\udc00", "x\udfffy"]
POISONED: set[str] = set()  # ids of the cases whose body is not valid Unicode


def _hostile_ids(name: str, value: str) -> list[str]:
    """Corruptions of a seeded path id: each must be a 4xx, never a 5xx."""
    variants = [f"{value}\n", f"{value}²", f"{value}٣", "²", "٣"]
    if name == "operation_id":  # "<run>:test-notify:1": the generation and position parsed
        run_id, _, rest = value.partition(":")
        variants += [
            f"{run_id}:g²/{rest}",
            f"{run_id}:g٣/{rest}",
            f"{run_id}:g1\n/{rest}",
            f"{run_id}:{rest[:-1]}²",
            f"{run_id}:{rest[:-1]}٣",
        ]
    # Formatted into the path as they are: encoded here as a client would.
    return [quote(v, safe="") for v in variants]


def _poisoned_json(value: Any, surrogate: str, where: int) -> bytes:
    """``value`` as JSON with a lone surrogate escaped in a value, in a key, deep, or whole."""
    if isinstance(value, dict) and value:
        key = sorted(value)[where % len(value)]
        value = {**value, key: surrogate} if where % 3 == 0 else {**value, surrogate: 1}
    elif where % 2 == 0:
        value = [{"deep": [value, surrogate]}]
    else:
        value = surrogate
    return json.dumps(value).encode()  # ensure_ascii: the surrogate goes as a \\u escape


def _poisoned_form(value: Any, where: int) -> bytes:
    """Form fields with one value as a surrogate's UTF-8 bytes, percent-encoded."""
    fields = {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
    fields = fields or {"decision": "approve"}
    key = sorted(fields)[where % len(fields)]
    pairs = [
        f"{quote_plus(k)}={'%ED%A0%BD' if k == key else quote_plus(v)}" for k, v in fields.items()
    ]
    return "&".join(pairs).encode()


@st.composite
def _hostile_case(
    draw: st.DrawFn, base: Any, seeded: dict[str, str], query_names: list[str]
) -> Any:
    """A generated case with its ids, a query value or its body corrupted (issue 31)."""
    case = draw(base)
    corrupted = False
    for name, value in seeded.items():
        if draw(st.booleans()):
            case.path_parameters = {
                **case.path_parameters,
                name: draw(st.sampled_from(_hostile_ids(name, value))),
            }
            corrupted = True
    if query_names and (draw(st.booleans()) or not corrupted):
        name = draw(st.sampled_from(query_names))
        case.query = {**(case.query or {}), name: draw(st.sampled_from(HOSTILE_TEXT))}
        corrupted = True
    if case.media_type is not None and (draw(st.booleans()) or not corrupted):
        where = draw(st.integers(0, 5))
        if case.media_type == "application/x-www-form-urlencoded":
            case.body = _poisoned_form(case.body, where)
        else:
            case.body = _poisoned_json(case.body, draw(st.sampled_from(LONE_SURROGATES)), where)
        POISONED.add(case.id)
    return case


def _hostile_strategies(schema: Any, document: Any, stack: FuzzStack) -> dict[str, Any]:
    """One strategy per operation: a valid request (seeded ids) with hostile parts mixed in."""
    out: dict[str, Any] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        path = operation.path
        headers: dict[str, str] = {"X-Local-Caller-Arn": stack.caller_arn}
        query: dict[str, str] = {}
        if path.startswith("/people/"):
            headers["Authorization"] = f"Bearer {stack.jwt}"
        if path.startswith("/links/"):
            query["token"] = stack.link_token
        if path.startswith("/console/"):
            headers["Sec-Fetch-Site"] = "same-origin"
        seeded = stack.seeded(path)
        declared = document["paths"][path][operation.method.lower()].get("parameters", [])
        query_names = [p["name"] for p in declared if p["in"] == "query" and p["name"] != "token"]
        base = operation.as_strategy(
            generation_mode=GenerationMode.POSITIVE,
            headers=headers,
            query=query or None,
            path_parameters=seeded or None,
        )
        out[operation.label] = _hostile_case(base, seeded, query_names)
    return out


def _fuzz(stack: FuzzStack, budget: int, *, derandomize: bool) -> int:
    """Sends at least ``budget`` generated requests; returns how many it sent."""
    # The document the Api serves. (from_wsgi would drop the operation it was loaded from.)
    served = Client(stack.wsgi).get(
        "/openapi.json", headers={"X-Local-Caller-Arn": stack.caller_arn}
    )
    assert served.status_code == 200, served.get_data(as_text=True)
    schema = schemathesis.openapi.from_dict(served.json)
    plans: dict[str, dict[str, Any]] = {
        mode.value: _strategies(schema, stack, mode)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    }
    plans["hostile"] = _hostile_strategies(schema, served.json, stack)
    sent = 0
    started = time.monotonic()
    rounds = 0
    while sent < budget:
        rounds += 1
        per_test = math.ceil((budget - sent) / sum(len(p) for p in plans.values()))
        for mode, strategies in plans.items():
            for label, strategy in list(strategies.items()):
                try:
                    sent += _fuzz_operation(stack, label, strategy, per_test, derandomize, rounds)
                except Unsatisfiable:
                    # Nothing of this operation can be made invalid (no parameters, no body).
                    assert mode == GenerationMode.NEGATIVE.value, label
                    del strategies[label]
    api_fuzz.elapsed.append(time.monotonic() - started)
    return sent


def _fuzz_operation(
    stack: FuzzStack, label: str, strategy: Any, examples: int, derandomize: bool, round_: int
) -> int:
    sent = 0

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=derandomize and round_ == 1,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        nonlocal sent
        began = time.monotonic()
        writes_before = len(stack.writes.calls)
        response = case.call(app=stack.wsgi)
        sent += 1
        api_fuzz.requests[label] += 1
        api_fuzz.statuses[response.status_code] += 1
        api_fuzz.seconds[label] += time.monotonic() - began
        if response.status_code in SERVED_5XX:
            return  # documented; not_a_server_error would count it
        case.validate_response(response, checks=CHECKS)
        if case.id in POISONED:
            api_fuzz.poisoned[label] += 1
            assert response.status_code >= 400, (
                "a body that is not valid Unicode was accepted:\n" + describe(case, response)
            )
        if 400 <= response.status_code < 500:
            api_fuzz.rejected[label] += 1
            writes = stack.writes.calls[writes_before:]
            assert not writes, f"a rejected request changed state ({writes}):\n" + describe(
                case, response
            )

    run()
    return sent


def test_the_write_recorder_sees_an_accepted_request(stack: FuzzStack) -> None:
    """The no-state-change check is not vacuous: an accepted request is seen writing."""
    before = len(stack.writes.calls)
    reply = Client(stack.wsgi).post(
        "/runs",
        json={"agent": "example-research", "input": {"topic": "x"}},
        headers={"X-Local-Caller-Arn": stack.caller_arn},
    )
    assert reply.status_code == 201, reply.get_data(as_text=True)
    assert any(c.startswith("dynamodb:") for c in stack.writes.calls[before:])


@pytest.mark.skipif(FULL, reason="make reliability runs the full fuzz instead")
def test_fuzz_every_route_short(stack: FuzzStack) -> None:
    sent = _fuzz(stack, REQUESTS, derandomize=True)
    assert sent >= REQUESTS
    # Every route of the document was fuzzed (the migration route among them).
    assert api_fuzz.requests["POST /runs/{run_id}/migrate"] > 0
    assert api_fuzz.requests["POST /console/runs/{run_id}/cancel"] > 0
    assert api_fuzz.requests["GET /console/runs/{run_id}"] > 0
    # The hostile plan reached the routes that take bodies with bodies that are not Unicode.
    for route in (
        "POST /runs",
        "POST /runs/{run_id}/events/{name}",
        "POST /approvals/{approval_id}",
    ):
        assert api_fuzz.poisoned[route] > 0, route


@pytest.mark.reliability_full
@pytest.mark.timeout(1800)  # ~10 min on a shared 2-core machine; pytest's default is 300 s
def test_fuzz_every_route_full(stack: FuzzStack) -> None:
    sent = _fuzz(stack, REQUESTS, derandomize=False)
    print(f"\napi fuzz: {sent:,} requests, 0 responses >= 500")
    assert sent >= max(REQUESTS, 10_000) or "API_FUZZ_REQUESTS" in os.environ
