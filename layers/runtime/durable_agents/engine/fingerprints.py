"""Input fingerprints: what an operation was asked to do, checked again on replay.

Operations in a loop share a name, so kind and name alone cannot tell that the code now asks
position 2 to pay another invoice than the one it paid. Each operation whose input can be
serialised records a short hash of it (``meta["fp"]`` of the entries it writes; a tool call's
side-effect record holds its whole canonical request), and a replay that asks for the same
kind and name with another input is a divergence: the run pauses instead of handing one item's
recorded result to another.

A fingerprint is the first 16 hex digits of the SHA-256 of the input as compact JSON with sorted
keys: stable across processes, machines and Python versions (no ``hash()``). Sets are sorted by
their elements' JSON, because their iteration order changes from process to process.
Fingerprints are computed lazily: a replay whose recorded side has none (a journal written
before fingerprints existed) serialises nothing.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from datetime import date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import BaseModel, SecretBytes, SecretStr

from durable_agents.core.credentials import Secret
from durable_agents.core.serde import canonical_json
from durable_agents.engine.replay_index import FINGERPRINT_KEY

if TYPE_CHECKING:
    from durable_agents.engine.replay_index import OpRecord
    from durable_agents.tools import Tool

_HEX_DIGITS = 16
_SECRETS = (Secret, SecretStr, SecretBytes)


def digest(canonical: str) -> str:
    """The fingerprint of an input already serialised as canonical JSON text."""
    return hashlib.sha256(canonical.encode()).hexdigest()[:_HEX_DIGITS]


def canonical(value: Any) -> str:
    """Serialises ``value`` for fingerprinting: sorted keys, no spaces, sets sorted.

    Raises:
        TypeError: If the value (or something inside it) is not JSON, or is a secret.
        ValueError: If it holds NaN or infinity, or a reference cycle.
    """
    return _ENCODER.encode(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, _SECRETS):
        # Not even a hash of a credential goes to the journal (short secrets can be guessed).
        raise TypeError("a secret is never fingerprinted")
    if isinstance(value, BaseModel):
        # Python mode keeps sets as sets (JSON mode would list them in iteration order).
        return value.model_dump(mode="python")
    if isinstance(value, set | frozenset):
        return sorted(value, key=canonical)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"{type(value).__name__} is not JSON")


# What ``json.dumps`` with these options builds on every call (an encoder holds no state
# between calls): a replayed step with arguments fingerprints them again, every time.
_ENCODER = json.JSONEncoder(
    separators=(",", ":"), sort_keys=True, allow_nan=False, default=_jsonable
)


class Fingerprint:
    """The fingerprint of one operation's input, computed at most once and only if needed.

    Args:
        serialise: Returns the input's canonical JSON text. If it raises, the input has no
            fingerprint (it is not JSON, or holds a secret) and the operation is recorded and
            replayed without one.
    """

    __slots__ = ("_done", "_serialise", "_value")

    def __init__(self, serialise: Callable[[], str]):
        self._serialise = serialise
        self._value: str | None = None
        self._done = False

    @classmethod
    def of_value(cls, value: Any) -> Fingerprint:
        """The fingerprint of a JSON value or pydantic model (see ``canonical``)."""
        return cls(lambda: canonical(value))

    @classmethod
    def of_text(cls, text: str) -> Fingerprint:
        """The fingerprint of an input the operation already holds as canonical JSON."""
        return cls(lambda: text)

    @classmethod
    def of_args(cls, args: tuple[Any, ...]) -> Fingerprint:
        """The fingerprint of a step's positional arguments (as a JSON array)."""
        return NO_ARGS if not args else cls(lambda: canonical(list(args)))

    @property
    def value(self) -> str | None:
        """The fingerprint, or None if the input cannot be serialised."""
        if not self._done:
            try:
                self._value = digest(self._serialise())
            except Exception:  # any failure to serialise means "no fingerprint"
                self._value = None
            self._done = True
        return self._value

    def meta(self) -> dict[str, str]:
        """What to merge into the ``meta`` of the entries the operation writes."""
        value = self.value
        return {FINGERPRINT_KEY: value} if value is not None else {}

    def mismatch(self, record: OpRecord) -> tuple[str, str | None] | None:
        """Compares with what the journal recorded at this position.

        Returns:
            ``(recorded, requested)`` if they differ (``requested`` is None when today's input
            cannot be serialised although the recorded one could), None if they agree or the
            record carries no fingerprint (recorded before fingerprints existed).
        """
        recorded = record.fingerprint
        if recorded is None:
            return None
        requested = self.value
        return None if requested == recorded else (recorded, requested)


NO_ARGS = Fingerprint(lambda: "[]")
"""The fingerprint of no arguments (``Fingerprint.of_args(())``), one for the process."""

NO_ARGS_VALUE = sys.intern(NO_ARGS.value or "")
"""``NO_ARGS.value`` as records hold it (interned by ``OpRecord.add``): compared by identity."""


class ToolFingerprint(Fingerprint):
    """A tool call's fingerprint, checked against its side-effect record's canonical request.

    The record has always held the whole canonical request, so tool calls are checked even in
    runs recorded before fingerprints existed. Both sides are normalised through today's
    request model first: what is compared is what recovery would send (the recorded request,
    validated again) against what the code asks for now.
    """

    __slots__ = ("_model", "_request", "_request_model")

    def __init__(self, tool: Tool[Any, Any], request: Any):
        self._request_model = tool.request_model
        self._model: BaseModel | None = None
        super().__init__(lambda: canonical(self.model()))
        self._request = request

    def model(self) -> BaseModel:
        """The validated request (validated once)."""
        if self._model is None:
            self._model = self._request_model.model_validate(self._request)
        return self._model

    def mismatch(self, record: OpRecord) -> tuple[str, str | None] | None:
        """See ``Fingerprint.mismatch``; the recorded side is the side-effect record."""
        effect = record.effect
        if effect is None:
            return super().mismatch(record)
        text = effect.canonical_request
        try:
            if canonical_json(self.model()) == text:
                return None  # the common case: the very text PREPARE recorded
            recorded = digest(canonical(self._request_model.model_validate_json(text)))
        except Exception:  # a record that today's model cannot read: its raw text
            recorded = digest(text)
        requested = self.value
        return None if requested == recorded else (recorded, requested)
