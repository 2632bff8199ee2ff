"""The header echo: one small item in the journal's tail range that moves whenever the header does.

A warm container's load must know whether the run header changed since it last read it (a
stop request, a resume, a finish by another writer). Reading the header is a second request
(a GetItem: it sorts first, ``#RUN``, far from the journal's tail). Instead, every header write
stamps the header with a fresh random *echo token* and writes the same token into the echo
item ``J$RUN``, which sorts after every entry key (``J#…``) and before every side-effect
record (``S#…``), so the tail Query reads it with the entries at no extra request. A load that
finds the echo holding the token of the header it keeps knows the header has not changed: one
read request per warm invocation (ADR 0019, docs/adr/0019-header-echo.md).

Why it is safe, in the order the writes are made:

* A header change inside a transaction carries the echo Put in the same transaction.
* A header change on its own (one UpdateItem) writes the echo *first*: until the header lands,
  and forever if it never does (its condition fails, the process dies), the echo holds a
  token no header has, so every reader falls back to reading the header. The reverse order
  would leave a window where a changed header still has the old echo, which readers trust.
* A new run's header is written first and its echo after it, only if no echo exists: a late
  echo of the start never overwrites the echo of a later change, and a header without an echo
  (the process died in between, a run written before echoes) is read the old way.

Tokens are random, never reused, so a stale echo never matches a newer header; the worst an
out-of-place echo can do is make readers read the header (today's cost). Writers from before
echoes existed change the header without the echo: ``HEADER_ECHO_READS=off`` keeps readers
from trusting echoes until every writer writes them (docs/operations.md, upgrading).
"""

from __future__ import annotations

import secrets
from typing import Any

from durable_agents.journal.dynamodb_items import pk

HEADER_ECHO_SK = "J$RUN"
"""The echo's sort key: after every entry key (``J#…``), before every record key (``S#…``)."""
ECHO_ATTR = "echo"
"""The header attribute (and the echo item's) that holds the token."""
ECHO_TTL_S = 30 * 24 * 3600
"""How long an echo outlives its last write (the table's ``ttl``): an echo written for a run
that was gone by then (a change that lost to the run's deletion) does not stay forever. A run
whose header has not changed for that long loses its echo and is read header first again
until its next change; a finished run's retention stamps its echo like every other item."""


def new_token() -> str:
    """A fresh echo token (128 random bits: never the token of another header write)."""
    return secrets.token_hex(16)


def echo_put(
    table: str, run_id: str, token: str, written_at_ms: int, *, only_if_absent: bool = False
) -> dict[str, Any]:
    """The Put of the run's echo item holding ``token``.

    Args:
        table: The journal table.
        run_id: The run.
        token: The token the header write that goes with it stamps.
        written_at_ms: The time of that write (the change's ``updated_at_ms``): the echo
            expires ``ECHO_TTL_S`` after it.
        only_if_absent: Write only if the run has no echo yet (a new run's: never overwrite
            the echo of a change that landed first).
    """
    put: dict[str, Any] = {
        "TableName": table,
        "Item": {
            "pk": pk(run_id),
            "sk": {"S": HEADER_ECHO_SK},
            ECHO_ATTR: {"S": token},
            "ttl": {"N": str(written_at_ms // 1000 + ECHO_TTL_S)},
        },
    }
    if only_if_absent:
        put["ConditionExpression"] = "attribute_not_exists(pk)"
    return put


def token_of(item: dict[str, Any] | None) -> str | None:
    """The echo token a header or echo item holds (None: an item from before echoes)."""
    if item is None:
        return None
    value = item.get(ECHO_ATTR)
    return None if value is None else str(value["S"])
