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
the run that read it failed). Half its cases instead carry one hostile header, and must get
exactly the status the rule for it names, changing nothing:

* a malformed or foreign ``Origin`` (``http://[``, ``null``, another host or port, 5,000
  characters, non-ASCII) or a ``Sec-Fetch-Site`` of another site (or garbage) on a
  state-changing route: 403 (``api.cross_site``; ``/links/`` is exempt, its token authorizes);
* a ``Host`` that is not one of local mode's loopback names: 421, before routing;
* a body route's body sent as ``text/plain``, multipart, without a ``Content-Type``, or as a
  form where the route takes JSON only: 415.

The same headers' harmless forms (this host's ``Origin``, ``Sec-Fetch-Site: none``, ``Host:
127.0.0.1``, ``application/json; charset=utf-8``) go through the usual checks. Valid requests
to the console's forms carry ``Sec-Fetch-Site: same-origin``, as the console's pages send.

``make test`` runs ``API_FUZZ_REQUESTS`` (default 1,000, derandomized); ``make reliability``
(``RELIABILITY_FULL=1``) runs at least 10,000 with fresh randomness and prints the count.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core import NotSet
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


def _credentials(stack: FuzzStack, path: str) -> tuple[dict[str, str], dict[str, str]]:
    """The headers and query that get a request to ``path`` past authentication.

    The local server names the IAM caller; /people takes a JWT, /links a minted link; a console
    form needs ``Sec-Fetch-Site: same-origin`` to get past the console's same-origin check.
    """
    headers: dict[str, str] = {"X-Local-Caller-Arn": stack.caller_arn}
    query: dict[str, str] = {}
    if path.startswith("/people/"):
        headers["Authorization"] = f"Bearer {stack.jwt}"
    if path.startswith("/links/"):
        query["token"] = stack.link_token
    if path.startswith("/console/"):
        headers["Sec-Fetch-Site"] = "same-origin"
    return headers, query


def _strategies(schema: Any, stack: FuzzStack, mode: GenerationMode) -> dict[str, Any]:
    """One strategy per operation: generated data, with credentials and seeded ids mixed in."""
    out: dict[str, Any] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        path = operation.path
        headers, query = _credentials(stack, path)
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


def _wsgi_text(text: str) -> str:
    """``text`` as a WSGI server hands a header over: its UTF-8 bytes read as Latin-1."""
    return text.encode().decode("latin-1")


# Origins a browser (or a forger) may send that name another host or none: every one makes a
# state-changing request a 403 that changes nothing (api.cross_site), except under /links/.
HOSTILE_ORIGINS = [
    "http://[",
    "null",
    "https://evil.example",
    "http://localhost.evil.example",
    "http://localhost:1",
    "file://localhost",
    "localhost",
    "https://" + "a" * 5000 + ".example",
    _wsgi_text("https://évil.example"),
    _wsgi_text("http://l\u043ecalhost"),  # a Cyrillic o
    "http://localhost@evil.example",
]
# Origins naming the request's own host (werkzeug's default ``Host: localhost``): not refused.
# An empty header is no header (local mode's server drops it, as no browser sends one); the
# scheme is not compared (api.cross_site compares the host and port only).
OWN_ORIGINS = ["http://localhost", "HTTP://LOCALHOST", "http://localhost ", "", "https://localhost"]
HOSTILE_SITES = [
    "cross-site",
    "same-site",
    "CROSS-SITE",
    "cross-site ",
    "garbage",
    "same-origin, cross-site",
    "x" * 2000,
    _wsgi_text("sâme-origin"),
]
OWN_SITES = ["same-origin", "Same-Origin", "none", ""]


def _hostile_hosts(port: int) -> list[str]:
    """``Host`` values that are not local mode's own names: 421 before routing."""
    return [
        "evil.example",
        f"evil.example:{port}",
        f"localhost.evil.example:{port}",
        f"127.0.0.1:{port + 1 if port < 65535 else 1}",
        "127.0.0.2",
        "0.0.0.0",
        f"[::2]:{port}",
        "[::1",
        "",
        "localhost:abc",
        f"127.0.0.1:{port}x",
        "a" * 3000,
        _wsgi_text(f"l\u043ecalhost:{port}"),  # a Cyrillic o
    ]


