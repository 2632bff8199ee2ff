"""One clock-skew margin for every lease comparison.

A lease (``lease_expires_at_ms`` of a STARTED entry or a side-effect record) is written on the
writer's clock and compared on the reader's. Two Lambda hosts never agree exactly, so a reader
whose clock runs ahead would take over a claim that is still live where it was written — and a
step or a tool call would run twice. Every reader therefore treats a lease as expired only
``CLOCK_SKEW_MARGIN_MS`` after its recorded end, and a suspension that waits for a lease wakes
at that same moment (``lease_end``), never earlier — waking earlier would find the lease still
live and suspend again straight away.

The writer side has its own, separate allowance: ``runtime.LEASE_MARGIN_MS`` extends a claim
beyond the Lambda's remaining time. See docs/side-effects.md ("Leases and clock skew").
"""

from __future__ import annotations

CLOCK_SKEW_MARGIN_MS = 2_000
"""How far apart two hosts' clocks may be. Lambda hosts are NTP-synchronised (Amazon Time Sync,
well under a millisecond in practice); two seconds is three orders of magnitude of headroom and
costs a recovery at most two seconds."""


def lease_end(lease_expires_at_ms: int) -> int:
    """The moment, on this reader's clock, from which a lease counts as expired."""
    return lease_expires_at_ms + CLOCK_SKEW_MARGIN_MS


def lease_expired(lease_expires_at_ms: int, now_ms: int) -> bool:
    """Whether a lease written on another host's clock has certainly ended at ``now_ms``."""
    return now_ms >= lease_end(lease_expires_at_ms)
