"""The default value serializer: tagged JSON for what plain JSON cannot say.

A recorded value is JSON text. Plain JSON values (``str``, ``int``, ``float``, ``bool``,
``None``, lists, dicts with string keys) are written exactly as ``json.dumps`` writes them, so
journals recorded before this serializer existed replay unchanged. Every other supported value
becomes a small object tagged with the key ``"__durable__"``::

    datetime   {"__durable__": "datetime", "value": "2026-01-02T03:04:05+01:00"}
    set        {"__durable__": "set", "items": [1, 2]}
    dataclass  {"__durable__": "dataclass", "class": "shop.models:Quote", "fields": {...}}

A dict that happens to hold the key ``"__durable__"`` (or has keys that are not strings) is
itself escaped as ``{"__durable__": "dict", "items": [[key, value], ...]}``, so nothing a user or
an external system sends can be mistaken for a tag.

Classes (enums, dataclasses, pydantic models, named tuples) are named ``module:qualname`` and
resolved on decode only among what this process already has: classes registered with
``register_type``, then modules already imported (``sys.modules``). Nothing is ever imported
because a journal names it. A class that cannot be resolved is a ``PayloadError`` that says how
to register it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
import threading
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any, TypeVar
from uuid import UUID
from zoneinfo import ZoneInfo

from pydantic import BaseModel, SecretBytes, SecretStr

from durable_agents._moved import current_class_path
from durable_agents.core.credentials import Secret
from durable_agents.errors import PayloadError, SecretSerializationError

TAG = "__durable__"
"""The key that marks a tagged value."""

_SECRET_TYPES = (Secret, SecretStr, SecretBytes)
_PLAIN = (str, int, float, bool, type(None))
_registry: dict[str, type] = {}
_lock = threading.Lock()

C = TypeVar("C", bound=type)


def register_type(cls: C) -> C:
    """Makes ``cls`` resolvable when recorded values are decoded (usable as a decorator).

    Only needed for classes that are not reachable as ``module.qualname`` from an imported
    module, such as classes defined inside a function; module-level classes of imported
    modules resolve by themselves.

    Example:
        >>> from dataclasses import dataclass
        >>> @register_type
        ... @dataclass
        ... class Point:
        ...     x: int
        >>> decode_tagged(json.loads(json.dumps(to_tagged(Point(1)))))
        Point(x=1)

    Returns:
        ``cls`` itself.
    """
    with _lock:
        _registry[class_path(cls)] = cls
    return cls


def class_path(cls: type) -> str:
    """The name a class is recorded under: ``module:qualname``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_class(path: str) -> type | None:
    """The registered or already-imported class named ``module:qualname`` (never imports)."""
    found = _registry.get(path)
    if found is not None:
        return found
    module, _, qualname = path.partition(":")
    # Recorded before a module or the class moved (0.2's layout): found where it lives now,
    # not through the old module's deprecated name for it.
    obj: Any = sys.modules.get(current_class_path(module, qualname)) or sys.modules.get(module)
    if obj is None or not qualname:
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, type) else None


def refuse_secret(value: Any) -> None:
    """Raises if ``value`` itself is a credential.

    Raises:
        SecretSerializationError: If it is a ``Secret``, ``SecretStr`` or ``SecretBytes``.
    """
    if isinstance(value, _SECRET_TYPES):
        raise SecretSerializationError(
            "refusing to record a secret: credentials are minted at execution time, "
            "never stored in the journal"
        )


def check_no_secrets(value: Any) -> None:
    """Walks containers, models and dataclasses and refuses any credential inside.

    Raises:
        SecretSerializationError: If a credential is found anywhere inside ``value``.
    """
    refuse_secret(value)
    if isinstance(value, BaseModel):
        items: Any = value.__dict__.values()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        items = value.values()
    elif isinstance(value, list | tuple | set | frozenset):
        items = value
    else:
        return
    for item in items:
        check_no_secrets(item)


def to_tagged(value: Any) -> Any:
    """Converts ``value`` to a JSON-ready tree (plain JSON values are returned as they are).

    Raises:
        SecretSerializationError: If the value holds a credential.
        PayloadError: If something inside it has no recorded form.
    """
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is list:
        return [to_tagged(item) for item in value]
    if kind is dict and all(type(k) is str for k in value) and TAG not in value:
        return {key: to_tagged(item) for key, item in value.items()}
    return _tag(value)


