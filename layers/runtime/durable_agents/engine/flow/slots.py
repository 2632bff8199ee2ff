"""Concurrency slots and the queue of runs waiting for one (ADR 0030).

Per agent with a ``Concurrency`` limit, three partitions of flow items
(``journal.flow_items``):

* ``slots#<agent>``: ``count`` (counters ``n``: slots held, ``queued``: runs waiting),
  ``k#<key>`` (the same per key), and one holder item ``h#<run>`` per run holding a slot
  (``key``, ``lease_until_ms``, ``granted_at_ms``). A holder and both counters change in one
  transaction, so the counts are exact and a slot is never held twice or lost.
* ``queue#<agent>#<key>``: the key's waiting runs, ``<priority>#<queued at>#<run>``: in
  order of priority, then arrival.
* ``keys#<agent>``: the round-robin of keys with waiting runs, one ordered item per key and
  priority, ``o#<priority>#<last served>#<key>``, and a marker ``m#<priority>#<key>`` that
  points at it. The next grant goes to the first ordered item: the highest priority waiting,
  and among those the key served longest ago; a grant moves its key to the back.

Every decision is taken on consistent reads and written with conditions on what was read:
a grant deletes the queue entry it read (at its version), takes the slot under the
counters' ceilings and creates the holder only if the run holds none, in one transaction.
Two grants for one queue entry cannot both land; a grant whose run already holds a slot only
drops the entry.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from durable_agents.flow_control import Concurrency
from durable_agents.journal.flow_items import (
    Check,
    Delete,
    FlowConflictError,
    FlowItem,
    FlowItems,
    FlowWrite,
    Increment,
    Put,
)

__all__ = ["Grant", "Slots", "queue_item_key"]

_ATTEMPTS = 8  # conditional writes lost to concurrent ones before giving up for this round
_PAGE = 25


def _ts(ms: int) -> str:
    return f"{max(ms, 0):015d}"


def slots_partition(agent: str) -> str:
    """Where an agent's slot counters and holders are."""
    return f"slots#{agent}"


def keys_partition(agent: str) -> str:
    """Where an agent's round-robin of keys with waiting runs is."""
    return f"keys#{agent}"


def queue_partition(agent: str, key: str) -> str:
    """Where one key's waiting runs are."""
    return f"queue#{agent}#{key}"


def queue_item_key(priority: int, queued_at_ms: int, run_id: str) -> str:
    """A waiting run's key in its queue: priority, then arrival, then run id."""
    return f"{priority}#{_ts(queued_at_ms)}#{run_id}"


@dataclass(frozen=True, slots=True)
class Grant:
    """A slot given to a waiting run (its holder and counts are written)."""

    run_id: str
    key: str
    priority: int
    queued_at_ms: int


