"""The check every state-changing request shares: it does not come from another site (CSRF).

A browser attaches what authenticates an operator on its own: a signing proxy in front of the
Api (docs/adr/0013-run-console.md), local mode's implicit caller, a cookie some gateway adds.
So another site must not be able to make that browser post to the Api. Two things give such a
request away, and every current browser sends at least one:

* ``Sec-Fetch-Site``: ``cross-site`` or ``same-site`` is refused; ``same-origin`` and ``none``
  (the person typed or bookmarked it) are not. A page cannot set it, so when a browser sent it,
  it decides: through the signing proxy (``durable-agents console``) the page and its post are
  both the proxy's, ``same-origin``, and the ``Origin`` forwarded with it is the proxy's, not
  the Api's host;
* ``Origin``, from a browser that sends no ``Sec-Fetch-Site`` (Safari before 16.4): it must
  name this host (the request's ``Host``); ``null`` (a sandboxed frame, or a page sent with
  ``Referrer-Policy: no-referrer``) is refused. The Api's own pages are sent with
  ``same-origin``, so such a browser posts their forms with their real ``Origin``.

A request with neither header did not come from a browser (curl, the SDKs, the CLI) and is
accepted. Routes under ``/links/`` are exempt from the origin check: their requests carry a
signed link token that another site cannot know, and an old browser posting a link's approval
page (``no-referrer``: its URL holds the token) sends ``Origin: null`` without ``Sec-Fetch-Site``.

The body's type is checked too, for every state-changing request with a body: JSON routes take
``application/json`` only (415 otherwise), and HTML forms are accepted only by the routes that
serve a form (the console's actions, the approval page's decision). Without that, another site
could post JSON as ``text/plain`` — a "simple" request a browser sends without asking first.

Reads get Fetch Metadata's resource isolation (``check_not_embedded``): another site's page
may send a person here (a top-level navigation), but what it embeds or fetches is refused, so
no load or error event tells it whether an id exists.

It is one middleware for the whole resolver (``api.app``), not a check per route, so a new
route cannot forget it.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from durable_agents.errors import DurableError

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Sec-Fetch-Site values that say the request was made by a page of this origin or by the person.
OWN_SITE = frozenset({"same-origin", "none"})
# Requests carry a signed link token another site cannot know (see the module docstring).
TOKEN_PATH_PREFIXES = ("/links/",)
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
# The routes that serve an HTML form and so take one (a route's path, as Powertools declares
# it): the console's actions and the approval page's decision (IAM, JWT or signed link).
FORM_ROUTES = re.compile(r"/console/.+|/(?:people/|links/)?approvals/\{approval_id\}")


class CrossSiteRequestError(DurableError):
    """A state-changing request came from another site, or its ``Origin`` is unreadable (403)."""


class UnsupportedMediaTypeError(DurableError):
    """A state-changing request's body is of a type its route does not take (415)."""


def _header(event: APIGatewayProxyEvent, name: str) -> str | None:
    wanted = name.lower()
    for key, value in (event.headers or {}).items():
        if key.lower() == wanted:
            return str(value)
    return None


def origin_netloc(origin: str) -> str | None:
    """The ``host[:port]`` an ``Origin`` header names, lower-cased; None if it names none.

    ``urlsplit`` raises ``ValueError`` on some malformed values (``http://[``); such an Origin
    names no host, so it matches none.

    >>> origin_netloc("https://Console.Example:8443"), origin_netloc("http://[")
    ('console.example:8443', None)
    >>> origin_netloc("null") is None
    True
    """
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return parts.netloc.lower()


def origin_names_host(origin: str, host: str | None) -> bool:
    """Whether ``origin`` names the host the request was sent to (its ``Host`` header)."""
    netloc = origin_netloc(origin)
    return netloc is not None and host is not None and netloc == host.strip().lower()


