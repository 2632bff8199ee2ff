"""The journal's records as JSON text, for the SQLite journal (``journal.sqlite``).

Run headers, entries, side-effect and wait records are frozen dataclasses; each is kept as
one JSON object of its fields: enums by value, an ``ErrorInfo`` by its ``to_dict``, a
``frozenset`` as a sorted list, everything else (text, numbers, None, JSON-ready dicts) as it
is. Decoding rebuilds an equal record. A field this code does not know (a record written by
a newer version) is refused rather than dropped, so that a rewrite cannot lose it.

>>> from durable_agents.core.models import WaitRecord, WaitStatus
>>> record = WaitRecord("apr-1", "approval", "run-a", "00000001", "run-a:ask:1", "ask",
...                     WaitStatus.PENDING, 1_000, 1_000)
>>> WAITS.decode(WAITS.encode(record)) == record
True
>>> WAITS.decode('{"wait_id": "apr-1", "colour": "red"}')
Traceback (most recent call last):
...
ValueError: a stored WaitRecord has fields this code does not know: colour
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Generic, TypeVar

from durable_agents.core.models import (
    EffectStatus,
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
    RunHeader,
    RunStatus,
    SideEffectRecord,
    WaitRecord,
    WaitStatus,
)

R = TypeVar("R")

_Convert = Callable[[Any], Any]


def _enum(kind: type[Enum]) -> tuple[_Convert, _Convert]:
    return (lambda value: value.value), kind


def _optional(encode: _Convert, decode: _Convert) -> tuple[_Convert, _Convert]:
    return (
        lambda value: None if value is None else encode(value),
        lambda value: None if value is None else decode(value),
    )


_ERROR = _optional(ErrorInfo.to_dict, ErrorInfo.from_dict)
_NAMES: tuple[_Convert, _Convert] = (sorted, frozenset)


class RecordCodec(Generic[R]):
    """One record type <-> JSON text.

    Args:
        kind: The dataclass.
        special: ``field -> (encode, decode)`` for the fields JSON cannot hold as they are.
    """

    def __init__(self, kind: type[R], special: Mapping[str, tuple[_Convert, _Convert]]):
        self._kind = kind
        self._names = tuple(f.name for f in dataclasses.fields(kind))  # type: ignore[arg-type]
        self._known = frozenset(self._names)
        self._special = dict(special)
        unknown = set(self._special) - self._known
        if unknown:
            raise ValueError(f"{kind.__name__} has no fields {sorted(unknown)}")

    def encode(self, record: R) -> str:
        """The record as compact JSON text (every field)."""
        fields: dict[str, Any] = {}
        special = self._special
        for name in self._names:
            value = getattr(record, name)
            convert = special.get(name)
            fields[name] = value if convert is None else convert[0](value)
        # ASCII (``\uXXXX`` escapes): a lone surrogate, which Python text may hold, cannot be
        # bound to SQLite as UTF-8, and an escape of it can.
        return json.dumps(fields, separators=(",", ":"))

    def decode(self, text: str) -> R:
        """The record ``encode`` wrote.

        Raises:
            ValueError: If the text is not such a record: not a JSON object, a field this
                code does not know, or a required field missing.
        """
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ValueError(f"a stored {self._kind.__name__} is not a JSON object")
        unknown = fields.keys() - self._known
        if unknown:
            raise ValueError(
                f"a stored {self._kind.__name__} has fields this code does not know: "
                + ", ".join(sorted(unknown))
            )
        for name, (_, decode) in self._special.items():
            if name in fields:
                fields[name] = decode(fields[name])
        try:
            return self._kind(**fields)
        except TypeError as exc:  # a required field is missing
            raise ValueError(f"a stored {self._kind.__name__} is incomplete: {exc}") from exc


HEADERS = RecordCodec(
    RunHeader,
    {"status": _enum(RunStatus), "error": _ERROR, "event_names": _NAMES},
)
ENTRIES = RecordCodec(Entry, {"kind": _enum(OpKind), "type": _enum(EntryType), "error": _ERROR})
EFFECTS = RecordCodec(SideEffectRecord, {"status": _enum(EffectStatus)})
WAITS = RecordCodec(WaitRecord, {"status": _enum(WaitStatus)})
