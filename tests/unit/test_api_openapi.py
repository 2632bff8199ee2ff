"""The Api's OpenAPI document, and every route it lists refusing a request without credentials.

The route list comes from the document (``docs/openapi.json``, held current by a test here),
the document's routes are the template's and the resolver's, so a route added to any of the
three and forgotten in another fails here — and so does a route that serves a caller without
credentials.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from durable_agents.errors import InfrastructureError
from durable_agents_local.template import load_template
from tests.conftest import ROOT, TEMPLATE
from tests.unit.conftest import Deployment
from tests.unit.test_api_approvals import api, request  # noqa: F401 - the fixture is used

DOCUMENT_PATH = ROOT / "docs" / "openapi.json"
DOCUMENT: dict[str, Any] = json.loads(DOCUMENT_PATH.read_text())
OPERATIONS = sorted(
    (method.upper(), path, next(iter(op["security"][0])))
    for path, methods in DOCUMENT["paths"].items()
    for method, op in methods.items()
)
VALID_BODY: dict[str, Any] = {"agent": "example-research", "decision": "approve"}


def _template_routes() -> dict[tuple[str, str], dict[str, Any]]:
    api_function = load_template(TEMPLATE)["Resources"]["ApiFunction"]["Properties"]
    return {
        (e["Properties"]["Method"].upper(), e["Properties"]["Path"]): e["Properties"]
        for e in api_function["Events"].values()
        if e["Type"] == "Api"
    }


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", path)


def test_the_docs_copy_is_the_served_document() -> None:
    """``docs/openapi.json`` is stale when this fails: run ``make openapi``."""
    from api.app import app
    from api.openapi import document_json

    assert DOCUMENT_PATH.read_text() == document_json(app), "run `make openapi`"


def test_the_documents_routes_are_the_templates_and_the_resolvers() -> None:
    from api.app import app

    documented = {(m, p) for m, p, _ in OPERATIONS}
    assert documented == set(_template_routes())
    served = {(r.method.upper(), r.openapi_path) for r in app._static_routes + app._dynamic_routes}
    assert documented == served


def test_a_route_without_an_entry_is_refused_by_the_generator() -> None:
    from api.app import ThreadSafeRestResolver
    from api.openapi import UndocumentedRouteError, build_document

    fresh = ThreadSafeRestResolver()

    @fresh.get("/ping")
    def ping() -> dict[str, str]:
        return {}

    with pytest.raises(UndocumentedRouteError) as raised:
        build_document(fresh)
    assert raised.value.missing == {("GET", "/ping")}
    assert ("POST", "/runs") in raised.value.stale


def test_the_document_describes_bodies_errors_and_security() -> None:
    from api.routes.runs import StartRunRequest

    schemes = DOCUMENT["components"]["securitySchemes"]
    assert schemes["sigv4"]["x-amazon-apigateway-authtype"] == "awsSigv4"
    assert schemes["jwt"] == {**schemes["jwt"], "type": "http", "scheme": "bearer"}
    assert schemes["link"]["in"] == "query"
    start = DOCUMENT["paths"]["/runs"]["post"]
    body = start["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/StartRunRequest"}
    schema = DOCUMENT["components"]["schemas"]["StartRunRequest"]
    assert schema["required"] == ["agent"] and schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(StartRunRequest.model_fields)
    # 201 started, 200 the run a repeated idempotency key started before (the fuzzer found 200
    # undocumented).
    assert set(start["responses"]) >= {"200", "201", "400", "401", "403", "404", "409", "422"}
    error = start["responses"]["422"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/ErrorResponse"}
    decide = DOCUMENT["paths"]["/links/approvals/{approval_id}"]["post"]
    assert decide["security"] == [{"link": []}]
    assert set(decide["requestBody"]["content"]) == {
        "application/json",
        "application/x-www-form-urlencoded",
    }
    for _, path, security in OPERATIONS:
        assert security in schemes
        assert (security == "jwt") == path.startswith("/people/")
        assert (security == "link") == path.startswith("/links/")


@pytest.mark.parametrize(("method", "path", "security"), OPERATIONS)
def test_every_route_refuses_a_request_without_credentials(
    api: Deployment,  # noqa: F811 - the fixture imported above
    method: str,
    path: str,
    security: str,
) -> None:
    declared = _template_routes()[(method, path)]
    if security == "sigv4":
        # API Gateway refuses it (AWS_IAM, the default: no per-route Auth can switch it off)...
        defaults = load_template(TEMPLATE)["Resources"]["DurableApi"]["Properties"]["Auth"]
        assert defaults["DefaultAuthorizer"] == "AWS_IAM" and "Auth" not in declared
    else:
        # ...or the function authenticates the JWT or the link itself.
        assert declared["Auth"] == {"Authorizer": "NONE"}
    # And the function refuses the request too: no IAM caller, no Authorization, no token.
    body = VALID_BODY if method == "POST" else None
    reply = request(
        method, _concrete(path), body, headers={"Accept": "application/json"}, user_arn=None
    )
    assert reply.status in (401, 403), (reply.status, reply.text)
    assert json.loads(reply.text)["error"]["type"] == "AuthenticationError"


def test_the_document_is_served_to_iam_callers(api: Deployment) -> None:  # noqa: F811
    reply = request("GET", "/openapi.json")
    assert reply.status == 200
    assert reply.json == DOCUMENT


def test_an_infrastructure_failure_answers_the_documented_error_shape(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.services import get_runtime

    def unavailable(*_: Any, **__: Any) -> Any:
        raise InfrastructureError("GetItem", "ProvisionedThroughputExceededException")

    monkeypatch.setattr(get_runtime().store, "get_run", unavailable)
    reply = request("GET", "/runs/run-1")
    assert reply.status == 503 and reply.headers["Retry-After"] == "1"
    error = reply.json["error"]
    assert error["type"] == "ServiceUnavailable"
    assert "retry" in error["message"]
