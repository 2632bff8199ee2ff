"""Local mode's Api server stands in for API Gateway's authorizers as the template declares them.

On AWS an ``Authorizer: NONE`` method reaches the function with no IAM caller in the event
(``requestContext.identity.userArn`` null), and an ``AWS_IAM`` method only with one. Local
mode authenticates every caller as the local principal, but must not hand that identity to an
auth NONE route: a route that came to rely on it would work locally and fail (or worse, be
open) on AWS.
"""

from __future__ import annotations

from typing import Any

from durable_agents_local.functions import make_resolver, read_functions
from durable_agents_local.http_api import Route, build_event
from durable_agents_local.template import load_template
from tests.conftest import TEMPLATE


def _api_events() -> dict[tuple[str, str], Any]:
    template = load_template(TEMPLATE)
    specs = read_functions(template, TEMPLATE.parent, make_resolver(template))
    return {(a.method, a.path): a for s in specs for a in s.apis}


def _identity(route: Route) -> dict[str, Any]:
    event = build_event(
        route,
        {"approval_id": "apr-1"},
        method=route.method,
        raw_path=route.resource.replace("{approval_id}", "apr-1"),
        headers=[("X-Local-Caller-Arn", "arn:aws:iam::000000000000:user/ada")],
        body=b"",
        source_ip="127.0.0.1",
    )
    identity: dict[str, Any] = event["requestContext"]["identity"]
    return identity


def test_the_template_auth_reaches_the_local_routes() -> None:
    events = _api_events()
    public = {key for key, e in events.items() if not e.iam}
    assert public == {
        ("GET", "/people/approvals/{approval_id}"),
        ("POST", "/people/approvals/{approval_id}"),
        ("GET", "/links/approvals/{approval_id}"),
        ("POST", "/links/approvals/{approval_id}"),
    }


def test_an_auth_none_route_gets_no_iam_caller_and_an_iam_route_does() -> None:
    events = _api_events()
    handler: Any = object()
    for (method, path), api_event in events.items():
        identity = _identity(Route(method, path, handler, iam=api_event.iam))
        if api_event.iam:
            assert identity["userArn"] == "arn:aws:iam::000000000000:user/ada", path
        else:
            assert identity["userArn"] is None, path
            assert identity["caller"] is None and identity["accountId"] is None, path
            assert identity["sourceIp"] == "127.0.0.1"