def check_not_cross_site(event: APIGatewayProxyEvent) -> None:
    """Refuses a request another site made a browser send.

    Raises:
        CrossSiteRequestError: If ``Sec-Fetch-Site`` says another site, or, without it,
            ``Origin`` is present and names another host or none (``null``, unreadable).
    """
    site = _header(event, "Sec-Fetch-Site")
    if site is not None:
        if site.strip().lower() in OWN_SITE:
            return  # the browser's own word, which no page can forge
        raise CrossSiteRequestError(
            f"requests that change state are not accepted from other sites (Sec-Fetch-Site: "
            f"{site[:40]!r}); send it from this origin, or without a browser"
        )
    origin = _header(event, "Origin")
    if origin is None:
        return
    if not origin_names_host(origin, _header(event, "Host")):
        raise CrossSiteRequestError(
            f"requests that change state are not accepted from other sites (Origin "
            f"{origin[:100]!r} does not name this host); send it from this origin, or without "
            "a browser"
        )


def check_not_embedded(event: APIGatewayProxyEvent) -> None:
    """Refuses a read another site's page embeds or fetches (Fetch Metadata isolation).

    Another site may send a person here (a top-level navigation: a link in an email, a
    bookmark), but an ``<img>``, ``<script>``, frame or no-cors ``fetch`` of its page would
    learn, through a load or error event, whether an id exists. Such a request is refused
    before routing, alike for every path: ``Sec-Fetch-Site`` of ``cross-site`` or
    ``same-site`` with anything but ``Sec-Fetch-Mode: navigate`` and ``Sec-Fetch-Dest:
    document``. Without ``Sec-Fetch-Site`` (no browser, or one too old to send it) the read
    is answered.

    Raises:
        CrossSiteRequestError: If another site's page embeds or fetches the request.
    """
    site = (_header(event, "Sec-Fetch-Site") or "").strip().lower()
    if site in ("", *OWN_SITE):
        return
    mode = (_header(event, "Sec-Fetch-Mode") or "").strip().lower()
    dest = (_header(event, "Sec-Fetch-Dest") or "").strip().lower()
    if mode == "navigate" and dest == "document":
        return
    raise CrossSiteRequestError(
        f"the Api answers other sites' pages only when a person opens it (Sec-Fetch-Site: "
        f"{site[:40]!r}, Sec-Fetch-Mode: {mode[:40]!r}, Sec-Fetch-Dest: {dest[:40]!r}); "
        "open it from this origin, or without a browser"
    )


def check_body_type(event: APIGatewayProxyEvent, route_path: str) -> None:
    """Refuses a body that is neither JSON nor, on a route that serves a form, a form.

    Raises:
        UnsupportedMediaTypeError: If the request has a body and its ``Content-Type`` is not
            ``application/json`` (or ``application/x-www-form-urlencoded`` on a form route).
    """
    if not event.body:
        return  # nothing to parse: POST /runs/{id}/cancel and the like need no body
    declared = _header(event, "Content-Type") or ""
    media_type = declared.split(";")[0].strip().lower()
    takes_form = FORM_ROUTES.fullmatch(route_path) is not None
    if media_type == JSON or (media_type == FORM and takes_form):
        return
    accepted = f"{JSON} or {FORM}" if takes_form else JSON
    raise UnsupportedMediaTypeError(
        f"the body must be sent as Content-Type: {accepted}, not {declared[:80]!r}"
        if declared
        else f"the body needs a Content-Type: {accepted}"
    )


def refuse_cross_site(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Any:
    """Powertools middleware: refuses what another site's page makes a browser send.

    Cross-site and wrongly typed state-changing requests, and reads another site's page
    embeds or fetches (``check_not_embedded``). Runs before any route reads anything, so a
    refused request changes nothing and learns nothing.

    Raises:
        CrossSiteRequestError: See ``check_not_cross_site`` and ``check_not_embedded``
            (the exception handler answers 403).
        UnsupportedMediaTypeError: See ``check_body_type`` (answered 415).
    """
    event = app.current_event
    if event.http_method.upper() in STATE_CHANGING:
        route = app.context.get("_route")
        path = str(getattr(route, "openapi_path", "") or event.path)
        if not path.startswith(TOKEN_PATH_PREFIXES):
            check_not_cross_site(event)
        check_body_type(event, path)
    else:
        check_not_embedded(event)
    response: Response[Any] = next_middleware(app)
    return response
