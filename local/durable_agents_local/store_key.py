"""The local store's session key: a secret only local mode's processes hold (issue 31).

The store (``moto_server``) answers only requests whose SigV4 access key id is its session
key (``isolated_moto.require_store_key``). Each store makes a new random key when it starts,
unless it is handed one in ``DURABLE_AGENTS_STORE_KEY`` (how ``MotoProcess`` gives its child the
key it made: never on the command line, which any user can read with ``ps``). The store writes
its key to a file only the developer's user can read (``key_file``: mode 0600 in a 0700
directory) and removes it when it stops cleanly, so that the commands started separately
(``durable-agents local --moto-endpoint``, the tests' and the demo's clients) find it
(``key_for``).

The key is a bearer secret on loopback: moto does not verify signatures, so whoever holds the
key can use the store, and whoever does not cannot (ADR 0023).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

KEY_VARIABLE = "DURABLE_AGENTS_STORE_KEY"
RUNTIME_DIR_VARIABLE = "DURABLE_AGENTS_RUNTIME_DIR"
KEY_PREFIX = "LOCAL"
KEY_HEX_CHARS = 32


class StoreKeyError(Exception):
    """The store's key cannot be kept or found safely; the message says why."""


class StoreKeyMissingError(StoreKeyError):
    """No key for a store: neither ``DURABLE_AGENTS_STORE_KEY`` nor the store's key file."""


def new_key() -> str:
    """A new random session key, usable as an AWS access key id.

    Returns:
        ``"LOCAL"`` and 32 uppercase hex digits (128 bits from ``secrets``).
    """
    return KEY_PREFIX + secrets.token_hex(KEY_HEX_CHARS // 2).upper()


def runtime_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user directory of the key files (not created here).

    Args:
        environ: Where to read the variables (``os.environ`` by default).

    Returns:
        ``DURABLE_AGENTS_RUNTIME_DIR`` if set, else ``$XDG_RUNTIME_DIR/durable-agents`` if
        ``XDG_RUNTIME_DIR`` is set, else ``~/.cache/durable-agents/run``.
    """
    source = os.environ if environ is None else environ
    if source.get(RUNTIME_DIR_VARIABLE):
        return Path(source[RUNTIME_DIR_VARIABLE])
    if source.get("XDG_RUNTIME_DIR"):
        return Path(source["XDG_RUNTIME_DIR"]) / "durable-agents"
    return Path.home() / ".cache" / "durable-agents" / "run"


def key_file(port: int, environ: Mapping[str, str] | None = None) -> Path:
    """The key file of the store on ``port`` (in ``runtime_dir``)."""
    return runtime_dir(environ) / f"store-{port}.key"


def _private_dir(path: Path) -> Path:
    """Creates ``path`` (mode 0700) if needed and makes sure only this user can enter it.

    Raises:
        StoreKeyError: If it is not a directory or belongs to another user.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not path.is_dir() or path.is_symlink():
        raise StoreKeyError(f"{path} must be a directory (it holds the local store's key)")
    if info.st_uid != os.getuid():
        raise StoreKeyError(
            f"{path} belongs to another user (uid {info.st_uid}); it would hold the local "
            f"store's key: set {RUNTIME_DIR_VARIABLE} to a directory of your own"
        )
    if info.st_mode & 0o077:
        path.chmod(0o700)
    return path


def write_key(port: int, key: str, environ: Mapping[str, str] | None = None) -> Path:
    """Writes ``key`` as the key of the store on ``port``, atomically, readable by this user only.

    Returns:
        The key file.

    Raises:
        StoreKeyError: If the runtime directory is not this user's own.
        OSError: If the file cannot be written.
    """
    path = key_file(port, environ)
    write_private(path, f"{key}\n")
    return path


def write_private(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` atomically, readable by this user only.

    The file is created with mode 0600 (never readable by anyone else, even briefly) under a
    temporary name in a 0700 directory of this user's own, then renamed over any previous one.

    Raises:
        StoreKeyError: If the directory is not this user's own.
        OSError: If the file cannot be written.
    """
    _private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_key(port: int, environ: Mapping[str, str] | None = None) -> str | None:
    """The key in the key file of the store on ``port``; None if there is no such file.

    Raises:
        OSError: If the file exists but cannot be read.
    """
    try:
        text = key_file(port, environ).read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    return text.strip() or None


def remove_key(port: int, key: str, environ: Mapping[str, str] | None = None) -> bool:
    """Removes the key file of the store on ``port`` if it still holds ``key``.

    A store that started on the same port since (and wrote its own key) keeps its file.

    Returns:
        Whether the file was removed.
    """
    try:
        if read_key(port, environ) != key:
            return False
        key_file(port, environ).unlink()
    except OSError:
        return False
    return True


def port_of(endpoint: str) -> int:
    """The TCP port of an ``http://host:port`` endpoint (80 or 443 when it names none).

    Raises:
        ValueError: If the port is not a number.
    """
    url = urlsplit(endpoint)
    return url.port or (443 if url.scheme == "https" else 80)


def key_for(endpoint: str, environ: Mapping[str, str] | None = None) -> str:
    """The key of the store at ``endpoint``.

    Args:
        endpoint: The store's URL, e.g. ``http://127.0.0.1:5010``.
        environ: Where to look for ``DURABLE_AGENTS_STORE_KEY`` and the runtime directory
            (``os.environ`` by default).

    Returns:
        ``DURABLE_AGENTS_STORE_KEY`` if set (it wins), else the key in the key file of the
        endpoint's port.

    Raises:
        StoreKeyMissingError: If neither exists.
        OSError: If the key file exists but cannot be read.
        ValueError: If the endpoint's port is not a number.
    """
    source = os.environ if environ is None else environ
    if source.get(KEY_VARIABLE):
        return source[KEY_VARIABLE]
    port = port_of(endpoint)
    key = read_key(port, source)
    if key is None:
        raise StoreKeyMissingError(
            f"no key for the local store at {endpoint}: {key_file(port, source)} does not exist "
            f"and {KEY_VARIABLE} is not set. `durable-agents local` and `durable-agents moto` "
            "write that file when they start the store (as your user); start one, or set "
            f"{KEY_VARIABLE} to the key of the store you started"
        )
    return key
