"""Serialization of recorded values and errors.

Every value the journal records goes through ``encode``/``decode``, and the first execution
returns ``decode(encode(value))`` — exactly what a replay will return — so a fresh run and a
resumed run cannot behave differently.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr, TypeAdapter

from durable_agents.credentials import Secret
from durable_agents.errors import PayloadError, SecretSerializationError, StepError
from durable_agents.models import ErrorInfo
from durable_agents.scrub import scrub, scrub_value

_SECRET_TYPES = (Secret, SecretStr, SecretBytes)


@lru_cache(maxsize=512)
def _adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


def _refuse(value: Any) -> Any:
    if isinstance(value, _SECRET_TYPES):
        raise SecretSerializationError(
            "refusing to record a secret: credentials are minted at execution time, "
            "never stored in the journal"
        )
    if isinstance(value, BaseModel):
        # model_dump would mask SecretStr/SecretBytes as "**********": refuse them instead.
        _check_no_secrets(value)
        return value.model_dump(mode="json")
    raise PayloadError(f"cannot record a value of type {type(value).__name__}: not JSON")


def _check_no_secrets(value: Any) -> None:
    if isinstance(value, _SECRET_TYPES):
        _refuse(value)
    elif isinstance(value, BaseModel):
        for item in value.__dict__.values():
            _check_no_secrets(item)
    elif isinstance(value, dict):
        for item in value.values():
            _check_no_secrets(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _check_no_secrets(item)


def encode(value: Any, hint: Any = None) -> str:
    """Serializes ``value`` to compact JSON.

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
        _check_no_secrets(value)
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
        return json.loads(text)
    try:
        return _adapter(hint).validate_json(text)
    except ValueError as exc:
        raise PayloadError(f"recorded value does not match {hint!r}: {exc}") from exc


def canonical_json(value: Any) -> str:
    """Returns normalised JSON (sorted keys, no spaces): equal values give equal text.

    Raises:
        SecretSerializationError: If the value contains a secret.
        PayloadError: If the value is not serializable.
    """
    if isinstance(value, BaseModel):
        _check_no_secrets(value)
        value = value.model_dump(mode="json")
    try:
        return json.dumps(
            value, separators=(",", ":"), sort_keys=True, allow_nan=False, default=_refuse
        )
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"cannot canonicalise value: {exc}") from exc


def error_info(exc: BaseException) -> ErrorInfo:
    """Describes an exception for the journal (type, module, message; no pickling)."""
    # Messages are scrubbed of revealed secrets: "auth failed for sk-live-…" is recorded masked.
    if isinstance(exc, StepError):
        return ErrorInfo(type=exc.error_type, message=scrub(exc.message), module="")
    cls = type(exc)
    fields = getattr(exc, "recorded_fields", ())
    data = scrub_value({name: getattr(exc, name, None) for name in fields}) or None
    return ErrorInfo(
        type=cls.__qualname__, message=scrub(str(exc)), module=cls.__module__, data=data
    )


def rebuild_error(info: ErrorInfo) -> Exception:
    """Rebuilds a recorded exception with the same type and message.

    Only classes already imported in this process are used (nothing is imported from what the
    journal says). A class that cannot be rebuilt becomes a ``StepError`` carrying the type name.
    """
    cls = _resolve_exception_class(info.module, info.type)
    fields: tuple[str, ...] = getattr(cls, "recorded_fields", ())
    if cls is not None and info.data and fields:
        exc = cls.__new__(cls)
        Exception.__init__(exc, info.message)
        for name in fields:
            setattr(exc, name, info.data.get(name))
        return exc
    if cls is not None:
        try:
            exc = cls(info.message)
            if str(exc) == info.message:
                return exc
        except Exception:  # noqa: S110 - a constructor with other arguments; fall through
            pass
        try:
            exc = cls.__new__(cls)
            Exception.__init__(exc, info.message)
            if str(exc) == info.message:
                return exc
        except Exception:  # noqa: S110 - not rebuildable: StepError below
            pass
    return StepError(info.type, info.message)


def _resolve_exception_class(module: str, qualname: str) -> type[Exception] | None:
    mod = sys.modules.get(module or "builtins")
    if mod is None:
        return None
    obj: Any = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    if isinstance(obj, type) and issubclass(obj, Exception):
        return obj
    return None
