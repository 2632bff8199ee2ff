"""What only the SQLite journal needs beyond the contract suite (which runs on it too).

Durability across close and reopen and across a killed writer, one winner among writers of
two stores or two processes on one file, the file's layout version and permissions, the
outbox feed and commit listeners, and listings that read one page through an index.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    Entry,
    EntryType,
    OpKind,
    RunChange,
    RunStatus,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.errors import ConfigurationError, InfrastructureError, RunStateConflictError
from durable_agents.journal.sqlite import SCHEMA_VERSION, SqliteJournal
from tests.contract.test_journal_contract import entry, header

ROOT = Path(__file__).resolve().parents[2]
ACTIVE = frozenset({RunStatus.RUNNING})


def effect(run_id: str = "run-1", position: str = "00000003") -> SideEffectRecord:
    return SideEffectRecord(
        run_id=run_id,
        position=position,
        operation_id=f"{run_id}:pay:{int(position)}",
        tool="pay",
        tool_schema_version="1",
        canonical_request='{"amount":5}',
        idempotency_key=f"{run_id}-{position}",
        status=EffectStatus.PREPARED,
        attempt=1,
        prepared_at_ms=3_000,
        updated_at_ms=3_000,
        lease_expires_at_ms=4_000,
        stale_at_ms=5_000,
        note={"why": ["a", 1]},
    )


def approval(run_id: str = "run-1") -> WaitRecord:
    return WaitRecord(
        wait_id=f"apr-{run_id}",
        kind="approval",
        run_id=run_id,
        position="00000004",
        operation_id=f"{run_id}:ask:4",
        name="ask",
        status=WaitStatus.PENDING,
        created_at_ms=3_000,
        updated_at_ms=3_000,
        deadline_ms=9_000,
        details={"approvers": ["alice"]},
    )


def outboxed(position: str, run_id: str = "run-1") -> Entry:
    return Entry(
        run_id=run_id,
        position=position,
        op_id=f"{run_id}:emit:{int(position)}",
        kind=OpKind.EMIT,
        name="emit",
        type=EntryType.SUCCEEDED,
        value='{"n":1}',
        recorded_at_ms=2_000,
        meta={"outbox": True, "detail_type": "thing.done"},
    )


# ----------------------------------------------------------------------- (a) reopening
def test_everything_written_is_there_after_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with SqliteJournal(path) as store:
        store.create_run(header(key="k-1"))
        # Out of program order, nested, and generation 0's migration record (after all).
        # Text of any kind, a lone surrogate (which UTF-8 cannot carry) among it.
        odd = '"caf\u00e9 \ud800 \U0001f600"'
        store.commit("run-1", [entry("00000002", value=odd), entry("00000001/00000001")])
        store.commit("run-1", [entry("~m00000001", name="migrated"), entry("00000001")])
        store.commit(
            "run-1",
            [],
            RunChange(expected=ACTIVE, status=RunStatus.SUSPENDED, updated_at_ms=5, wake_at_ms=7),
            effect=EffectChange(effect()),
            wait=WaitChange(approval()),
        )
        before = store.load("run-1")
    assert [e.position for e in before.entries] == [
        "00000001/00000001",
        "00000001",
        "00000002",
        "~m00000001",
    ]
    with SqliteJournal(path) as again:
        after = again.load("run-1")
        assert after == before
        assert after.entries[2].value == '"caf\u00e9 \ud800 \U0001f600"'
        assert after.header.status is RunStatus.SUSPENDED and after.header.revision == 1
        # Written without a tenant, the approval was given its run's (JournalStore.commit),
        # and so was the call written with it; both kept.
        assert again.get_effect("run-1", "00000003") == effect().replace(tenant="default")
        assert again.get_wait("apr-run-1") == approval().replace(tenant="default")
        assert [h.run_id for h in again.due_runs(10)] == ["run-1"]
        # The idempotency key still finds the first run.
        existing, created = again.create_run(header("run-2", key="k-1"))
        assert not created and existing.run_id == "run-1"


# ---------------------------------------------------------------- (b) racing writers
def _suspend(run_id: str) -> RunChange:
    return RunChange(expected=ACTIVE, status=RunStatus.SUSPENDED, updated_at_ms=5, wake_at_ms=9)


def test_two_stores_racing_the_same_conditional_commit_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with SqliteJournal(path) as first, SqliteJournal(path) as second:
        for round_ in range(10):
            run_id = f"run-{round_}"
            first.create_run(header(run_id))
            barrier = threading.Barrier(2)
            outcomes: list[str] = []

            def race(
                store: SqliteJournal,
                run_id: str = run_id,
                barrier: threading.Barrier = barrier,
                outcomes: list[str] = outcomes,
            ) -> None:
                barrier.wait()
                try:
                    store.commit(run_id, [entry(run_id=run_id)], _suspend(run_id))
                    outcomes.append("won")
                except RunStateConflictError:
                    outcomes.append("conflict")

            threads = [threading.Thread(target=race, args=(s,)) for s in (first, second)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(outcomes) == ["conflict", "won"]
            assert len(first.load(run_id).entries) == 1
            assert second.get_run(run_id).revision == 1


_RACER = """
import sys
from durable_agents.core.models import RunChange, RunStatus
from durable_agents.errors import RunStateConflictError
from durable_agents.journal.sqlite import SqliteJournal
from tests.contract.test_journal_contract import entry

