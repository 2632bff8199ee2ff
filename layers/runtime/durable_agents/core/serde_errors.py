"""Recording exceptions and rebuilding them, on the first run and on replay alike.

An exception is recorded as its type, module and (scrubbed) message, plus its state: ``args``
and the instance ``__dict__``, each through the tagged serializer of
``durable_agents.core.serde_values``. It is rebuilt without calling ``__init__`` (whose signature is
anybody's guess: botocore's ``ClientError(error_response, operation_name)``), by setting
``args`` and the attributes back, so ``except ClientError as e: e.response["Error"]["Code"]``
works on the first run and on every replay. The step operations raise the rebuilt error on the
first run too, so both see the same thing.

Only classes already importable in this process are used (registered with ``register_type``,
or reachable from ``sys.modules``; nothing is imported from what the journal says). An error
whose class cannot be resolved or rebuilt arrives as ``StepError`` with the original type name,
message and attributes. Attributes the serializer cannot record (an open connection, a
credential) are left out and named in the record (``StepError.attributes`` does not have them
either). Messages, arguments and attributes are scrubbed of revealed secrets.

Runtime errors that declare ``recorded_fields`` keep the format journals already hold.

A typed wrapper (``WrapperError``: ``ConditionCheckFailedError``, ``CallbackFailedError``,
``BatchFailedError``) is recorded as the error it wraps, its own type and fields under
``WRAPPER_KEY`` in ``data``: the journal, the Api, the console and the CLI show what happened,
and a replay raises the wrapper again with the wrapped error rebuilt as its ``__cause__``.

The traceback is recorded too (``durable_agents.core.tracebacks``: scrubbed, bounded), and the
rebuilt error carries it back as ``recorded_traceback`` — the same text on the first run and on
every replay. It is never one of the recorded attributes.
"""

from __future__ import annotations

import json
from typing import Any

from durable_agents.core.models import ErrorInfo
from durable_agents.core.scrub import MASK, scrub, scrub_value
from durable_agents.core.serde_values import from_tagged, resolve_class, to_text
from durable_agents.core.tracebacks import ATTRIBUTE as TRACEBACK_ATTRIBUTE
from durable_agents.core.tracebacks import attach, recorded_traceback
from durable_agents.errors import PayloadError, SecretSerializationError, StepError, WrapperError

STATE_KEY = "__durable_exception__"
"""The ``ErrorInfo.data`` key holding a rebuildable exception's ``args`` and attributes."""

WRAPPER_KEY = "__durable_wrapper__"
"""The ``ErrorInfo.data`` key holding the typed wrapper (``type``, ``module``, ``fields``) of an
error recorded as the one it wraps."""


def error_info(exc: BaseException) -> ErrorInfo:
    """Describes an exception for the journal (type, module, message, state and traceback).

    Nothing is pickled. The traceback is made here, once, from ``exc``'s frames (and the
    recorded traceback of an error it was re-raised from), scrubbed and bounded.
    """
    # Messages are scrubbed of revealed secrets: "auth failed for sk-live-…" is recorded masked.
    story = recorded_traceback(exc)
    if isinstance(exc, WrapperError) and exc.wrapped is not None:
        return _wrapper_info(exc, exc.wrapped, story)
    if isinstance(exc, StepError):
        return ErrorInfo(
            type=exc.original_type,
            message=scrub(exc.message),
            module=exc.module,
            data=scrub_value(exc.recorded_data) or None,
            traceback=story,
        )
    cls = type(exc)
    message = scrub(_text(exc))
    fields: tuple[str, ...] = getattr(exc, "recorded_fields", ())
    if fields:
        data = {name: _field(getattr(exc, name, None)) for name in fields}
        return ErrorInfo(
            cls.__qualname__, message, cls.__module__, scrub_value(data) or None, story
        )
    return ErrorInfo(cls.__qualname__, message, cls.__module__, {STATE_KEY: _state(exc)}, story)


def _wrapper_info(exc: WrapperError, wrapped: BaseException, story: str | None) -> ErrorInfo:
    """The wrapped error's record, with the wrapper's type and fields beside it."""
    inner = error_info(wrapped)
    cls = type(exc)
    fields = {name: _field(getattr(exc, name, None)) for name in exc.recorded_fields}
    data = dict(inner.data or {})
    wrapper: dict[str, Any] = {
        "type": cls.__qualname__,
        "module": cls.__module__,
        "fields": scrub_value(fields),
    }
    nested = data.pop(WRAPPER_KEY, None)
    if nested is not None:  # a wrapper of a wrapper (a branch's failed condition): kept whole
        wrapper["wrapped"] = nested
    data[WRAPPER_KEY] = wrapper
    # The wrapper's story tells the wrapped error's too (it was raised from it).
    return ErrorInfo(inner.type, inner.message, inner.module, data, story or inner.traceback)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not stop the failure from being recorded
        return f"<{type(exc).__name__} whose message could not be read>"


def _recordable(value: Any) -> Any:
    """The tagged tree of ``value``; raises PayloadError if it has none (NaN, a socket, …)."""
    # The text is made to refuse NaN, infinity and cycles here, not in the journal later.
    return json.loads(to_text(value))


def _field(value: Any) -> Any:
    try:
        return _recordable(value)
    except SecretSerializationError:
        return MASK  # a credential is never recorded, not even as its repr
    except PayloadError:
        return repr(value)  # what the serializer cannot say is shown as text


