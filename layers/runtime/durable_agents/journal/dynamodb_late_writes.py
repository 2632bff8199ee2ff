"""Writes for a finished run carry its expiry, on DynamoDB (ADR 0012, amendment).

The reconciler stamps a finished run's items in two passes, the second an hour after the finish
(``durable_agents.journal.retention``). Whatever is written for the run after that would be kept for
ever: an entry is written without ``ttl``, and a wait or side-effect record rewritten by its
whole-item Put loses the ``ttl`` it had. So the journal's write path carries the expiry itself:

* a write for a run this store knows to be finished puts every item with the run's ``ttl``
  (the header's, which never changes once set) and lists the run for one more stamping pass
  (``late_stamp_due``; that pass tags the payloads the write spilled to S3, which only the
  reconciler may tag);
* a write that rewrites an existing wait or side-effect record without a header change (a
  decision, a heartbeat, a review, the reconciler's expiry or parking: the writers that come
  at any time, from any process) first reads the header's ``ttl`` (one small consistent
  GetItem), unless this store read the run very recently (``RunExpiries``). A record of a run
  whose header is already gone (TTL deletes a run's items in no particular order) is never
  rewritten: ``RunNotFoundError``;
* any other write (the run's own entries, a record it creates) needs no read: it comes from an
  invocation that read the run moments before, and if the run finished in between, the write
  lands before the second stamping pass, which stamps it.

A write with a header change never needs any of this: it is conditioned on a status a
finished run can never have again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from durable_agents.core.faults import GuardedClient, error_code
from durable_agents.core.models import EffectChange, Entry, RunChange, RunHeader, WaitChange
from durable_agents.errors import RunNotFoundError
from durable_agents.journal.dynamodb_items import HEADER_SK, pk
from durable_agents.journal.index_keys import EXPIRING_PK, ts
from durable_agents.journal.index_shards import IndexShards
from durable_agents.journal.retention import (
    UNFINISHED_TRUSTED_S,
    late_stamp_due,
    written_at_ms,
)

MAX_RUNS_KEPT = 10_000
"""Runs a store remembers the expiry (or the unfinished state) of; then it starts over."""


class RunExpiries:
    """What this store read of runs: the expiry of finished ones, when others were unfinished.

    A finished run's expiry is kept as read: final statuses are terminal, so it never changes.
    A run read unfinished may finish at any moment after; that read is trusted for
    ``UNFINISHED_TRUSTED_S`` only (measured on ``monotonic``): a write made that soon after it
    lands before the run's second stamping pass even if the run finished in between.

    Args:
        monotonic: The clock the trust is measured on (seconds; ``time.monotonic``).
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic):
        self._monotonic = monotonic
        self._expiry_s: dict[str, int] = {}
        self._unfinished_at: dict[str, float] = {}
        self._lock = threading.Lock()

    def seen(self, header: RunHeader) -> None:
        """Notes a header read consistently just now."""
        if header.expires_at_ms is None:
            self.unfinished(header.run_id)
        else:
            self.finished(header.run_id, header.expires_at_ms // 1000)

    def finished(self, run_id: str, ttl_s: int) -> None:
        """Notes that the run has finished and expires at ``ttl_s`` (epoch seconds)."""
        with self._lock:
            if len(self._expiry_s) >= MAX_RUNS_KEPT:
                self._expiry_s.clear()
            self._expiry_s[run_id] = ttl_s
            self._unfinished_at.pop(run_id, None)

    def unfinished(self, run_id: str) -> None:
        """Notes that the run was unfinished just now (read so, or changed to a live status).

        A run read unfinished whose expiry was kept is a new run with the same id (the old one
        expired, its header deleted): the kept expiry is the old run's and is dropped.
        """
        with self._lock:
            if len(self._unfinished_at) >= MAX_RUNS_KEPT:
                self._unfinished_at.clear()
            self._unfinished_at[run_id] = self._monotonic()
            self._expiry_s.pop(run_id, None)

    def forget(self, run_id: str) -> None:
        """The run may have just finished (this store finished it): nothing is known now."""
        with self._lock:
            self._unfinished_at.pop(run_id, None)

    def expiry_s(self, run_id: str, at_ms: int | None) -> int | None:
        """The run's ``ttl`` if it is known to have finished and not expired at ``at_ms``.

        An expiry already past when the write is made (by its writer's clock) belongs to a run
        that is gone: its id may name a new run now, whose items must not get that ``ttl``.
        """
        # One dict read (atomic): every commit asks, so it takes no lock.
        ttl_s = self._expiry_s.get(run_id)
        if ttl_s is not None and at_ms is not None and ttl_s * 1000 <= at_ms:
            return None
        return ttl_s

    def recently_unfinished(self, run_id: str) -> bool:
        """Whether the run was read unfinished recently enough to write without a read."""
        with self._lock:
            at = self._unfinished_at.get(run_id)
        return at is not None and self._monotonic() - at < UNFINISHED_TRUSTED_S


class LateWrites:
    """Gives a write for a finished run that run's expiry (see the module docstring).

    Args:
        client: The journal's guarded DynamoDB client.
        table: The journal table.
        expiries: What this process read of runs' expiries (this notes what it reads too).
        shards: The index shards (a relisted run goes to its shard of ``EXPIRING``).
    """

    def __init__(
        self, client: GuardedClient, table: str, expiries: RunExpiries, shards: IndexShards
    ):
        self._shards = shards
        self._client = client
        self._table = table
        self._expiries = expiries

    def prepare(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None,
        effect: EffectChange | None,
        waits: tuple[WaitChange, ...],
    ) -> int | None:
        """The ``ttl`` every item of this write must carry (None: the run is not finished).

        A finished run is first listed for one more stamping pass.

        Raises:
            RunNotFoundError: If the write rewrites a record of a run whose header is gone.
        """
        written_ms = written_at_ms(entries, effect, waits)
        ttl_s = self._ttl(run_id, change, effect, waits, written_ms)
        if ttl_s is not None:
            due = late_stamp_due(None, written_ms)
            if due is not None:
                self._relist(run_id, due)
        return ttl_s

    def _ttl(
        self,
        run_id: str,
        change: RunChange | None,
        effect: EffectChange | None,
        waits: tuple[WaitChange, ...],
        written_ms: int | None,
    ) -> int | None:
        """The run's ``ttl`` if this write is for a finished run.

        Raises:
            RunNotFoundError: If the write rewrites a record of a run whose header is gone.
        """
        if change is not None:
            return None  # conditioned on a live status: it never lands on a finished run
        known = self._expiries.expiry_s(run_id, written_ms)
        if known is not None:
            return known
        rewrites = (effect is not None and effect.expected_status is not None) or any(
            wait.expected is not None for wait in waits
        )
        if not rewrites or self._expiries.recently_unfinished(run_id):
            return None
        item = self._client.get_item(**header_ttl_request(self._table, run_id)).get("Item")
        if not item:
            # Expired (TTL deletes a run's items in no set order): a record rewritten now
            # would lose the ``ttl`` it has and be kept for ever.
            raise RunNotFoundError(run_id)
        if "ttl" not in item:
            self._expiries.unfinished(run_id)
            return None
        ttl_s = int(item["ttl"]["N"])
        self._expiries.finished(run_id, ttl_s)
        return ttl_s

    def _relist(self, run_id: str, due_ms: int) -> None:
        """Lists a finished run for one more stamping pass (before the write it is for).

        Before, so that a write never lands without its pass coming; a pass for a write that
        then fails finds nothing new, at no harm.
        """
        try:
            self._client.update_item(**relist_request(self._table, run_id, due_ms, self._shards))
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            # A pass is due later already (it covers this write), or the header expired.


def relist_request(table: str, run_id: str, due_ms: int, shards: IndexShards) -> dict[str, Any]:
    """Lists a finished run for one more stamping pass at ``due_ms`` (``late_stamp_due``).

    Conditional on the header still being there with its expiry, and on no pass being due
    later already (that one covers this write too). Moving the due time also makes a pass in
    progress leave the listing alone (its own move is conditioned on the due time it read).
    """
    return {
        "TableName": table,
        "Key": {"pk": pk(run_id), "sk": {"S": HEADER_SK}},
        # In gsi1's EXPIRING listing (ADR 0029); a header still listed in gsi2 leaves it.
        "UpdateExpression": "SET #due = :due, #p = :p, #s = :s REMOVE #p2, #s2",
        "ConditionExpression": (
            "attribute_exists(#ttl) AND (attribute_not_exists(#due) OR #due < :due)"
        ),
        "ExpressionAttributeNames": {
            "#due": "stamp_due_at_ms",
            "#p": "gsi1pk",
            "#s": "gsi1sk",
            "#p2": "gsi2pk",
            "#s2": "gsi2sk",
            "#ttl": "ttl",
        },
        "ExpressionAttributeValues": {
            ":due": {"N": str(due_ms)},
            ":p": {"S": shards.key(EXPIRING_PK, run_id)},
            ":s": {"S": f"{ts(due_ms)}#{run_id}"},
        },
    }


def header_ttl_request(table: str, run_id: str) -> dict[str, Any]:
    """A consistent read of the header's ``ttl`` alone (``pk`` says the header exists)."""
    return {
        "TableName": table,
        "Key": {"pk": pk(run_id), "sk": {"S": HEADER_SK}},
        "ConsistentRead": True,
        "ProjectionExpression": "pk, #ttl",
        "ExpressionAttributeNames": {"#ttl": "ttl"},
    }