def _own_hosts(port: int) -> list[str]:
    return ["127.0.0.1", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}", "localhost"]


# Content types a body route refuses (415), whatever the route: a browser's "simple" types
# among them, which another site may send without asking first.
HOSTILE_TYPES: list[str | None] = [
    None,  # no Content-Type at all
    "text/plain",
    "text/plain;charset=UTF-8",
    "multipart/form-data; boundary=fuzz",
    "application/jsonx",
    "application/json-patch+json",
    "application/x-json",
    "json",
]
FORM = "application/x-www-form-urlencoded"
HEADER_KINDS = ["origin", "sec-fetch-site", "host", "content-type"]
# Hostile-header cases: case id -> (kind, the status they must get, or None: the usual checks).
EXPECTED: dict[str, tuple[str, int | None]] = {}
RAW_BODIES: dict[str, bytes] = {}  # the bodies of the Content-Type cases, serialized


@dataclass(frozen=True)
class _Route:
    """What the hostile plan needs to know of an operation."""

    method: str
    path: str
    takes_form: bool
    port: int

    @property
    def cross_site_checked(self) -> bool:
        """State-changing, and not exempt from the origin check (api.cross_site: /links/)."""
        return self.method == "POST" and not self.path.startswith("/links/")


def _raw_body(body: Any, media_type: str) -> bytes:
    if media_type == FORM:
        fields = body.items() if isinstance(body, dict) else []
        return "&".join(f"{quote_plus(str(k))}={quote_plus(str(v))}" for k, v in fields).encode()
    return json.dumps(body).encode()


def _hostile_headers(draw: st.DrawFn, case: Any, route: _Route) -> None:
    """Gives a valid case a hostile ``Origin``, ``Sec-Fetch-Site``, ``Host`` or body type."""
    has_body = case.media_type is not None and not isinstance(case.body, NotSet)
    kinds = HEADER_KINDS if has_body else HEADER_KINDS[:3]
    kind = draw(st.sampled_from(kinds))
    headers = dict(case.headers or {})
    expected: int | None = None
    if kind == "origin":
        # Without Sec-Fetch-Site, which vouches for "null" (and is what the console takes).
        headers.pop("Sec-Fetch-Site", None)
        hostile = draw(st.booleans())
        headers["Origin"] = draw(st.sampled_from(HOSTILE_ORIGINS if hostile else OWN_ORIGINS))
        if hostile and draw(st.booleans()):
            headers["Sec-Fetch-Site"] = draw(st.sampled_from(HOSTILE_SITES))
        expected = 403 if hostile and route.cross_site_checked else None
    elif kind == "sec-fetch-site":
        hostile = draw(st.booleans())
        headers["Sec-Fetch-Site"] = draw(st.sampled_from(HOSTILE_SITES if hostile else OWN_SITES))
        expected = 403 if hostile and route.cross_site_checked else None
    elif kind == "host":
        hostile = draw(st.booleans())
        names = _hostile_hosts(route.port) if hostile else _own_hosts(route.port)
        headers["Host"] = draw(st.sampled_from(names))
        expected = 421 if hostile else None
    else:
        media_type = case.media_type
        raw = _raw_body(case.body, media_type)
        hostile_types = HOSTILE_TYPES + ([] if route.takes_form else [FORM])
        own_types = [f"{media_type}; charset=utf-8", media_type.upper()]
        hostile = draw(st.booleans())
        declared = draw(st.sampled_from(hostile_types if hostile else own_types))
        # Sent as raw bytes: schemathesis would not send a form under another type, nor a body
        # without a type (with no media type it sends no body).
        case.media_type = None
        RAW_BODIES[case.id] = raw
        if declared is not None:
            headers["Content-Type"] = declared
        expected = 415 if hostile and raw else None  # an empty body has no type to check
    case.headers = headers
    EXPECTED[case.id] = (kind, expected)


