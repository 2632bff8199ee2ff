"""Serialization of recorded values and errors.

Every value the journal records goes through an encoder and its decoder, and the first
execution returns ``decode(encode(value))`` — exactly what a replay will return — so a fresh run
and a resumed run cannot behave differently.

Two encoders exist:

* ``encode``/``decode``: plain JSON (plus pydantic models, or whatever a type hint describes).
  Used at the run's own boundaries (its input and output, tool results, approvals), whose JSON
  is shown by the Api and sent to other systems as it is.
* ``encode_value``/``decode_value``: what operations record (step results, child scopes,
  batch item results, callback results, polling state). Without a hint or ``serdes`` they use
  the tagged JSON of ``durable_agents.core.serde_values`` (datetimes, decimals, sets, dataclasses,
  …); a hint validates with pydantic as ``encode`` does; a ``Serdes`` replaces both.

Errors are recorded by ``error_info`` and rebuilt by ``rebuild_error``
(``durable_agents.core.serde_errors``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, TypeAdapter

from durable_agents.core.models import Entry, EntryType, ErrorInfo
from durable_agents.core.serde_errors import error_info, rebuild_error
from durable_agents.core.serde_values import (
    check_no_secrets,
    from_tagged,
    refuse_secret,
    register_type,
    to_text,
)
from durable_agents.errors import PayloadError

__all__ = [
    "DEFAULT_SERDES",
    "FunctionSerdes",
    "Serdes",
    "SerdesSpec",
    "as_serdes",
    "canonical_json",
    "decode",
    "decode_value",
    "encode",
    "encode_value",
    "error_info",
    "rebuild_error",
    "register_type",
    "replay_value",
]


@runtime_checkable
class Serdes(Protocol):
    """A custom serializer for one operation's value (``serdes=`` of ``ctx`` operations).

    ``deserialize(serialize(value))`` is what the operation returns, on the first run and on
    every replay. Credentials inside the value are refused before ``serialize`` sees it.
    """

    def serialize(self, value: Any) -> str:
        """Returns the text recorded for ``value``."""
        ...  # pragma: no cover - a protocol

    def deserialize(self, text: str) -> Any:
        """Returns the value recorded as ``text``."""
        ...  # pragma: no cover - a protocol


@dataclass(frozen=True, slots=True)
class FunctionSerdes:
    """A ``Serdes`` made of two functions (what ``serdes=(dump, load)`` becomes)."""

    dump: Callable[[Any], str]
    load: Callable[[str], Any]

    def serialize(self, value: Any) -> str:
        """Returns ``dump(value)``."""
        return self.dump(value)

    def deserialize(self, text: str) -> Any:
        """Returns ``load(text)``."""
        return self.load(text)


SerdesSpec = Serdes | tuple[Callable[[Any], str], Callable[[str], Any]]
"""What ``serdes=`` accepts: a ``Serdes`` object or a ``(serialize, deserialize)`` pair."""


def as_serdes(spec: SerdesSpec | None) -> Serdes | None:
    """Normalises a ``serdes=`` argument.

    Raises:
        TypeError: If ``spec`` is neither a ``Serdes`` nor a pair of functions.
    """
    if spec is None:
        return None
    if isinstance(spec, tuple):
        if len(spec) == 2 and callable(spec[0]) and callable(spec[1]):
            return FunctionSerdes(spec[0], spec[1])
    elif isinstance(spec, Serdes):
        return spec
    raise TypeError("serdes must be an object with serialize/deserialize or a pair of functions")


@lru_cache(maxsize=512)
def _adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


def _refuse(value: Any) -> Any:
    refuse_secret(value)
    if isinstance(value, BaseModel):
        # model_dump would mask SecretStr/SecretBytes as "**********": refuse them instead.
        check_no_secrets(value)
        return value.model_dump(mode="json")
    raise PayloadError(f"cannot record a value of type {type(value).__name__}: not JSON")


def encode(value: Any, hint: Any = None) -> str:
    """Serializes ``value`` to compact plain JSON.

    Args:
        value: A JSON value, a pydantic model, or anything ``hint`` describes.
        hint: An optional type (from a return annotation) that pydantic can serialize.

    Returns:
        The JSON text.

    Raises:
        SecretSerializationError: If the value contains a ``Secret`` or pydantic secret.
        PayloadError: If the value is not serializable.
    """
    try:
        if hint is None or hint is Any:
            return json.dumps(value, separators=(",", ":"), allow_nan=False, default=_refuse)
        check_no_secrets(value)
        return _adapter(hint).dump_json(value).decode()
    except PayloadError:
        raise
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"cannot record value: {exc}") from exc


def decode(text: str | None, hint: Any = None) -> Any:
    """Deserializes JSON text produced by ``encode``.

    Raises:
        PayloadError: If the text does not match ``hint``.
    """
    if text is None:
        return None
    if hint is None or hint is Any:
        return _loads(text)
    try:
        return _adapter(hint).validate_json(text)
    except ValueError as exc:
        raise PayloadError(f"recorded value does not match {hint!r}: {exc}") from exc


def encode_value(value: Any, hint: Any = None, serdes: Serdes | None = None) -> str:
    """Serializes an operation's value: ``serdes``, else ``hint``, else tagged JSON.

    Example:
        >>> from datetime import date
        >>> encode_value({"due": date(2026, 1, 2)})
        '{"due":{"__durable__":"date","value":"2026-01-02"}}'

    Raises:
        SecretSerializationError: If the value contains a credential (in any container).
        PayloadError: If the value cannot be recorded (or ``serdes.serialize`` failed).
    """
    if serdes is not None:
        check_no_secrets(value)
        try:
            text = serdes.serialize(value)
        except Exception as exc:
            raise PayloadError(f"serdes could not serialize the value: {exc!r}") from exc
        if not isinstance(text, str):
            raise PayloadError(f"serdes.serialize returned {type(text).__name__}, not str")
        return text
    if hint is not None and hint is not Any:
        return encode(value, hint)
    return to_text(value)


def decode_value(text: str | None, hint: Any = None, serdes: Serdes | None = None) -> Any:
    """Deserializes what ``encode_value`` recorded (with the same ``hint`` and ``serdes``).

    Example:
        >>> decode_value('{"__durable__":"set","items":[1,2]}')
        {1, 2}

    Raises:
        PayloadError: If the text does not match ``hint``, names a class this process cannot
            resolve, or ``serdes.deserialize`` failed.
    """
    if text is None:
        return None
    if serdes is not None:
        try:
            return serdes.deserialize(text)
        except Exception as exc:
            raise PayloadError(f"serdes could not deserialize the value: {exc!r}") from exc
    if hint is not None and hint is not Any:
        return decode(text, hint)
    return from_tagged(_loads(text))


# What ``json.loads`` runs, under three Python layers (typeshed does not declare it).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _loads(text: str) -> Any:
    """``json.loads(text)``; for text without surrounding whitespace, its scanner directly.

    Replay decodes every recorded result that is not immutable on every replay, and the Python
    layers of ``json.loads`` cost more than decoding a small value.

    Raises:
        json.JSONDecodeError: As ``json.loads`` raises it (it is what reports the error).
    """
    if type(text) is str:
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            pass  # leading whitespace, or not JSON: json.loads says which
        else:
            if end == len(text):
                return value
    return json.loads(text)


def replay_value(entry: Entry, hint: Any = None, serdes: Serdes | None = None) -> Any:
    """Returns an operation's recorded result, or raises its recorded error.

    Raises:
        Exception: The recorded error, rebuilt as ``rebuild_error`` does.
        PayloadError: If the recorded value cannot be decoded.
    """
    if entry.type is EntryType.FAILED:
        raise rebuild_error(entry.error or ErrorInfo("StepError", "unknown error"))
    return decode_value(entry.value, hint, serdes)


class _TaggedJson:
    """The default serializer as a ``Serdes`` (to wrap or compose with your own)."""

    def serialize(self, value: Any) -> str:
        return encode_value(value)

    def deserialize(self, text: str) -> Any:
        return decode_value(text)


DEFAULT_SERDES: Serdes = _TaggedJson()
"""The default tagged-JSON serializer, as a ``Serdes``."""


def canonical_json(value: Any) -> str:
    """Returns normalised JSON (sorted keys, no spaces): equal values give equal text.

    Raises:
        SecretSerializationError: If the value contains a secret.
        PayloadError: If the value is not serializable.
    """
    if isinstance(value, BaseModel):
        check_no_secrets(value)
        value = value.model_dump(mode="json")
    try:
        return json.dumps(
            value, separators=(",", ":"), sort_keys=True, allow_nan=False, default=_refuse
        )
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"cannot canonicalise value: {exc}") from exc
