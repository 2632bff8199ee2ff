"""Credentials are not state: a ``Secret`` can be used at execution time but never recorded.

The serializer refuses ``Secret`` (and pydantic's ``SecretStr``/``SecretBytes``) with
``SecretSerializationError``, so a credential cannot reach the journal, an event or a log line
through a recorded value. Short-lived credentials are minted at execution time instead (see
``CredentialProvider``) and handed to the code that needs them.
"""

from __future__ import annotations

from typing import Any, Protocol

from durable_agents.errors import SecretSerializationError
from durable_agents.scrub import remember


class Secret:
    """A credential value that refuses to be serialized, pickled or printed.

    Example:
        >>> token = Secret("sk-live-123")
        >>> token
        Secret('***')
        >>> token.reveal()
        'sk-live-123'
    """

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        """Returns the secret value. Call it only where the credential is used.

        The value is remembered (``durable_agents.scrub``), so that if it turns up in an
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
