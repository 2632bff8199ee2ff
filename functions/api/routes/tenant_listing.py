"""One tenant's page of a listing every tenant has: approvals and tool calls in review.

Each tenant's pending approvals and calls in review are indexed in the tenant's own listing
(``JournalStore.waits_page(tenant=...)``, ``reviews_page(tenant=...)``; on DynamoDB its own
index partitions, ADR 0029), so a request reads one page of the caller's own records: another
tenant's backlog can neither hide a record nor make a page short. The operators' tenant (``*``)
reads every tenant's listing. A filter of the caller's own (an approval's decision) may leave a
page short, even empty, and still carry a cursor, which is null only at the listing's end.

A cursor is bound to its listing, its filters and the caller's tenant: any other is a 400.

>>> query = ListingQuery("approvals", "acme", {"status": "pending"})
>>> query.store_cursor(query.seal("b64-of-a-key"))
'b64-of-a-key'
>>> other = ListingQuery("approvals", "other", {"status": "pending"})
>>> other.store_cursor(query.seal("k"))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
api.routes.limits.BadRequest: the cursor continues another listing; pass back the cursor ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from api.routes.limits import MAX_CURSOR_CHARS, BadRequest
from durable_agents.core.tenancy import ALL_TENANTS, visible
from durable_agents.errors import InvalidCursorError
from durable_agents.journal.cursors import digest, opened, seal
from durable_agents.journal.store import Page

T = TypeVar("T")

MAX_LIMIT = 100
"""The largest page a caller may ask for (and the default)."""

_AGAIN = "pass back the cursor a page of this listing returned, with the same filters"


@dataclass(frozen=True)
class ListingQuery:
    """What one listing asks for: its name, the caller's tenant and its filters.

    Attributes:
        listing: The listing (``approvals``, ``reviews``).
        tenant: The caller's tenant (``*`` for the operators' tenant).
        filters: The query's filters, as sent (``limit`` is not one: a page size).
    """

    listing: str
    tenant: str
    filters: Mapping[str, str] = field(default_factory=dict)

    def _digest(self) -> str:
        return digest([self.listing, self.tenant, dict(self.filters)])

    def seal(self, store_cursor: str) -> str:
        """The cursor a caller gets: the journal's, bound to this query (``journal.cursors``)."""
        return seal(store_cursor, self._digest())

    def store_cursor(self, cursor: str | None) -> str | None:
        """The journal's cursor inside a caller's cursor (None: from the start).

        Raises:
            BadRequest: If the cursor is malformed, oversized, or another query's or tenant's.
        """
        if cursor is None:
            return None
        if len(cursor) > MAX_CURSOR_CHARS:
            raise BadRequest(f"the cursor is malformed; {_AGAIN}")
        try:
            return opened(cursor, self._digest())
        except InvalidCursorError as exc:
            raise BadRequest(f"{exc}; {_AGAIN}") from exc


def page_limit(params: Mapping[str, str]) -> int:
    """The ``limit`` query parameter: 1 to ``MAX_LIMIT``, ``MAX_LIMIT`` when absent.

    Raises:
        BadRequest: If it is not an integer in that range.
    """
    text = params.get("limit") or str(MAX_LIMIT)
    # Short before int(): it refuses more than 4,300 digits with a ValueError of its own.
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_LIMIT))):
        raise BadRequest(f"limit must be an integer between 1 and {MAX_LIMIT}")
    limit = int(text)
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}")
    return limit


@dataclass(frozen=True)
class Listed(Generic[T]):
    """One answer of a listing.

    Attributes:
        items: The caller's tenant's records, in index order (at most the limit asked for).
        cursor: Where the next answer goes on (None only at the listing's end).
    """

    items: list[T]
    cursor: str | None


def collect(
    query: ListingQuery,
    cursor: str | None,
    fetch: Callable[[str | None, int, str | None], Page[T]],
    tenant_of: Callable[[T], str | None],
    limit: int,
    keep: Callable[[T], bool] = lambda _: True,
) -> Listed[T]:
    """Up to ``limit`` records of the caller's tenant, from where ``cursor`` left off.

    Reads one page of the tenant's own listing (``fetch(store_cursor, limit, tenant)``, the
    tenant None for the operators' tenant, who see every tenant's) and keeps what ``keep``
    keeps. The answer's cursor goes on after that page.

    Raises:
        BadRequest: If ``cursor`` is not one this query handed out.
    """
    store_cursor = query.store_cursor(cursor)
    tenant = None if query.tenant == ALL_TENANTS else query.tenant
    try:
        page = fetch(store_cursor, limit, tenant)
    except InvalidCursorError as exc:
        raise BadRequest(f"{exc}; {_AGAIN}") from exc
    # The tenant's own listing holds only its records; checked again all the same, since a
    # record of another tenant shown here would be a leak.
    kept = [item for item in page.items if keep(item) and _visible(query.tenant, tenant_of(item))]
    return Listed(kept, None if page.cursor is None else query.seal(page.cursor))


def _visible(caller: str, owner: str | None) -> bool:
    # A record whose tenant is unknown (from before it was kept) is the operators' alone.
    return caller == ALL_TENANTS if owner is None else visible(caller, owner)
