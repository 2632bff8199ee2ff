"""Finding runs: the query both journals answer, its order and its cursor (ADR 0012).

Runs are listed **newest start first**: by ``(created_at_ms, run_id)``, which never changes, so
a run keeps its place in the listing while its status moves on and paging cannot skip or
repeat it. The cursor (``journal.cursors``) is the listing key of the last run a page
returned (``<created_at_ms 13 digits>#<run_id>``) plus a digest of the query: a cursor of one
query (filters, tenant) is refused by another, and both journals hand out and accept the same
cursor.

>>> query = RunQuery(tenant="acme", since_ms=1_000)
>>> cursor = query.cursor_after(started_key(2_000, "run-a"))
>>> query.boundary(cursor)
'0000000002000#run-a'
>>> RunQuery(tenant="other").boundary(cursor)
Traceback (most recent call last):
...
durable_agents.errors.InvalidCursorError: the cursor continues another listing
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from durable_agents.core.models import RunHeader, RunStatus
from durable_agents.errors import InvalidCursorError
from durable_agents.journal.cursors import digest, opened, seal

KEY_CEILING = "9999999999999~"
KEY_FLOOR = "0"


def started_key(created_at_ms: int, run_id: str) -> str:
    """A run's listing key: newest first is descending order of this string."""
    return f"{created_at_ms:013d}#{run_id}"


@dataclass(frozen=True, slots=True)
class RunQuery:
    """What a run listing asks for (every field optional; all that are given must match).

    Attributes:
        status: Only runs in this status now.
        agent: Only runs of this agent.
        version: Only runs pinned to this workflow version.
        since_ms: Only runs started at or after this time.
        until_ms: Only runs started before this time.
        include_children: Sub-agent runs too (hidden by default: they carry a parent).
        parent: Only the sub-agent runs of this run (implies ``include_children``).
        tenant: Only this tenant's runs (every tenant's when None: trusted callers).
    """

    status: RunStatus | None = None
    agent: str | None = None
    version: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    include_children: bool = False
    parent: str | None = None
    tenant: str | None = None

    @property
    def children(self) -> bool:
        """Whether sub-agent runs are read."""
        return self.include_children or self.parent is not None

    @property
    def top_level(self) -> bool:
        """Whether runs without a parent are read."""
        return self.parent is None

    def matches(self, header: RunHeader) -> bool:
        """Whether ``header`` belongs in this listing (its start time included)."""
        return (
            (self.status is None or header.status is self.status)
            and (self.agent is None or header.agent == self.agent)
            and (self.version is None or header.versions.get("workflow_version") == self.version)
            and (self.since_ms is None or header.created_at_ms >= self.since_ms)
            and (self.until_ms is None or header.created_at_ms < self.until_ms)
            and (self.tenant is None or header.tenant == self.tenant)
            and (self.parent is None or header.parent_run_id == self.parent)
            and (header.parent_run_id is None or self.children)
        )

    def key_range(self, boundary: str | None) -> tuple[str, str]:
        """The inclusive listing-key range left to read, up to ``boundary``.

        ``boundary`` itself (the last run already returned) is dropped by the caller.
        """
        low = KEY_FLOOR if self.since_ms is None else f"{self.since_ms:013d}"
        # "<until>" sorts below every key of a run started at ``until`` ("<until>#…").
        high = KEY_CEILING if self.until_ms is None else f"{self.until_ms:013d}"
        if boundary is not None and boundary < high:
            high = boundary
        return low, high

    def _digest(self) -> str:
        fields = asdict(self)
        fields["status"] = None if self.status is None else self.status.value
        return digest(fields)

    def cursor_after(self, key: str) -> str:
        """The cursor of a page whose last run has listing key ``key``."""
        return seal(key, self._digest())

    def boundary(self, cursor: str | None) -> str | None:
        """The listing key a cursor continues after (None: from the newest run).

        Raises:
            InvalidCursorError: If the cursor is malformed or belongs to another query.
        """
        if cursor is None:
            return None
        after = opened(cursor, self._digest())
        if not KEY_FLOOR <= after <= KEY_CEILING:
            raise InvalidCursorError(cursor, "the cursor is malformed")
        return after