def _state(exc: BaseException) -> dict[str, Any]:
    dropped: list[str] = []
    try:
        args: Any = _recordable(list(exc.args))
    except PayloadError:
        args = [_text(exc)]  # the message still reads the same
        dropped.append("args")
    attrs: dict[str, Any] = {}
    for name, value in vars(exc).items() if hasattr(exc, "__dict__") else ():
        if name == TRACEBACK_ATTRIBUTE:
            continue  # the record's own ``traceback`` holds it (a replay attaches it again)
        try:
            attrs[name] = _recordable(value)
        except PayloadError:
            dropped.append(name)
    state: dict[str, Any] = {"args": args, "attrs": attrs}
    if isinstance(exc, OSError) and (exc.filename is not None or exc.filename2 is not None):
        # Not in args: OSError keeps file names in slots its constructor fills.
        try:
            state["os"] = _recordable([exc.errno, exc.strerror, exc.filename, None, exc.filename2])
        except PayloadError:
            dropped.append("filename")
    if dropped:
        state["dropped"] = dropped
    scrubbed: dict[str, Any] = scrub_value(state)
    return scrubbed


def rebuild_error(info: ErrorInfo) -> Exception:
    """Rebuilds a recorded exception: the same type, message, ``args`` and attributes.

    Returns:
        The rebuilt exception, or a ``StepError`` (original type name, message, attributes)
        when its class is not available in this process or cannot be rebuilt. Either carries
        the recorded traceback text as ``recorded_traceback`` (``None`` if none was recorded).
    """
    exc = _rebuild(info)
    attach(exc, info.traceback)
    return exc


def _rebuild(info: ErrorInfo) -> Exception:
    cls = _resolve_exception_class(info.module, info.type)
    data = info.data if isinstance(info.data, dict) else {}
    wrapper = data.get(WRAPPER_KEY)
    if isinstance(wrapper, dict):
        return _rebuild_wrapper(info, data, wrapper)
    state = data.get(STATE_KEY)
    if isinstance(state, dict):
        return _rebuild_state(cls, info, state)
    fields: tuple[str, ...] = getattr(cls, "recorded_fields", ())
    if cls is not None and data and fields:
        exc = cls.__new__(cls)
        Exception.__init__(exc, info.message)
        for name in fields:
            setattr(exc, name, _lenient(data.get(name)))
        return exc
    if cls is not None:  # recorded before exception state was recorded: the message only
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
    return _unrebuildable(info, {})


def _rebuild_wrapper(info: ErrorInfo, data: dict[str, Any], wrapper: dict[str, Any]) -> Exception:
    """The typed wrapper again, its wrapped error rebuilt as ``__cause__`` and ``wrapped``.

    The wrapped error alone if the wrapper's class is not a ``WrapperError`` here (nothing but
    the runtime's own wrappers is built from what a record names).
    """
    rest = {key: value for key, value in data.items() if key != WRAPPER_KEY}
    if isinstance(wrapper.get("wrapped"), dict):
        rest[WRAPPER_KEY] = wrapper["wrapped"]  # the wrapped error is a wrapper itself
    inner = rebuild_error(
        ErrorInfo(info.type, info.message, info.module, rest or None, info.traceback)
    )
    cls = resolve_class(f"{wrapper.get('module')}:{wrapper.get('type')}")
    if not (isinstance(cls, type) and issubclass(cls, WrapperError)):
        return inner
    exc = cls.__new__(cls)
    Exception.__init__(exc, info.message)
    fields = wrapper.get("fields")
    recorded = fields if isinstance(fields, dict) else {}
    for name in cls.recorded_fields:
        setattr(exc, name, _lenient(recorded.get(name)))
    exc.wrapped = inner
    exc.__cause__ = inner
    return exc


def _rebuild_state(
    cls: type[Exception] | None, info: ErrorInfo, state: dict[str, Any]
) -> Exception:
    recorded = state.get("attrs")
    raw_attrs: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    if cls is None:
        return _unrebuildable(info, raw_attrs)
    try:
        args = tuple(from_tagged(state.get("args", [info.message])))
        attrs = {name: from_tagged(tree) for name, tree in raw_attrs.items()}
    except PayloadError:  # an attribute's own class is not available here
        return _unrebuildable(info, raw_attrs)
    try:
        os_args = from_tagged(state["os"]) if isinstance(state.get("os"), list) else None
        try:
            # OSError and friends read their args (and file names) here, not in __init__.
            exc = cls.__new__(cls, *(os_args or args))
        except TypeError:
            exc = cls.__new__(cls)
        exc.args = args
        if attrs:
            exc.__dict__.update(attrs)
    except Exception:  # a class that refuses to be made this way (no __dict__, odd __new__)
        return _unrebuildable(info, raw_attrs)
    return exc


def _unrebuildable(info: ErrorInfo, raw_attrs: dict[str, Any]) -> StepError:
    attributes = {name: _lenient(tree) for name, tree in raw_attrs.items()}
    return StepError(
        info.type,
        info.message,
        module=info.module,
        attributes=attributes,
        recorded_data=info.data,
    )


def _lenient(tree: Any) -> Any:
    """The decoded value, or the recorded tree itself if its classes are not available."""
    try:
        return from_tagged(tree)
    except PayloadError:
        return json.loads(json.dumps(tree))


def _resolve_exception_class(module: str, qualname: str) -> type[Exception] | None:
    cls = resolve_class(f"{module or 'builtins'}:{qualname}")
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls
    return None
