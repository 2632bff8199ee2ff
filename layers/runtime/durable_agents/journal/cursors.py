"""A listing cursor bound to the query that handed it out: where to go on, and whose query.

A cursor is base64url JSON of ``{"after": <position>, "query": <digest of the query>}``: the
position says where the next page starts (a listing key, or a journal's own page cursor), the
digest which query (filters, tenant) it continues, so that a cursor of one query is refused by
another. ``GET /runs`` (``run_listing.RunQuery``) and the Api's shared approvals and reviews
listings (``api.routes.tenant_listing``) hand out these.

>>> cursor = seal("0000000002000#run-a", "abc")
>>> opened(cursor, "abc")
'0000000002000#run-a'
>>> opened(cursor, "other")
Traceback (most recent call last):
...
durable_agents.errors.InvalidCursorError: the cursor continues another listing
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from durable_agents.errors import InvalidCursorError


def digest(query: Any) -> str:
    """A short digest of a query (any JSON value: its filters and tenant)."""
    text = json.dumps(query, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def seal(after: str, query_digest: str) -> str:
    """The cursor that goes on at ``after``, for the query with this digest."""
    raw = json.dumps({"after": after, "query": query_digest}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def opened(cursor: str, query_digest: str) -> str:
    """The position a cursor goes on at, if it was handed out for the query with this digest.

    Raises:
        InvalidCursorError: If the cursor is malformed, or another query's.
    """
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, binascii.Error) as exc:  # UnicodeError is a ValueError
        raise InvalidCursorError(cursor, "the cursor is malformed") from exc
    if not (
        isinstance(data, dict)
        and set(data) == {"after", "query"}
        and isinstance(data["after"], str)
        and isinstance(data["query"], str)
    ):
        raise InvalidCursorError(cursor, "the cursor is malformed")
    if data["query"] != query_digest:
        raise InvalidCursorError(cursor)
    return data["after"]