@st.composite
def _hostile_case(
    draw: st.DrawFn, base: Any, seeded: dict[str, str], query_names: list[str], route: _Route
) -> Any:
    """A generated case with its ids, a query value, its body or its headers corrupted (issue 31).

    Half the cases get hostile headers only (``_hostile_headers``), so that the status they
    must get is known; the other half have their ids, a query value or their body corrupted.
    """
    case = draw(base)
    if draw(st.booleans()):
        _hostile_headers(draw, case, route)
        return case
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
        # An optional body left out (NotSet) is poisoned from nothing: it is sent then.
        body = None if isinstance(case.body, NotSet) else case.body
        if case.media_type == "application/x-www-form-urlencoded":
            case.body = _poisoned_form(body, where)
        else:
            case.body = _poisoned_json(body, draw(st.sampled_from(LONE_SURROGATES)), where)
        POISONED.add(case.id)
    return case


def _hostile_strategies(schema: Any, document: Any, stack: FuzzStack) -> dict[str, Any]:
    """One strategy per operation: a valid request (seeded ids) with hostile parts mixed in."""
    out: dict[str, Any] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        path = operation.path
        headers, query = _credentials(stack, path)
        seeded = stack.seeded(path)
        declared = document["paths"][path][operation.method.lower()]
        parameters = declared.get("parameters", [])
        query_names = [p["name"] for p in parameters if p["in"] == "query" and p["name"] != "token"]
        content = declared.get("requestBody", {}).get("content", {})
        route = _Route(operation.method.upper(), path, FORM in content, stack.port)
        base = operation.as_strategy(
            generation_mode=GenerationMode.POSITIVE,
            headers=headers,
            query=query or None,
            path_parameters=seeded or None,
        )
        out[operation.label] = _hostile_case(base, seeded, query_names, route)
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
        raw = {"data": RAW_BODIES[case.id]} if case.id in RAW_BODIES else {}
        response = case.call(app=stack.wsgi, **raw)
        sent += 1
        api_fuzz.requests[label] += 1
        api_fuzz.statuses[response.status_code] += 1
        api_fuzz.seconds[label] += time.monotonic() - began
        kind, expected = EXPECTED.get(case.id, ("", None))
        if expected is not None:
            api_fuzz.hostile_headers[f"{kind} {expected}"] += 1
            assert response.status_code == expected, (
                f"hostile {kind} must get {expected}:\n" + describe(case, response)
            )
            writes = stack.writes.calls[writes_before:]
            assert not writes, f"a refused {kind} changed state ({writes}):\n" + describe(
                case, response
            )
            if expected == 421:
                return  # local mode's server answers it before the Api: not in the document
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
    assert api_fuzz.requests["POST /runs/{run_id}/rerun"] > 0
    assert api_fuzz.requests["POST /runs/rerun"] > 0
    assert api_fuzz.requests["POST /runs/{run_id}/budget"] > 0
    assert api_fuzz.requests["GET /flow"] > 0
    for console_action in ("cancel", "terminate", "redrive", "rerun", "events"):
        assert api_fuzz.requests[f"POST /console/runs/{{run_id}}/{console_action}"] > 0
    assert api_fuzz.requests["POST /console/runs"] > 0
    assert api_fuzz.requests["GET /console/runs/{run_id}"] > 0
    # The hostile plan reached the routes that take bodies with bodies that are not Unicode.
    for route in (
        "POST /runs",
        "POST /runs/{run_id}/events/{name}",
        "POST /approvals/{approval_id}",
    ):
        assert api_fuzz.poisoned[route] > 0, route
    # ... and sent each kind of hostile header, which was refused as it must be.
    for refused in ("origin 403", "sec-fetch-site 403", "host 421", "content-type 415"):
        assert api_fuzz.hostile_headers[refused] > 0, refused


@pytest.mark.reliability_full
@pytest.mark.timeout(1800)  # ~10 min on a shared 2-core machine; pytest's default is 300 s
def test_fuzz_every_route_full(stack: FuzzStack) -> None:
    sent = _fuzz(stack, REQUESTS, derandomize=False)
    print(f"\napi fuzz: {sent:,} requests, 0 responses >= 500")
    assert sent >= max(REQUESTS, 10_000) or "API_FUZZ_REQUESTS" in os.environ
