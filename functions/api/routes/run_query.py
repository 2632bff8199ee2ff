"""The query string of ``GET /runs``: filters, start-time range, children, limit, cursor.

Every parameter is checked before the journal is read, and each wrong one is a 400 that names
it. Times are ISO-8601 with a timezone (``2026-12-01T20:00:00Z``, ``…+01:00``): a time without
one would mean whatever the server's clock zone is.

>>> parse_time("2026-12-01T20:00:00Z", "since")
1796155200000
>>> parse_time("2026-12-01T21:00:00+01:00", "since")
1796155200000
>>> parse_time("2026-12-01T20:00:00", "until")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
api.routes.limits.BadRequest: until must be an ISO-8601 time with a timezone, e.g. ...
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from api.routes.limits import MAX_CURSOR_CHARS, BadRequest
from durable_agents.core.ids import check_name, check_run_id
from durable_agents.core.models import RunPage, RunStatus
from durable_agents.errors import InvalidCursorError
from durable_agents.journal.store import JournalStore

MAX_LIMIT = 100
MAX_VERSION_CHARS = 80  # also a migration's to_version
_TIME_CHARS = 40
_BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


def parse_time(value: str, name: str) -> int:
    """An ISO-8601 time with a timezone as epoch milliseconds.

    Raises:
        BadRequest: If it is not one (or has no timezone).
    """
    wrong = BadRequest(
        f"{name} must be an ISO-8601 time with a timezone, e.g. 2026-12-01T20:00:00Z"
    )
    if len(value) > _TIME_CHARS:
        raise wrong
    try:
        # Python before 3.11 does not read "Z"; spelled out it is the same instant.
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise wrong from exc
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise wrong
    ms = int(moment.timestamp() * 1000)
    if not 0 <= ms < 10**13:  # the listing key holds 13 digits
        raise wrong
    return ms


def listing_query(params: Mapping[str, str], tenant: str | None) -> dict[str, Any]:
    """The ``list_runs`` arguments of a ``GET /runs`` query string (``tenant``: the scope).

    Raises:
        BadRequest: If a parameter is malformed: an unknown status, a limit out of range, a
            time without a timezone, ``since`` not before ``until``, ``children`` not a
            boolean, a malformed ``parent`` or ``agent``, an oversized cursor.
    """
    query: dict[str, Any] = {"tenant": tenant}
    if params.get("status"):
        try:
            query["status"] = RunStatus(params["status"].upper())
        except ValueError as exc:
            allowed = ", ".join(s.value for s in RunStatus)
            raise BadRequest(f"unknown status {params['status']!r}; use one of {allowed}") from exc
    try:
        query["limit"] = int(params.get("limit", "50"))
    except ValueError as exc:
        raise BadRequest("limit must be an integer") from exc
    if not 1 <= query["limit"] <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}")
    if params.get("agent"):
        query["agent"] = check_name(params["agent"], "agent")
    if params.get("version"):
        value = params["version"]
        if len(value) > MAX_VERSION_CHARS or not value.isprintable():
            raise BadRequest(f"version must be 1-{MAX_VERSION_CHARS} printable characters")
        query["version"] = value
    for name in ("since", "until"):
        if params.get(name):
            query[f"{name}_ms"] = parse_time(params[name], name)
    if query.get("since_ms", 0) >= query.get("until_ms", 10**13):
        raise BadRequest("since must be before until")
    if params.get("children"):
        flag = _BOOLEANS.get(params["children"].lower())
        if flag is None:
            raise BadRequest("children must be true or false")
        query["include_children"] = flag
    if params.get("parent"):
        query["parent"] = check_run_id(params["parent"])  # InvalidNameError: a 400 too
    cursor = params.get("cursor") or None
    if cursor is not None and len(cursor) > MAX_CURSOR_CHARS:
        raise BadRequest("the cursor is malformed; pass back the cursor a page of runs returned")
    query["cursor"] = cursor
    return query


def list_page(store: JournalStore, query: Mapping[str, Any]) -> RunPage:
    """One page of ``list_runs`` for a checked query (``listing_query``).

    Raises:
        BadRequest: If the cursor is malformed or continues another query or tenant.
    """
    try:
        return store.list_runs(**query)
    except InvalidCursorError as exc:
        raise BadRequest(
            f"{exc}; pass back the cursor a page of runs returned, with the same filters"
        ) from exc