store = SqliteJournal(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
change = RunChange(expected=frozenset({RunStatus.RUNNING}), status=RunStatus.SUSPENDED,
                   updated_at_ms=5, wake_at_ms=9)
try:
    store.commit("run-1", [entry()], change)
    print("won", flush=True)
except RunStateConflictError:
    print("conflict", flush=True)
"""


def test_two_processes_racing_the_same_conditional_commit_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with SqliteJournal(path) as store:
        store.create_run(header())
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", _RACER, str(path)],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for racer in racers:
            assert racer.stdout is not None and racer.stdout.readline() == "ready\n"
        for racer in racers:  # both go at once
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        outcomes = sorted(racer.communicate(timeout=60)[0].strip() for racer in racers)
        assert outcomes == ["conflict", "won"]
        snapshot = store.load("run-1")
        assert len(snapshot.entries) == 1 and snapshot.header.revision == 1


# ------------------------------------------------------------------ (c) a killed writer
_WRITER = """
import sys
from durable_agents.core.models import RunChange, RunStatus
from durable_agents.journal.sqlite import SqliteJournal
from tests.contract.test_journal_contract import entry

store = SqliteJournal(sys.argv[1])
running = frozenset({RunStatus.RUNNING})
for n in range(store.get_run("run-1").revision + 1, 100_000):
    # The entry and the header's change in one transaction: the revision counts the entries.
    change = RunChange(expected=running, status=RunStatus.RUNNING, updated_at_ms=n,
                       expected_revision=n - 1)
    store.commit("run-1", [entry(f"{n:08d}")], change)
    print(n, flush=True)
"""


def test_every_acknowledged_write_survives_a_sigkill_and_none_is_half_applied(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    with SqliteJournal(path) as store:
        store.create_run(header())
    # Killed three times, each time a little later: a kill between two halves of a
    # transaction, were it not one, would show on one of them.
    for round_, until in enumerate((25, 40, 55)):
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        acknowledged = 0
        while acknowledged < until + round_ * 40:
            line = writer.stdout.readline()
            assert line, "the writer died before it was killed"
            acknowledged = int(line)
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        assert writer.returncode == -signal.SIGKILL
        with SqliteJournal(path) as reopened:
            snapshot = reopened.load("run-1")
        written = [int(e.position) for e in snapshot.entries]
        assert written == list(range(1, len(written) + 1))  # no gap
        assert len(written) >= acknowledged  # every acknowledged write is there
        # All or nothing: as many header changes as entries, the last one's time on it.
        assert snapshot.header.revision == len(written)
        assert snapshot.header.updated_at_ms == len(written)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()


def test_a_write_locked_out_past_the_busy_timeout_is_an_infrastructure_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    with SqliteJournal(path, busy_timeout_ms=200) as store:
        store.create_run(header())
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            with pytest.raises(InfrastructureError) as raised:
                store.commit("run-1", [entry()], _suspend("run-1"))
            assert raised.value.code == "SQLITE_BUSY"
            assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        finally:
            other.execute("ROLLBACK")
            other.close()
        # Nothing of it was written; the store works on once the lock is free.
        assert store.load("run-1").entries == []
        store.commit("run-1", [entry()], _suspend("run-1"))
        assert store.get_run("run-1").status is RunStatus.SUSPENDED


# ------------------------------------------------------------------ (d) what is refused
def test_a_file_of_a_newer_layout_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    SqliteJournal(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 7}")
    db.close()
    with pytest.raises(ConfigurationError) as raised:
        SqliteJournal(path)
    assert f"version {SCHEMA_VERSION + 7}" in str(raised.value)
    assert f"version {SCHEMA_VERSION} " in str(raised.value)


def test_a_file_that_is_not_a_database_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are my notes, not a journal\n" * 200)
    with pytest.raises(ConfigurationError, match=r"notes\.txt"):
        SqliteJournal(path)
    assert path.read_bytes().startswith(b"these are my notes")


# ---------------------------------------------------------------------- (e) permissions
def test_the_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    old = os.umask(0o022)  # the usual umask: it would leave a new file readable by all
    try:
        with SqliteJournal(path) as store:
            store.create_run(header())
            kept = [p for p in tmp_path.iterdir() if p.name.startswith("journal.sqlite3")]
            assert kept  # the database and, while open, its -wal and -shm files
            for each in kept:
                assert stat.S_IMODE(each.stat().st_mode) == 0o600, each.name
    finally:
        os.umask(old)


# -------------------------------------------------------------- (f) outbox and listeners
def test_the_outbox_lists_outbox_entries_in_order_after_a_cursor(tmp_path: Path) -> None:
    with SqliteJournal(tmp_path / "journal.sqlite3") as store:
        store.create_run(header())
        store.create_run(header("run-2"))
        store.commit("run-1", [outboxed("00000001"), entry("00000002")])
        store.commit("run-2", [outboxed("00000001", "run-2")])
        store.commit("run-1", [outboxed("00000003")])
        feed = store.outbox_page(0)
        assert [(e.run_id, e.position) for _, e in feed] == [
            ("run-1", "00000001"),
            ("run-2", "00000001"),
            ("run-1", "00000003"),
        ]
        seqs = [seq for seq, _ in feed]
        assert seqs == sorted(seqs)
        assert feed[0][1] == outboxed("00000001")
        assert store.outbox_page(seqs[0]) == feed[1:]
        assert store.outbox_page(seqs[0], limit=1) == feed[1:2]
        assert store.outbox_page(seqs[-1]) == []
        # A run that expired takes its outbox entries with it.
        store.commit(
            "run-2", [], RunChange(expected=ACTIVE, status=RunStatus.SUCCEEDED, updated_at_ms=9)
        )
        expires = store.get_run("run-2").expires_at_ms
        assert expires is not None
        assert store.expire(expires) == ["run-2"]
        assert [e.run_id for _, e in store.outbox_page(0)] == ["run-1", "run-1"]


def test_commit_listeners_hear_every_write_and_one_that_raises_fails_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[str] = []

    def broken() -> None:
        raise RuntimeError("listener bug")

    with SqliteJournal(tmp_path / "journal.sqlite3") as store:
        store.add_commit_listener(broken)
        store.add_commit_listener(lambda: heard.append("commit"))
        with caplog.at_level(logging.ERROR, logger="durable_agents.journal.sqlite"):
            store.create_run(header())
            store.commit("run-1", [outboxed("00000001")])
        assert heard == ["commit", "commit"]
        assert store.load("run-1").entries == [outboxed("00000001")]
        assert [r.exc_info[1] for r in caplog.records if r.exc_info] != []
        assert all("listener bug" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
        # A write that changes nothing is not heard: a repeated start, idle passes.
        store.create_run(header("run-2", key="k"))
        heard.clear()
        assert not store.create_run(header("run-3", key="k"))[1]
        assert store.stamp_expiry("run-1", 10**12) == 0
        assert store.expire(10**12) == []
        assert heard == []


# ------------------------------------------------------------ (g) a page reads a page
def test_listings_read_a_page_through_an_index_not_every_run(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with SqliteJournal(path) as store:
        # Seeded fast: one fsync per start would take tens of seconds.
        store._db.execute("PRAGMA synchronous = OFF")
        for n in range(2_000):
            run_id = f"run-{n:04d}"
            store.create_run(header(run_id, at=1_000 + n).replace(tenant=f"t{n % 3}"))
            if n % 2:
                store.commit(run_id, [], _suspend(run_id))
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)  # SQL with its values bound in
        first = store.list_runs(limit=10)
        assert [h.run_id for h in first.runs] == [f"run-{n:04d}" for n in range(1999, 1989, -1)]
        store.list_runs(limit=10, cursor=first.cursor)
        store.list_runs(limit=10, tenant="t1", status=RunStatus.SUSPENDED, agent="agent-a")
        assert len(store.changed_runs_page(RunStatus.RUNNING, limit=10).items) == 10
        # Every suspended run has a timer: listed by due time, not by its last change.
        assert store.changed_runs_page(RunStatus.SUSPENDED, limit=10).items == []
        assert len(store.due_runs_page(10**12, limit=10).items) == 10
        store.expiring_runs_page(10**12, limit=10)
        store.stale_effects_page(10**12, limit=10)
        store.reviews_page(limit=10)
        store.effects_in_review(limit=10)
        store.waits_page("approval", WaitStatus.PENDING, limit=10)
        store.list_waits("approval", WaitStatus.PENDING, limit=10)
        store.due_waits_page(10**12, limit=10)
        store._db.set_trace_callback(None)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 13
    with sqlite3.connect(path) as db:
        for sql in selects:
            plan = [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}")]
            # Every step seeks an index range in the listing's order: no table scan, and
            # no sort of everything that matched before the page is cut.
            assert all(step.startswith("SEARCH") and "INDEX" in step for step in plan), (sql, plan)
            assert not any("TEMP B-TREE" in step for step in plan), (sql, plan)
    db.close()


def test_the_module_examples_hold() -> None:
    import doctest

    from durable_agents.journal import conditions, sqlite_records

    for module in (conditions, sqlite_records):
        results = doctest.testmod(module)
        assert results.attempted > 0 and results.failed == 0, module.__name__
