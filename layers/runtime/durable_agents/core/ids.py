"""Deterministic, readable identifiers derived from a run and a position in the code path."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from typing import Any

from durable_agents.errors import InvalidNameError

# Matched with ``fullmatch``: ``re.match(r"^...$")`` also takes a trailing newline (``$``
# matches before one), which would put "run-1\n" into keys, ids and log lines.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
POSITION_WIDTH = 8
# Names already checked: every replayed operation checks its name again, and a regular
# expression per operation was a measurable part of replaying a long run. Bounded: names that
# are built per item (``f"fetch-{i}"``) fill it once, then are checked the slow way.
_VALID_NAMES: set[str] = set()
_VALID_NAMES_KEPT = 10_000
KNOWN_NAMES = _VALID_NAMES
"""Names ``check_name`` accepted already (read-only: a hot path checks membership inline)."""


def check_name(name: str, what: str = "operation") -> str:
    """Validates an operation or agent name.

    Names end up in operation ids and idempotency keys, so they are restricted to letters,
    digits, ``_``, ``.`` and ``-`` (at most 80 characters, starting with a letter or digit).

    Raises:
        InvalidNameError: If the name does not match.
    """
    if isinstance(name, str) and name in _VALID_NAMES:
        return name
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidNameError(
            f"invalid {what} name {name!r}: use 1-80 of [A-Za-z0-9_.-], starting with a "
            "letter or digit"
        )
    if len(_VALID_NAMES) < _VALID_NAMES_KEPT:
        _VALID_NAMES.add(name)
    return name


def check_run_id(run_id: str) -> str:
    """Validates a run id.

    Raises:
        InvalidNameError: If the id does not match ``[A-Za-z0-9][A-Za-z0-9_.-]{0,127}``.
    """
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise InvalidNameError(
            f"invalid run id {run_id!r}: use 1-128 of [A-Za-z0-9_.-], starting with a letter "
            "or digit"
        )
    return run_id


MAX_IDEMPOTENCY_KEY_CHARS = 256
"""The longest idempotency key a run is started with (what the Api's ``Idempotency-Key`` takes).

Its DynamoDB item's partition key is ``IDEM@<tenant>#<agent>#<key>``, at most 2,048 bytes:
256 characters of at most 4 bytes of UTF-8 each, after a 64-character tenant and an
80-character agent name, is 1,175.
"""


def check_idempotency_key(key: str) -> str:
    """Validates a client's idempotency key before a run is started with it.

    Checked here, not by each journal: the in-memory journal took any key and DynamoDB
    refused a long one with a raw ``ValidationException``, so the same start succeeded
    locally and failed deployed.

    Raises:
        InvalidNameError: If it is not a string, is empty, is longer than
            ``MAX_IDEMPOTENCY_KEY_CHARS`` characters, or has a character that is not
            printable (a control character such as a newline, or a lone surrogate).
    """
    if not isinstance(key, str) or not key:
        raise InvalidNameError(f"invalid idempotency key {key!r}: it is empty or not a string")
    if len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise InvalidNameError(
            f"invalid idempotency key {key[:40]!r}...: it is {len(key)} characters; at most "
            f"{MAX_IDEMPOTENCY_KEY_CHARS} are accepted"
        )
    if not key.isprintable():
        raise InvalidNameError(
            f"invalid idempotency key {key!r}: use printable characters only (no control "
            "characters, newlines or lone surrogates)"
        )
    return key


def name_of(fn: Callable[..., Any]) -> str:
    """Derives a stable operation name from a function (its ``__name__``, sanitised).

    Lambdas and other anonymous callables get ``"lambda"``; a name derived this way is checked
    on replay like an explicit one, so renaming the function is detected as a divergence.
    """
    raw = getattr(fn, "__name__", None) or type(fn).__name__
    if raw == "<lambda>":
        return "lambda"
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]", "_", raw).lstrip("_.-") or "step"
    return cleaned[:80]


def format_position(prefix: str, counter: int) -> str:
    """Returns the sortable position path for the ``counter``-th operation of a scope."""
    if not 0 <= counter < len(POSITIONS):
        if not 0 <= counter < _POSITIONS_KEPT:
            return f"{prefix}{counter:0{POSITION_WIDTH}d}"
        with _GROWING:
            while len(POSITIONS) <= counter:
                POSITIONS.append(f"{len(POSITIONS):0{POSITION_WIDTH}d}")
    digits = POSITIONS[counter]
    return prefix + digits if prefix else digits


# Counters formatted once per process: formatting one per operation (and per batch branch) on
# every replay was a measurable part of replaying a long run or a large batch. Grown on demand
# up to a bound (past it, formatted as it goes); only appended to, under the lock, so a reader
# that sees an index sees its final string.
POSITIONS = [f"{n:0{POSITION_WIDTH}d}" for n in range(1024)]
"""``format_position("", n)`` by ``n`` (read-only: a hot path indexes it inline)."""
_POSITIONS_KEPT = 1 << 17
_GROWING = threading.Lock()


def wait_id(prefix: str, operation_id: str) -> str:
    """A public id derived from the operation id (stable on replay, opaque in URLs)."""
    return f"{prefix}-{hashlib.sha256(operation_id.encode()).hexdigest()[:24]}"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def slot_id(run_id: str, name: str, seq: int) -> str:
    """The wait id of the ``seq``-th event of ``name`` sent to the run."""
    return f"evs-{_digest(run_id, name)}-{seq}"


def key_id(run_id: str, name: str, event_id: str) -> str:
    """The wait id that records a client event id as taken."""
    return f"evk-{_digest(run_id, name, event_id)}"
