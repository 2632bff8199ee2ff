"""One tenant's page of a listing that every tenant shares: approvals and tool calls in review.

Pending approvals and calls in review are indexed across tenants (one index partition each,
oldest first), so a listing reads index pages and keeps the caller's tenant's records. Another
tenant's backlog can make that slow to fill, never hide anything: a request reads at most
``MAX_LISTING_PAGES`` index pages, and its answer carries a cursor that goes on exactly where it
stopped, right after the last record it returned (or read). Following the cursors reaches every
record of the caller's tenant; a page may hold fewer than ``limit`` (even none) and still carry
a cursor, which is null only at the listing's end.

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
from api.services import get_runtime
from durable_agents.core.tenancy import ALL_TENANTS, visible
from durable_agents.errors import InvalidCursorError
from durable_agents.journal.cursors import digest, opened, seal
from durable_agents.journal.store import Page

T = TypeVar("T")

MAX_LISTING_PAGES = 10
"""Index pages a listing reads at most to fill one answer: 1,000 records."""

INDEX_PAGE = 100
"""Records per index page read (one Query, one BatchGetItem of their runs' tenants)."""

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
    fetch: Callable[[str | None, int], Page[T]],
    run_id_of: Callable[[T], str],
    limit: int,
    keep: Callable[[T], bool] = lambda _: True,
) -> Listed[T]:
    """Up to ``limit`` records of the caller's tenant's runs, from where ``cursor`` left off.

    Reads index pages of ``INDEX_PAGE`` records (``fetch(store_cursor, INDEX_PAGE)``) until
    ``limit`` are found, the index ends, or ``MAX_LISTING_PAGES`` were read; each page's run
    tenants are read in one batch (``JournalStore.run_tenants``). The answer's cursor goes on
    right after the last record returned (a page's item position) or, when the budget ran
    out, after the last page read.

    Raises:
        BadRequest: If ``cursor`` is not one this query handed out.
    """
    store_cursor = query.store_cursor(cursor)
    kept: list[T] = []
    try:
        for _ in range(MAX_LISTING_PAGES):
            page = fetch(store_cursor, INDEX_PAGE)
            mine = _visible(query.tenant, page, run_id_of, keep)
            for index, item in enumerate(page.items):
                if not mine[index]:
                    continue
                kept.append(item)
                if len(kept) == limit:
                    after = page.cursor_after(index)
                    return Listed(kept, None if after is None else query.seal(after))
            if page.cursor is None:
                return Listed(kept, None)
            store_cursor = page.cursor
    except InvalidCursorError as exc:
        raise BadRequest(f"{exc}; {_AGAIN}") from exc
    return Listed(kept, None if store_cursor is None else query.seal(store_cursor))


def _visible(
    tenant: str, page: Page[T], run_id_of: Callable[[T], str], keep: Callable[[T], bool]
) -> list[bool]:
    """Whether each record of the page belongs in the caller's answer."""
    wanted = [keep(item) for item in page.items]
    if tenant == ALL_TENANTS or not any(wanted):
        return wanted
    owners = get_runtime().store.run_tenants(
        {run_id_of(item) for item, w in zip(page.items, wanted, strict=True) if w}
    )
    return [
        w and run_id_of(item) in owners and visible(tenant, owners[run_id_of(item)])
        for item, w in zip(page.items, wanted, strict=True)
    ]
