"""Schemathesis fuzzes every route of the Api's OpenAPI document (served at ``GET /openapi.json``).

For every operation, valid (positive) and invalid (negative) requests are generated from the
document, with and without credentials and with the seeded run and approval ids, and sent to
local mode's WSGI app in-process (``tests/reliability/api_fuzz.py`` says why). Each response:

* is not a server error (schemathesis ``not_a_server_error``: no 5xx but the documented 503);
* has a documented status code, content type and body schema (``status_code_conformance``,
  ``content_type_conformance``, ``response_schema_conformance``);
* if it is a rejection (4xx), changed nothing: no AWS call that writes succeeded during it.

``make test`` runs ``API_FUZZ_REQUESTS`` (default 1,000, derandomized); ``make reliability``
(``RELIABILITY_FULL=1``) runs at least 10,000 with fresh randomness and prints the count.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from typing import Any

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


def _fuzz(stack: FuzzStack, budget: int, *, derandomize: bool) -> int:
    """Sends at least ``budget`` generated requests; returns how many it sent."""
    # The document the Api serves. (from_wsgi would drop the operation it was loaded from.)
    served = Client(stack.wsgi).get(
        "/openapi.json", headers={"X-Local-Caller-Arn": stack.caller_arn}
    )
    assert served.status_code == 200, served.get_data(as_text=True)
    schema = schemathesis.openapi.from_dict(served.json)
    modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    plans = {mode: _strategies(schema, stack, mode) for mode in modes}
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
                    assert mode is GenerationMode.NEGATIVE, label
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


@pytest.mark.reliability_full
@pytest.mark.timeout(1800)  # ~10 min on a shared 2-core machine; pytest's default is 300 s
def test_fuzz_every_route_full(stack: FuzzStack) -> None:
    sent = _fuzz(stack, REQUESTS, derandomize=False)
    print(f"\napi fuzz: {sent:,} requests, 0 responses >= 500")
    assert sent >= max(REQUESTS, 10_000) or "API_FUZZ_REQUESTS" in os.environ