def _tag(value: Any) -> Any:
    refuse_secret(value)
    if isinstance(value, Enum):  # before int/str: IntEnum and StrEnum are ints and strs
        return {TAG: "enum", "class": class_path(type(value)), "value": to_tagged(value.value)}
    if isinstance(value, BaseModel):
        check_no_secrets(value)  # model_dump would mask secrets as "**********"
        try:
            dumped = json.loads(value.model_dump_json())
        except ValueError as exc:  # pydantic's own serialization errors
            raise PayloadError(f"cannot record {type(value).__name__}: {exc}") from exc
        return {TAG: "pydantic", "class": class_path(type(value)), "value": dumped}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: to_tagged(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {TAG: "dataclass", "class": class_path(type(value)), "fields": fields}
    if isinstance(value, datetime):
        out: dict[str, Any] = {TAG: "datetime", "value": value.isoformat()}
        if isinstance(value.tzinfo, ZoneInfo):
            out["zone"] = value.tzinfo.key  # an offset alone would lose daylight saving rules
        if value.fold:
            out["fold"] = 1
        return out
    if isinstance(value, time):
        return {TAG: "time", "value": value.isoformat()}
    if isinstance(value, date):
        return {TAG: "date", "value": value.isoformat()}
    if isinstance(value, timedelta):
        return {TAG: "timedelta", "value": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, Decimal):
        return {TAG: "decimal", "value": str(value)}
    if isinstance(value, UUID):
        return {TAG: "uuid", "value": str(value)}
    if isinstance(value, bytes | bytearray):
        name = "bytes" if isinstance(value, bytes) else "bytearray"
        return {TAG: name, "value": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        items = [to_tagged(item) for item in value]
        if hasattr(value, "_fields"):  # a named tuple keeps its class
            return {TAG: "namedtuple", "class": class_path(type(value)), "items": items}
        return {TAG: "tuple", "items": items}
    if isinstance(value, set | frozenset):
        # Sorted by their recorded form: iteration order changes from process to process.
        items = sorted((to_tagged(item) for item in value), key=_sort_key)
        return {TAG: "frozenset" if isinstance(value, frozenset) else "set", "items": items}
    if isinstance(value, dict):
        if all(type(k) is str for k in value) and TAG not in value:
            return {key: to_tagged(item) for key, item in value.items()}  # OrderedDict & co.
        return {TAG: "dict", "items": [[to_tagged(k), to_tagged(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [to_tagged(item) for item in value]
    if isinstance(value, str | int | float):  # subclasses: recorded as the plain value
        return value
    raise PayloadError(f"cannot record a value of type {type(value).__name__}")


def _sort_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, separators=(",", ":"))


def from_tagged(tree: Any) -> Any:
    """Rebuilds a value from the tree ``to_tagged`` made (after a JSON round trip).

    Raises:
        PayloadError: If a tag is unknown or a class cannot be resolved or rebuilt.
    """
    kind = type(tree)
    if kind is list:
        return [from_tagged(item) for item in tree]
    if kind is dict:
        if TAG in tree:
            return _untag(tree)
        return {key: from_tagged(item) for key, item in tree.items()}
    return tree


decode_tagged = from_tagged


def _untag(tree: dict[str, Any]) -> Any:
    tag = tree[TAG]
    try:
        if tag == "datetime":
            moment = datetime.fromisoformat(tree["value"])
            if "zone" in tree:
                moment = moment.replace(tzinfo=ZoneInfo(tree["zone"]))
            return moment.replace(fold=1) if tree.get("fold") else moment
        if tag == "date":
            return date.fromisoformat(tree["value"])
        if tag == "time":
            return time.fromisoformat(tree["value"])
        if tag == "timedelta":
            days, seconds, micro = tree["value"]
            return timedelta(days=days, seconds=seconds, microseconds=micro)
        if tag == "decimal":
            return Decimal(tree["value"])
        if tag == "uuid":
            return UUID(tree["value"])
        if tag in ("bytes", "bytearray"):
            raw = base64.b64decode(tree["value"], validate=True)
            return raw if tag == "bytes" else bytearray(raw)
        if tag in ("tuple", "set", "frozenset"):
            items = [from_tagged(item) for item in tree["items"]]
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "dict":
            return {_hashable(from_tagged(k)): from_tagged(v) for k, v in tree["items"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise PayloadError(f"recorded {tag} value is malformed: {exc}") from exc
    if tag in ("enum", "pydantic", "dataclass", "namedtuple"):
        return _rebuild_instance(tag, tree)
    raise PayloadError(f"recorded value has an unknown tag {tag!r}")


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


_KINDS: dict[str, Any] = {
    "enum": lambda cls: issubclass(cls, Enum),
    "pydantic": lambda cls: issubclass(cls, BaseModel),
    "dataclass": dataclasses.is_dataclass,
    "namedtuple": lambda cls: issubclass(cls, tuple) and hasattr(cls, "_fields"),
}


def _rebuild_instance(tag: str, tree: dict[str, Any]) -> Any:
    path = str(tree.get("class", ""))
    cls = resolve_class(path)
    if cls is None or not _KINDS[tag](cls):
        raise PayloadError(
            f"cannot rebuild a recorded {tag} of class {path!r}: no such class is imported in "
            "this process (nothing is imported because a journal names it). Import its module "
            "before the run replays, or register it with durable_agents.register_type"
        )
    try:
        if tag == "enum":
            return cls(from_tagged(tree["value"]))
        if tag == "pydantic":
            return cls.model_validate_json(json.dumps(tree["value"]))  # type: ignore[attr-defined]
        if tag == "namedtuple":
            return cls(*[from_tagged(item) for item in tree["items"]])
        # Restored field by field, without calling __init__ (nor __post_init__): the value is
        # exactly what was recorded, derived and init=False fields included.
        instance: Any = object.__new__(cls)
        for name, item in tree["fields"].items():
            object.__setattr__(instance, name, from_tagged(item))
        return instance
    except PayloadError:
        raise
    except Exception as exc:
        raise PayloadError(f"cannot rebuild a recorded {tag} of class {path!r}: {exc}") from exc


# One encoder for every value: ``json.dumps`` with any option builds a new one per call, and
# a step's result is encoded on every live step. It keeps no state between calls.
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dumps(tree: Any) -> str:
    """Compact JSON text of a tagged tree (what ``json.dumps`` writes for plain JSON).

    Raises:
        PayloadError: If the tree holds NaN or infinity.
    """
    try:
        return _COMPACT.encode(tree)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"cannot record value: {exc}") from exc


def to_text(value: Any) -> str:
    """``dumps(to_tagged(value))``: the recorded text of a value.

    Raises:
        SecretSerializationError: If the value holds a credential.
        PayloadError: If it has no recorded form, holds NaN, or refers to itself.
    """
    try:
        return dumps(to_tagged(value))
    except RecursionError as exc:
        # A value that contains itself (or is nested thousands deep) fails the same way on
        # every attempt: a PayloadError, never retried.
        raise PayloadError("cannot record a value that refers to itself") from exc
