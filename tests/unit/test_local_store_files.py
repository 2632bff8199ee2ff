"""The durable local store's files: torn records dropped, corruption refused, the lock, ports."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from durable_agents_local.moto_server import HOST, free_port, port_is_free
from durable_agents_local.wal import (
    CorruptStateError,
    StateDirLockedError,
    StateFiles,
    StateLock,
    WriteAheadLog,
    encode,
    read_records,
)


def _log(path: Path, *payloads: bytes) -> None:
    wal = WriteAheadLog(path)
    for payload in payloads:
        wal.append(payload)
    wal.close()


@pytest.mark.parametrize("cut", [1, 4, 8, 9, 12])
def test_a_torn_last_record_is_dropped_and_cut_off(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "wal-0.log"
    _log(path, b"one", b"two", b"three")
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - len(encode(b"three")) + cut - 1])

    records, valid = read_records(path)
    assert records == [b"one", b"two"]
    wal = WriteAheadLog(path, valid, len(records))
    wal.append(b"four")  # appended after the valid prefix, not after the torn bytes
    wal.close()
    assert read_records(path)[0] == [b"one", b"two", b"four"]


def test_a_last_record_with_a_bad_checksum_is_torn(tmp_path: Path) -> None:
    path = tmp_path / "wal-0.log"
    _log(path, b"one", b"two")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert read_records(path)[0] == [b"one"]


def test_a_bad_record_followed_by_good_ones_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "wal-0.log"
    _log(path, b"one", b"two", b"three")
    data = bytearray(path.read_bytes())
    data[len(encode(b"one")) + 8] ^= 0xFF  # the first byte of "two"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError) as caught:
        read_records(path)
    assert caught.value.offset == len(encode(b"one"))


def test_snapshots_round_trip_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    files = StateFiles(tmp_path)
    assert files.read_snapshot() == (0, None)
    files.write_snapshot(3, b"state")
    assert files.read_snapshot() == (3, b"state")
    data = bytearray(files.snapshot_path.read_bytes())
    data[-1] ^= 0xFF
    files.snapshot_path.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError):
        files.read_snapshot()


def test_a_state_dir_has_one_store(tmp_path: Path) -> None:
    first = StateLock(tmp_path)
    first.acquire()
    with pytest.raises(StateDirLockedError) as caught:
        StateLock(tmp_path).acquire()
    assert caught.value.holder.isdigit()
    first.release()
    second = StateLock(tmp_path)
    second.acquire()  # free again once released (or once its holder died)
    second.release()


def test_a_port_whose_last_connection_is_in_time_wait_is_free() -> None:
    port = free_port()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, port))
    listener.listen()
    client = socket.create_connection((HOST, port))
    accepted, _ = listener.accept()
    accepted.close()  # the server closes first: its end of the connection goes to TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    assert port_is_free(port)


def test_a_port_someone_listens_on_is_not_free() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, 0))
        listener.listen()
        assert not port_is_free(listener.getsockname()[1])


def test_the_state_is_readable_by_its_user_only(tmp_path: Path) -> None:
    # The snapshot holds every table (the link key's secret included): another local user must
    # not read what the store itself refuses them (issue 31).
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    for state_dir in (tmp_path / "new" / "state", loose):
        files = StateFiles(state_dir)
        files.write_snapshot(1, b"journal")
        _log(files.log_path(1), b"write")
        assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(files.snapshot_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(files.log_path(1).stat().st_mode) == 0o600
