"""Rate limits shared by every Lambda of a deployment: one counter per period and shard.

A limit of ``requests`` per period is counted in fixed periods (``period start = now // period``)
on flow items ``rate#<limiter>#<shard>`` / ``<period start>``: taking a request is one
conditional write that adds one under the shard's share of the limit (no read first, so a
request costs one write and two invocations can never both take the last one). The count is
spread over ``RateLimit.shard_count`` partitions so that no DynamoDB partition takes more than
its write limit; a request tries the shard its operation hashes to, then one other, before it
waits for the next period. Tokens (model configurations) are counted on the shard that let the
call through, after the call, and a period whose tokens are spent lets no call through.

An operation over its limit does not wait in its invocation: it suspends on a durable timer
until the next period, later for lower priorities (so that higher ones take the period's first
requests).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from durable_agents.flow_control import RateLimit
from durable_agents.journal.flow_items import FlowConflictError, FlowItems, Increment

__all__ = ["RateLimits", "Taken", "model_rate_limit"]

_KEEP_S = 3600  # a period's counts outlive it by an hour (read by GET /flow), then expire
_STAGGER_PER_PRIORITY = 0.05  # of a period, per priority step below the highest


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _period_key(start_ms: int) -> str:
    """A period's item key: its start, fixed-width so keys sort as times."""
    return f"{start_ms:015d}"


def _share(total: int, shards: int, shard: int) -> int:
    """The shard's part of ``total``: equal parts, the first ones one more for the remainder."""
    return total // shards + (1 if shard < total % shards else 0)


def model_rate_limit(
    requests_per_minute: int | None, tokens_per_minute: int | None
) -> RateLimit | None:
    """The rate limit a model configuration declares (None: none)."""
    if requests_per_minute is None and tokens_per_minute is None:
        return None
    if requests_per_minute is None:  # tokens only: one shard counts them
        return RateLimit(requests=1_000_000_000, per_seconds=60, tokens=tokens_per_minute, shards=1)
    return RateLimit(requests=requests_per_minute, per_seconds=60, tokens=tokens_per_minute)


@dataclass(frozen=True, slots=True)
class Taken:
    """A request taken: where it was counted (its tokens go there too)."""

    limiter: str
    shard: int
    period_start_ms: int


class RateLimits:
    """Takes requests of rate limits kept in flow items."""

    def __init__(self, items: FlowItems):
        self.items = items

    def take(
        self, limiter: str, limit: RateLimit, caller: str, priority: int, now_ms: int
    ) -> Taken | int:
        """Takes one request of the current period.

        Args:
            limiter: The limit's name (``tool#<name>``, ``model#<config>``).
            limit: The limit.
            caller: What asks (an operation's id): which shard it tries first.
            priority: The run's priority (1 highest): how long it waits if it must.
            now_ms: Now.

        Returns:
            ``Taken`` if the request may go now, else when to try again (epoch ms): the next
            period's start, later for lower priorities.
        """
        period = limit.period_ms
        start = now_ms // period * period
        shards = limit.shard_count
        first = _hash(caller) % shards
        tries = (
            [first]
            if shards == 1
            else [first, (first + 1 + _hash(caller + "#") % (shards - 1)) % shards]
        )
        for shard in tries:
            ceilings = {"n": _share(limit.requests, shards, shard)}
            if limit.tokens is not None:
                # Adds no tokens: only lets the request through while the period has some left.
                ceilings["tokens"] = _share(limit.tokens, shards, shard) - 1
            write = Increment(
                f"rate#{limiter}#{shard}",
                _period_key(start),
                {"n": 1, "tokens": 0},
                ceilings=ceilings,
                expires_at_s=(start + period) // 1000 + _KEEP_S,
            )
            try:
                self.items.transact([write])
            except FlowConflictError:
                continue
            return Taken(limiter, shard, start)
        stagger = int(period * _STAGGER_PER_PRIORITY * (max(priority, 1) - 1))
        return start + period + stagger

    def add_tokens(self, taken: Taken, tokens: int) -> None:
        """Counts a call's tokens on the period and shard that let it through."""
        if tokens <= 0:
            return
        self.items.transact(
            [
                Increment(
                    f"rate#{taken.limiter}#{taken.shard}",
                    _period_key(taken.period_start_ms),
                    {"tokens": tokens},
                )
            ]
        )

    def note_wait(self, limiter: str, now_ms: int) -> None:
        """Counts one operation that had to wait for the limit (per day, for ``GET /flow``)."""
        day = now_ms // 86_400_000
        self.items.transact(
            [
                Increment(
                    f"ratewaits#{limiter}",
                    f"{day:08d}",
                    {"waits": 1},
                    expires_at_s=(day + 8) * 86_400,
                )
            ]
        )

    def waits(self, limiter: str, now_ms: int) -> int:
        """Operations that waited for the limit today (UTC)."""
        item = self.items.get(f"ratewaits#{limiter}", f"{now_ms // 86_400_000:08d}")
        return 0 if item is None else item.counters.get("waits", 0)

    def used(self, limiter: str, limit: RateLimit, now_ms: int) -> tuple[int, int]:
        """Requests and tokens counted in the current period, over every shard."""
        start = now_ms // limit.period_ms * limit.period_ms
        requests = tokens = 0
        for shard in range(limit.shard_count):
            item = self.items.get(f"rate#{limiter}#{shard}", _period_key(start))
            if item is not None:
                requests += item.counters.get("n", 0)
                tokens += item.counters.get("tokens", 0)
        return requests, tokens