class Slots:
    """An agent's slots and queue over flow items (the rules once, for every backend)."""

    def __init__(self, items: FlowItems):
        self.items = items

    # -- holders ---------------------------------------------------------------------------

    def holder(self, agent: str, run_id: str) -> FlowItem | None:
        """The run's slot, if it holds one (a consistent read)."""
        return self.items.get(slots_partition(agent), f"h#{run_id}")

    def holders(self, agent: str, *, after: str | None = None, limit: int = 100) -> list[FlowItem]:
        """One page of the agent's holders, by run id."""
        return self.items.query(slots_partition(agent), prefix="h#", after=after, limit=limit)

    def _take(
        self,
        agent: str,
        limits: Concurrency,
        run_id: str,
        key: str,
        data: dict[str, Any],
        *,
        dequeued: bool = False,
    ) -> list[FlowWrite]:
        """The writes that take a slot: both counts under their ceilings, then the holder."""
        part = slots_partition(agent)
        amounts = {"n": 1, "queued": -1} if dequeued else {"n": 1}
        global_ceiling = {} if limits.limit is None else {"n": limits.limit}
        key_ceiling = {} if limits.per_key is None else {"n": limits.per_key}
        return [
            Increment(part, "count", amounts, ceilings=global_ceiling),
            Increment(part, f"k#{key}", amounts, ceilings=key_ceiling),
            Put(part, f"h#{run_id}", data),
        ]

    def try_acquire(
        self, agent: str, limits: Concurrency, run_id: str, key: str, now_ms: int
    ) -> bool:
        """Takes a slot for ``run_id`` if one is free (overall and for its key).

        Returns:
            Whether the run holds a slot now (also when it already held one).
        """
        data = _holder_data(key, now_ms, limits)
        try:
            self.items.transact(self._take(agent, limits, run_id, key, data))
        except FlowConflictError as exc:
            return exc.index == 2  # its holder exists: it holds a slot already
        return True

    def renew(self, agent: str, holder: FlowItem, now_ms: int, limits: Concurrency) -> bool:
        """Extends a holder's lease from now, if it is still as read.

        Returns:
            False if the holder changed or is gone (released or reclaimed meanwhile).
        """
        data = dict(holder.data)
        data["lease_until_ms"] = now_ms + int(limits.lease_seconds * 1000)
        try:
            self.items.transact(
                [Put(holder.partition, holder.key, data, expected_version=holder.version)]
            )
        except FlowConflictError:
            return False
        return True

    def release(self, agent: str, run_id: str, *, only: FlowItem | None = None) -> bool:
        """Frees the run's slot, if it holds one.

        Args:
            agent: The agent.
            run_id: The run.
            only: Free it only if the holder is still this one (as a sweep read it).

        Returns:
            Whether this call freed a slot.
        """
        part = slots_partition(agent)
        for _ in range(_ATTEMPTS):
            holder = self.items.get(part, f"h#{run_id}")
            if holder is None:
                return False
            if only is not None and holder.version != only.version:
                return False
            key = str(holder.data.get("key", ""))
            try:
                self.items.transact(
                    [
                        Delete(part, holder.key, expected_version=holder.version),
                        Increment(part, "count", {"n": -1}, floors={"n": 0}),
                        Increment(part, f"k#{key}", {"n": -1}, floors={"n": 0}),
                    ]
                )
            except FlowConflictError:
                continue  # renewed or released meanwhile: look again
            return True
        return False

    # -- the queue -------------------------------------------------------------------------

    def has_waiting(self, agent: str) -> bool:
        """Whether any run waits for a slot of the agent (a consistent read)."""
        return bool(self.items.query(keys_partition(agent), prefix="o#", limit=1))

    def enqueue(
        self, agent: str, run_id: str, key: str, priority: int, queued_at_ms: int, now_ms: int
    ) -> bool:
        """Puts the run in its key's queue (idempotent: the entry's key is the run's arrival).

        Returns:
            True if this call queued it, False if it was queued already.
        """
        part = keys_partition(agent)
        entry = queue_item_key(priority, queued_at_ms, run_id)
        data = {"run_id": run_id, "key": key, "priority": priority, "queued_at_ms": queued_at_ms}
        counts = slots_partition(agent)
        for _ in range(_ATTEMPTS):
            marker = self.items.get(part, f"m#{priority}#{key}")
            writes: list[FlowWrite] = [
                Put(queue_partition(agent, key), entry, data),
                Increment(counts, "count", {"queued": 1}),
                Increment(counts, f"k#{key}", {"queued": 1}),
            ]
            if marker is None:  # the key joins the round-robin at its back
                ordered = f"o#{priority}#{_ts(now_ms)}#{key}"
                writes.append(Put(part, f"m#{priority}#{key}", {"o": ordered}))
                writes.append(Put(part, ordered, {"key": key, "priority": priority}))
            else:
                # Rewritten as it is: a grant that read the marker before this entry existed
                # (and would drop the key as empty) finds it changed and looks again.
                writes.append(Put(part, marker.key, marker.data, expected_version=marker.version))
            try:
                self.items.transact(writes)
            except FlowConflictError as exc:
                if exc.index == 0:
                    return False  # queued already
                continue
            return True
        raise FlowConflictError(None, f"could not queue {run_id} for {agent}")

    def is_queued(
        self, agent: str, key: str, priority: int, queued_at_ms: int, run_id: str
    ) -> bool:
        """Whether the run's queue entry is there (a consistent read)."""
        entry = queue_item_key(priority, queued_at_ms, run_id)
        return self.items.get(queue_partition(agent, key), entry) is not None

    def grant_next(self, agent: str, limits: Concurrency, now_ms: int) -> Grant | None:
        """Gives a free slot to the next waiting run: by priority, round-robin across keys.

        Returns:
            The grant, or None if no slot is free or no run waits (for a slot it could take:
            keys at their own limit wait for one of theirs to end).
        """
        part = keys_partition(agent)
        for _ in range(_ATTEMPTS):
            outcome = self._grant_round(agent, limits, part, now_ms)
            if outcome != "again":
                return outcome if isinstance(outcome, Grant) else None
        return None

    def _grant_round(
        self, agent: str, limits: Concurrency, part: str, now_ms: int
    ) -> Grant | str | None:
        after: str | None = None
        while True:
            ordered_page = self.items.query(part, prefix="o#", after=after, limit=_PAGE)
            for ordered in ordered_page:
                result = self._grant_key(agent, limits, part, ordered, now_ms)
                if result in ("next", None):
                    if result is None:
                        return None
                    continue
                return result
            if len(ordered_page) < _PAGE:
                return None
            after = ordered_page[-1].key

    def _grant_key(
        self, agent: str, limits: Concurrency, part: str, ordered: FlowItem, now_ms: int
    ) -> Grant | str | None:
        """Tries the key of one ordered item.

        Returns:
            A Grant; "next" (try the next key); "again" (something changed: a new round); or
            None (no slot is free at all).
        """
        key, priority = str(ordered.data["key"]), int(ordered.data["priority"])
        marker = self.items.get(part, f"m#{priority}#{key}")
        if marker is None or marker.data.get("o") != ordered.key:
            # Left behind by a grant that moved the key (a crash cannot leave one: the move
            # is one transaction); dropped if still as read.
            with contextlib.suppress(FlowConflictError):
                self.items.transact([Delete(part, ordered.key, expected_version=ordered.version)])
            return "again"
        queue = queue_partition(agent, key)
        heads = self.items.query(queue, prefix=f"{priority}#", limit=2)
        if not heads:
            with contextlib.suppress(
                FlowConflictError
            ):  # the key has nobody waiting at this priority any more: out of the round
                self.items.transact(
                    [
                        Delete(part, ordered.key, expected_version=ordered.version),
                        Delete(part, marker.key, expected_version=marker.version),
                    ]
                )
            return "again"
        head = heads[0]
        run_id = str(head.data["run_id"])
        holder = _holder_data(key, now_ms, limits)
        writes: list[FlowWrite] = [Delete(queue, head.key, expected_version=head.version)]
        writes += self._take(agent, limits, run_id, key, holder, dequeued=True)
        writes.append(Delete(part, ordered.key, expected_version=ordered.version))
        if len(heads) > 1:  # more wait at this priority: the key goes to the back
            # Served now: behind every key served before. Later than when it was last served
            # even on a clock that stands still (or steps back), so the move is a move.
            served = max(now_ms, int(ordered.key.split("#")[2]) + 1)
            moved = f"o#{priority}#{_ts(served)}#{key}"
            writes.append(Put(part, moved, dict(ordered.data)))
            writes.append(Put(part, marker.key, {"o": moved}, expected_version=marker.version))
        else:
            writes.append(Delete(part, marker.key, expected_version=marker.version))
        try:
            self.items.transact(writes)
        except FlowConflictError as exc:
            if exc.index == 1:
                return None  # every slot is taken
            if exc.index == 2:
                return "next"  # this key is at its own limit: the next key's turn
            if exc.index == 3:
                self._drop_entry(agent, key, head)  # it holds a slot already
            return "again"
        return Grant(run_id, key, priority, int(head.data["queued_at_ms"]))

    def _drop_entry(self, agent: str, key: str, head: FlowItem) -> None:
        counts = slots_partition(agent)
        with contextlib.suppress(FlowConflictError):
            self.items.transact(
                [
                    Delete(head.partition, head.key, expected_version=head.version),
                    Increment(counts, "count", {"queued": -1}, floors={"queued": 0}),
                    Increment(counts, f"k#{key}", {"queued": -1}, floors={"queued": 0}),
                ]
            )

    def forget_idle_keys(self, agent: str, *, limit: int = 500) -> int:
        """Deletes the counts of keys with nothing running or waiting (up to ``limit``).

        A key's counts are created by its first run and would stay, at 0, for every key ever
        seen (a user id as the key: unbounded). Each is deleted at the version read, so a run
        that took or queued for the key meanwhile keeps its count; the next one creates it
        again.

        Returns:
            How many were deleted.
        """
        part = slots_partition(agent)
        deleted = seen = 0
        after: str | None = None
        while seen < limit:
            page = self.items.query(part, prefix="k#", after=after, limit=min(100, limit))
            for item in page:
                seen += 1
                if item.counters.get("n", 0) or item.counters.get("queued", 0):
                    continue
                with contextlib.suppress(FlowConflictError):
                    self.items.transact([Delete(part, item.key, expected_version=item.version)])
                    deleted += 1
            if len(page) < min(100, limit):
                break
            after = page[-1].key
        return deleted

    # -- what is seen ------------------------------------------------------------------------

    def counts(self, agent: str) -> tuple[FlowItem | None, list[FlowItem]]:
        """The agent's overall counts and one page of its per-key counts."""
        part = slots_partition(agent)
        return self.items.get(part, "count"), self.items.query(part, prefix="k#", limit=100)

    def waiting(self, agent: str, key: str, *, limit: int = 100) -> list[FlowItem]:
        """The key's waiting runs, next first."""
        return self.items.query(queue_partition(agent, key), limit=limit)

    def check_free(self, agent: str, run_id: str) -> Check:
        """A transaction condition: the run holds no slot."""
        return Check(slots_partition(agent), f"h#{run_id}", None)


def _holder_data(key: str, now_ms: int, limits: Concurrency) -> dict[str, Any]:
    return {
        "key": key,
        "granted_at_ms": now_ms,
        "lease_until_ms": now_ms + int(limits.lease_seconds * 1000),
    }
