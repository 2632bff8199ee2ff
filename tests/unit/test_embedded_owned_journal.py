"""The embedded store's journal voids the claims of the owner before it (ADR 0026)."""

from __future__ import annotations

from pathlib import Path

from durable_agents.core.clock import SkipClock
from durable_agents.core.effect_wait_records import EffectChange, EffectStatus, SideEffectRecord
from durable_agents.core.leases import lease_expired
from durable_agents.core.models import Entry, EntryType, OpKind, RunHeader, RunStatus
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents_local.embedded.owned_journal import OwnedJournal

OPENED = 1_000_000
LONG = 10 * 60 * 1000  # a lease far beyond the owner's start


def header(run_id: str, at: int) -> RunHeader:
    return RunHeader(
        run_id=run_id,
        agent="a",
        versions={"workflow_version": "1"},
        status=RunStatus.RUNNING,
        input="{}",
        created_at_ms=at,
        updated_at_ms=at,
    )


def started(run_id: str, n: int, at: int) -> Entry:
    return Entry(
        run_id=run_id,
        position=f"{n:08d}",
        op_id=f"{run_id}:step:{n}",
        kind=OpKind.STEP,
        name="step",
        type=EntryType.STARTED,
        attempt=1,
        recorded_at_ms=at,
        lease_expires_at_ms=at + LONG,
    )


def prepared(run_id: str, n: int, at: int) -> SideEffectRecord:
    return SideEffectRecord(
        run_id=run_id,
        position=f"{n:08d}",
        operation_id=f"{run_id}:charge:{n}",
        tool="charge",
        tool_schema_version="1",
        canonical_request="{}",
        idempotency_key=f"{run_id}:charge:{n}",
        status=EffectStatus.PREPARED,
        attempt=1,
        prepared_at_ms=at,
        updated_at_ms=at,
        lease_expires_at_ms=at + LONG,
        stale_at_ms=at,
    )


def seed(path: Path) -> None:
    """What an earlier local mode wrote before it was killed: a claim and a held tool call."""
    with SqliteJournal(path) as journal:
        journal.create_run(header("run-old", OPENED - 5_000))
        journal.commit("run-old", [started("run-old", 1, OPENED - 1_000)])
        journal.commit("run-old", [], effect=EffectChange(prepared("run-old", 2, OPENED - 1_000)))


def test_an_earlier_owners_claims_have_ended_when_the_store_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "local.sqlite3"
    seed(path)
    with OwnedJournal(path, clock=SkipClock(OPENED)) as journal:
        snapshot = journal.load("run-old")
        (claim,) = snapshot.entries
        (effect,) = snapshot.effects
        assert lease_expired(claim.lease_expires_at_ms or 0, OPENED)
        assert lease_expired(effect.lease_expires_at_ms, OPENED)
        assert lease_expired(
            journal.get_effect("run-old", effect.position).lease_expires_at_ms, OPENED
        )
        (stale,) = journal.stale_effects_page(OPENED).items
        assert lease_expired(stale.lease_expires_at_ms, OPENED)
        # The same objects on every load (replay folds only new entries).
        assert journal.load("run-old").entries[0] is claim
    # Nothing was written: the stored records keep their leases.
    with SqliteJournal(path) as plain:
        assert not lease_expired(plain.load("run-old").entries[0].lease_expires_at_ms or 0, OPENED)


def test_this_owners_own_claims_keep_their_leases(tmp_path: Path) -> None:
    path = tmp_path / "local.sqlite3"
    seed(path)
    with OwnedJournal(path, clock=SkipClock(OPENED)) as journal:
        # A new attempt of the old run, and a new run, claimed after the store was opened.
        journal.commit("run-old", [started("run-old", 3, OPENED + 10)])
        journal.create_run(header("run-new", OPENED + 20))
        journal.commit("run-new", [started("run-new", 1, OPENED + 30)])
        mine = [e for e in journal.load("run-old").entries if e.position == "00000003"]
        assert not lease_expired(mine[0].lease_expires_at_ms or 0, OPENED + 1_000)
        (new,) = journal.load("run-new").entries
        assert new.lease_expires_at_ms == OPENED + 30 + LONG
