"""The check every IAM route shares: the request carries the caller API Gateway authenticated.

API Gateway refuses an unsigned request to an ``AWS_IAM`` method before the function runs, but
the function does not rely on that alone: a route whose ``Auth`` block is dropped from the
template, a new route declared with ``Authorizer: NONE`` by mistake, or a direct invocation of
the function would otherwise serve runs and reviews to anyone. So every route outside
``PUBLIC_PATH_PREFIXES`` (the four methods the template declares ``Authorizer: NONE``, which
verify a JWT or a signed link themselves) is refused with 401 unless the event names an IAM
caller. It is one middleware for the whole resolver, not a check per route, so a new route
cannot forget it (``tests/unit/test_api_openapi.py`` holds the template to the same list).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware

from durable_agents.auth.deciders import principal_from_iam

# their routes authenticate the JWT (/people) or the signed link (/links) themselves.
PUBLIC_PATH_PREFIXES = ("/people/", "/links/")


def is_public(path: str) -> bool:
    """Whether ``path`` (a route's path, e.g. ``/links/approvals/{approval_id}``) is auth NONE.

    >>> is_public("/links/approvals/{approval_id}"), is_public("/runs/{run_id}")
    (True, False)
    """
    return path.startswith(PUBLIC_PATH_PREFIXES)


def require_iam_identity(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Any:
    """Powertools middleware: refuses a request to an IAM route that names no IAM caller.

    Raises:
        AuthenticationError: If the route is not public and the event carries no caller ARN
            (the resolver's exception handler answers 401).
    """
    route = app.context.get("_route")
    path = str(getattr(route, "openapi_path", "") or app.current_event.path)
    if not is_public(path):
        principal_from_iam(app.current_event.raw_event)
    response: Response[Any] = next_middleware(app)
    return response
