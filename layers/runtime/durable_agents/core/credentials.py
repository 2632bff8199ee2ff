"""Credentials are not state: a ``Secret`` can be used at execution time but never recorded.

The serializer refuses ``Secret`` (and pydantic's ``SecretStr``/``SecretBytes``) with
``SecretSerializationError``, so a credential cannot reach the journal, an event or a log line
through a recorded value. Short-lived credentials are minted at execution time instead (see
``CredentialProvider``) and handed to the code that needs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from durable_agents.core.scrub import remember
from durable_agents.errors import DurableError, SecretSerializationError


class Secret:
    """A credential value that refuses to be serialized, pickled or printed.

    Example:
        >>> token = Secret("sk-live-123")
        >>> token
        Secret('***')
        >>> token.reveal()
        'sk-live-123'
    """

    __slots__ = ("_value", "expires_at_ms")

    def __init__(self, value: str, *, expires_at_ms: int | None = None):
        self._value = value
        # When a minted credential stops working (epoch ms); not secret, so readable as is.
        self.expires_at_ms = expires_at_ms

    def reveal(self) -> str:
        """Returns the secret value. Call it only where the credential is used.

        The value is remembered (``durable_agents.core.scrub``), so that if it turns up in an
        exception message it is masked in the journal, the logs and the events.
        """
        remember(self._value)
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise SecretSerializationError("a Secret cannot be pickled or checkpointed")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))


class CredentialProvider(Protocol):
    """Issues short-lived credentials at execution time (never stored with a checkpoint)."""

    def credentials_for(self, purpose: str) -> dict[str, Secret]:
        """Returns fresh credentials for ``purpose`` (for example a tool name)."""
        ...


@dataclass(frozen=True, slots=True)
class CallScope:
    """The tool call credentials are minted for (what a session is named and tagged with).

    Attributes:
        tool: The tool name.
        run_id: The run making the call.
        operation_id: The call's operation id.
        attempt: The call's attempt (credentials are minted for each one).
    """

    tool: str
    run_id: str
    operation_id: str
    attempt: int


class CredentialSource(Protocol):
    """One credential a tool declares (``@tool(credentials=[...])``), minted per tool call.

    See ``durable_agents.aws.credentials`` for STS AssumeRole and Secrets Manager sources.
    """

    def mint(self, scope: CallScope) -> dict[str, Secret]:
        """Returns fresh credentials for this call, keyed as the tool reads them.

        Raises:
            Exception: Anything; the runtime turns it into ``CredentialMintError``.
        """
        ...


class CredentialMintError(DurableError):
    """A tool call's credentials could not be minted: the tool was not called.

    Recorded on the call (not as an execution): the call is looked at again later, and counts
    as a failed attempt so that a permanent failure (a missing role) ends in ``max_attempts``.
    """

    recorded_fields = ("tool", "reason")

    def __init__(self, tool: str, reason: str):
        self.tool = tool
        self.reason = reason
        super().__init__(f"credentials for tool {tool!r} could not be minted: {reason}")
