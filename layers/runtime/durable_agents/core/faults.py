"""Telling the protocol's own conflicts from infrastructure failures on AWS clients.

A conditional write that loses is how the protocol works (two writers, one winner). Everything
else a client raises — throttling after the SDK's retries, a ``TransactionConflict``, a 500, a
timeout, a dropped connection — is the platform's trouble, not the agent's: it becomes an
``InfrastructureError`` that aborts the invocation (agent code cannot catch it) so that the
platform delivers the event again. Nothing about such a failure is ever recorded as an outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from durable_agents.errors import InfrastructureError

# Errors that say something definite about the request itself; retrying the same request gives
# the same answer, so they stay ordinary exceptions for the caller to translate.
_DEFINITE_CODES = frozenset(
    {
        "ConditionalCheckFailedException",
        "ValidationException",
        "NoSuchKey",
        "ResourceNotFoundException",
        "AccessDeniedException",
    }
)


def error_code(exc: ClientError) -> str:
    """The service's error code of a ``ClientError`` (empty if there is none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def cancellation_reasons(exc: ClientError) -> list[dict[str, Any]]:
    """The per-item reasons of a cancelled ``TransactWriteItems`` (empty if none)."""
    reasons: Any = exc.response.get("CancellationReasons", [])
    return list(reasons)


def is_protocol_error(exc: ClientError) -> bool:
    """Whether ``exc`` is a definite answer about the request (a lost condition, say).

    A cancelled transaction is a protocol answer only when one of its items failed its
    condition; cancelled for ``TransactionConflict`` or ``ThrottlingError`` alone, it is the
    platform's trouble and the same request may well succeed when retried.
    """
    code = error_code(exc)
    if code == "TransactionCanceledException":
        return any(r.get("Code") == "ConditionalCheckFailed" for r in cancellation_reasons(exc))
    return code in _DEFINITE_CODES


def as_infrastructure_error(operation: str, exc: Exception) -> InfrastructureError:
    """Builds the ``InfrastructureError`` for a failed client call."""
    if isinstance(exc, ClientError):
        code = error_code(exc) or "ClientError"
        reasons = [r.get("Code") for r in cancellation_reasons(exc) if r.get("Code")]
        detail = (
            f"reasons {reasons}"
            if reasons
            else str(exc.response.get("Error", {}).get("Message", ""))
        )
        return InfrastructureError(operation, code, detail)
    return InfrastructureError(operation, type(exc).__name__, str(exc))


class GuardedClient:
    """Wraps a boto3 client: infrastructure failures become ``InfrastructureError``.

    Protocol answers (``is_protocol_error``) pass through unchanged as ``ClientError`` so the
    journal can translate them into its own conflict errors.

    Args:
        client: The boto3 client (its ``meta``, waiters and so on stay reachable).
    """

    __slots__ = ("_client",)

    def __init__(self, client: Any):
        self._client = client

    @property
    def raw(self) -> Any:
        """The wrapped client."""
        return self._client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_") or name == "meta" or not callable(attr):
            return attr
        return _guard(name, attr)


def _guard(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except ClientError as exc:
            if is_protocol_error(exc):
                raise
            raise as_infrastructure_error(name, exc) from exc
        except BotoCoreError as exc:  # timeouts, dropped connections, endpoint errors
            raise as_infrastructure_error(name, exc) from exc

    return guarded
