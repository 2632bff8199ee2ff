"""What a handler makes on first use instead of at init: the Tracer, rarely used clients.

A cold start's init is the handler module's import (``docs/benchmarks.md``, "Cold start").
Making Powertools' ``Tracer`` imports the X-Ray SDK, whose recorder makes a botocore session
and an ``xray`` client as it loads; a boto3 client loads its service model. Neither is needed
before the first invocation, and some clients (S3 for spilled payloads, ``bedrock-runtime``
for models that are not scripted) are not needed by most invocations at all. Each object here
stands in for the real one and makes it the first time something asks it for an attribute;
after that every attribute is the real object's.

Measured side by side on Python 3.13 (``docs/benchmarks.md``, "Cold start": ``python
scripts/bench_cold_start.py --python <3.13> --instructions --against <the tree without it>``):
the StepRunner's import + init went from 3.18x to 1.79x a bare ``import boto3`` in
instructions (the Tracer's X-Ray SDK moved to the first invocation), and the first
invocation's set-up of a runtime that spills nothing and calls no Bedrock model lost 209
million instructions (665 to 456 for the Api's), 6-9% of init plus set-up.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast, overload

from aws_lambda_powertools import Tracer

_Handler = TypeVar("_Handler", bound=Callable[..., Any])
# One lock for every deferred object: a boto3 session must not make two clients at once.
# Re-entrant, so making one object may use another.
_MAKING = threading.RLock()


class DeferredClient:
    """A boto3 client made by ``make`` the first time one of its attributes is read.

    Args:
        make: Makes the client (``lambda: session.client("s3")``); called once.
    """

    def __init__(self, make: Callable[[], Any]):
        self._make: Callable[[], Any] | None = make
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The client, made now if it was not yet.

        Raises:
            Exception: Whatever making it raises (it is tried again on the next use).
        """
        if self._make is not None:
            with _MAKING:
                if self._make is not None:
                    self._client = self._make()
                    self._make = None
        return self._client

    def __getattr__(self, name: str) -> Any:
        if name in ("_make", "_client"):  # not set yet (a copy): never recurse
            raise AttributeError(name)
        return getattr(self.client, name)


class DeferredTracer:
    """Powertools' ``Tracer``, made the first time one of its attributes is read.

    ``capture_lambda_handler`` is the Tracer's, applied at the handler's first invocation, so
    decorating a handler makes no Tracer either.

    Args:
        **options: The ``Tracer``'s arguments (``service``, ``disabled``, ``auto_patch``...).
    """

    def __init__(self, **options: Any):
        self._options = options
        self._tracer: Tracer | None = None

    @property
    def tracer(self) -> Tracer:
        """The Tracer, made now if it was not yet (the X-Ray SDK is imported then).

        Raises:
            Exception: Whatever making it raises (it is tried again on the next use).
        """
        if self._tracer is None:
            with _MAKING:
                if self._tracer is None:
                    self._tracer = Tracer(**self._options)
        return self._tracer

    def __getattr__(self, name: str) -> Any:
        if name in ("_options", "_tracer"):  # not set yet (a copy): never recurse
            raise AttributeError(name)
        return getattr(self.tracer, name)

    @overload
    def capture_lambda_handler(
        self,
        lambda_handler: _Handler,
        capture_response: bool | None = None,
        capture_error: bool | None = None,
    ) -> _Handler: ...

    @overload
    def capture_lambda_handler(
        self,
        lambda_handler: None = None,
        capture_response: bool | None = None,
        capture_error: bool | None = None,
    ) -> Callable[[_Handler], _Handler]: ...

    def capture_lambda_handler(
        self,
        lambda_handler: _Handler | None = None,
        capture_response: bool | None = None,
        capture_error: bool | None = None,
    ) -> _Handler | Callable[[_Handler], _Handler]:
        """``Tracer.capture_lambda_handler``, with the Tracer made at the first invocation."""
        if lambda_handler is None:
            return functools.partial(
                self.capture_lambda_handler,
                capture_response=capture_response,
                capture_error=capture_error,
            )
        handler = lambda_handler
        traced: list[Callable[..., Any]] = []

        @functools.wraps(handler)
        def wrapper(event: Any, context: Any) -> Any:
            if not traced:
                traced.append(
                    self.tracer.capture_lambda_handler(
                        handler, capture_response=capture_response, capture_error=capture_error
                    )
                )
            return traced[0](event, context)

        return cast(_Handler, wrapper)

    @overload
    def capture_method(
        self,
        method: _Handler,
        capture_response: bool | None = None,
        capture_error: bool | None = None,
    ) -> _Handler: ...

    @overload
    def capture_method(
        self,
        method: None = None,
        capture_response: bool | None = None,
        capture_error: bool | None = None,
    ) -> Callable[[_Handler], _Handler]: ...

    def capture_method(
        self,
        method: _Handler | None = None,
        capture_response: bool | None = None,
        capture_error: bool | None = None,
    ) -> _Handler | Callable[[_Handler], _Handler]:
        """``Tracer.capture_method``, with the Tracer made at the method's first call.

        A plain function is wrapped here and captured by the real Tracer on its first call,
        so decorating routes at import makes no Tracer. Coroutines, generators and context
        managers are captured by the Tracer at once (it wraps each kind its own way), which
        makes it at import: none of the handlers has one.
        """
        if method is None:
            return functools.partial(
                self.capture_method,
                capture_response=capture_response,
                capture_error=capture_error,
            )
        if not inspect.isfunction(method) or (
            inspect.iscoroutinefunction(method)
            or inspect.isgeneratorfunction(method)
            or inspect.isasyncgenfunction(method)
            # contextlib.contextmanager: a wrapper of a generator function (as Powertools tells)
            or inspect.isgeneratorfunction(getattr(method, "__wrapped__", None))
        ):
            return self.tracer.capture_method(
                capture_response=capture_response, capture_error=capture_error
            )(method)
        function = method
        traced: list[Callable[..., Any]] = []

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not traced:
                traced.append(
                    self.tracer.capture_method(
                        capture_response=capture_response, capture_error=capture_error
                    )(function)
                )
            return traced[0](*args, **kwargs)

        return cast(_Handler, wrapper)
