"""Credentials minted per tool call on AWS: STS AssumeRole sessions and Secrets Manager values.

A tool declares what it needs; the runtime mints it right before the tool's ``fn``,
``lookup`` or ``compensate`` runs (after PREPARE is recorded) and hands it over in
``ToolCall.credentials``. Nothing minted is recorded: the values are ``Secret`` s, which the
serializer refuses, and whatever a tool reveals is masked in errors, logs and events.

Example:
    >>> from pydantic import BaseModel
    >>> from durable_agents.tools import ToolCall, ToolRegistry, tool
    >>> class Refund(BaseModel):
    ...     order: str
    >>> @tool(
    ...     name="refund",
    ...     credentials=[assume_role(env="PAYMENTS_ROLE_ARN"), secret("payments/api-key")],
    ...     registry=ToolRegistry(),
    ... )
    ... def refund(request: Refund, call: ToolCall) -> str:
    ...     session = boto3_session(call.credentials)  # the role's 15-minute session
    ...     api_key = call.credentials["payments/api-key"].reveal()
    ...     return request.order
    >>> [type(source).__name__ for source in refund.credentials]
    ['AssumeRoleCredentials', 'SecretsManagerCredentials']
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from durable_agents.core.credentials import CallScope, Secret
from durable_agents.errors import ConfigurationError

SESSION_SECONDS = 900  # STS's minimum: a leaked session is useless within 15 minutes
_NAME_UNSAFE = re.compile(r"[^\w+=,.@-]")  # what RoleSessionName allows
_TAG_UNSAFE = re.compile(r"[^\w.:/=+@ -]")  # what a session tag value allows


def session_name(scope: CallScope) -> str:
    """The RoleSessionName of a call: readable, unique per operation, at most 64 characters.

    CloudTrail shows it for every API call the tool makes, so it names the operation; a long
    operation id is shortened and keeps a hash of the full one, so two never collide.

    Example:
        >>> session_name(CallScope("pay", "run-1", "run-1:pay:1", 1))
        'da-run-1.pay.1'
    """
    readable = "da-" + _NAME_UNSAFE.sub("-", scope.operation_id.replace(":", "."))
    if len(readable) <= 64:
        return readable
    digest = hashlib.sha256(scope.operation_id.encode()).hexdigest()[:16]
    return f"{readable[:47]}-{digest}"


def _tag(value: str) -> str:
    return _TAG_UNSAFE.sub("-", value)[:256]


class AssumeRoleCredentials:
    """A 15-minute STS session of a role, tagged with the run and operation ids.

    Minted anew for every call (its session is tagged with that call's ids), never cached.
    ``ToolCall.credentials`` then holds ``<name>.access_key_id``, ``<name>.secret_access_key``
    and ``<name>.session_token``, each a ``Secret`` whose ``expires_at_ms`` is the session's end.

    Args:
        role_arn: The role to assume.
        env: Or the environment variable holding its ARN (read at mint time: the template
            passes the deployed role's ARN to the functions).
        name: The key prefix in ``ToolCall.credentials``.
        external_id: The ``ExternalId`` the role's trust policy requires, if any.
        client: A function returning the STS client (boto3's default client if omitted).

    Raises:
        ValueError: If neither or both of ``role_arn`` and ``env`` are given.
    """

    def __init__(
        self,
        role_arn: str | None = None,
        *,
        env: str | None = None,
        name: str = "aws",
        external_id: str | None = None,
        client: Callable[[], Any] | None = None,
    ):
        if (role_arn is None) == (env is None):
            raise ValueError("give the role's ARN or the environment variable holding it")
        self.role_arn = role_arn
        self.env = env
        self.name = name
        self.external_id = external_id
        self._client = client

    def resolve_role_arn(self) -> str:
        """The role's ARN (from the environment variable if declared so).

        Raises:
            ConfigurationError: If the variable is not set.
        """
        if self.role_arn is not None:
            return self.role_arn
        assert self.env is not None  # the constructor checks
        arn = os.environ.get(self.env)
        if not arn:
            raise ConfigurationError(f"environment variable {self.env} (a role ARN) is not set")
        return arn

    def mint(self, scope: CallScope) -> dict[str, Secret]:
        """Assumes the role for this call (``DurationSeconds=900``, tagged, named after it)."""
        import boto3  # noqa: PLC0415 - keep boto3 out of the import path of pure library use

        client = self._client() if self._client else boto3.client("sts")
        params: dict[str, Any] = {
            "RoleArn": self.resolve_role_arn(),
            "RoleSessionName": session_name(scope),
            "DurationSeconds": SESSION_SECONDS,
            "Tags": [
                {"Key": "run_id", "Value": _tag(scope.run_id)},
                {"Key": "operation_id", "Value": _tag(scope.operation_id)},
            ],
        }
        if self.external_id is not None:
            params["ExternalId"] = self.external_id
        issued = client.assume_role(**params)["Credentials"]
        expires = int(issued["Expiration"].timestamp() * 1000)
        return {
            f"{self.name}.access_key_id": Secret(issued["AccessKeyId"], expires_at_ms=expires),
            f"{self.name}.secret_access_key": Secret(
                issued["SecretAccessKey"], expires_at_ms=expires
            ),
            f"{self.name}.session_token": Secret(issued["SessionToken"], expires_at_ms=expires),
        }


class SecretsManagerCredentials:
    """A Secrets Manager value, read through Powertools' parameters utility with a short cache.

    The value is cached in this process for ``max_age_seconds`` (so a rotation is seen within
    that time) and handed over as a ``Secret`` under ``name``.

    Args:
        secret_id: The secret's name or ARN.
        name: The key in ``ToolCall.credentials`` (the secret id if omitted).
        max_age_seconds: How long a value read may be reused.
        provider: A Powertools ``SecretsProvider`` (one of this source's own if omitted).
    """

    def __init__(
        self,
        secret_id: str,
        *,
        name: str | None = None,
        max_age_seconds: int = 60,
        provider: Any = None,
    ):
        self.secret_id = secret_id
        self.name = name or secret_id
        self.max_age_seconds = max_age_seconds
        self._provider = provider

    def mint(self, scope: CallScope) -> dict[str, Secret]:
        """Reads the value (from the cache if read less than ``max_age_seconds`` ago)."""
        if self._provider is None:
            from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415

            self._provider = parameters.SecretsProvider()
        value = self._provider.get(self.secret_id, max_age=self.max_age_seconds)
        if isinstance(value, bytes):
            value = value.decode()
        return {self.name: Secret(str(value))}


def assume_role(
    role_arn: str | None = None,
    *,
    env: str | None = None,
    name: str = "aws",
    external_id: str | None = None,
) -> AssumeRoleCredentials:
    """Declares an STS session of a role for a tool (see ``AssumeRoleCredentials``)."""
    return AssumeRoleCredentials(role_arn, env=env, name=name, external_id=external_id)


def secret(
    secret_id: str, *, name: str | None = None, max_age_seconds: int = 60
) -> SecretsManagerCredentials:
    """Declares a Secrets Manager value for a tool (see ``SecretsManagerCredentials``)."""
    return SecretsManagerCredentials(secret_id, name=name, max_age_seconds=max_age_seconds)


def boto3_session(credentials: Mapping[str, Secret], name: str = "aws") -> Any:
    """A boto3 session on the role session minted under ``name`` (``assume_role``).

    Raises:
        KeyError: If no role session was minted under ``name``.
    """
    import boto3  # noqa: PLC0415

    return boto3.session.Session(
        aws_access_key_id=credentials[f"{name}.access_key_id"].reveal(),
        aws_secret_access_key=credentials[f"{name}.secret_access_key"].reveal(),
        aws_session_token=credentials[f"{name}.session_token"].reveal(),
    )
