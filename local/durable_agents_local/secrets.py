"""Local mode's Secrets Manager: every ``AWS::SecretsManager::Secret`` of the template in moto.

On AWS, CloudFormation generates each secret's value (``GenerateSecretString``). Locally each
secret is created once in moto with a random value of the declared length, under the
resource's local name, so ``!Ref`` resolves (Secrets Manager accepts the name or the ARN as
``SecretId``) and the Api reads its approval link key exactly as it does on AWS.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from durable_agents_local.functions import local_name, provisioned

SECRET_TYPE = "AWS::SecretsManager::Secret"  # noqa: S105 - a resource type, not a secret
DEFAULT_LENGTH = 64


def _random_value(properties: Mapping[str, Any]) -> str:
    """A random value as ``GenerateSecretString`` would make it (letters and digits)."""
    generate = properties.get("GenerateSecretString") or {}
    try:
        length = int(generate.get("PasswordLength", DEFAULT_LENGTH))
    except (TypeError, ValueError):
        length = DEFAULT_LENGTH
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(max(length, 32)))


def random_value(properties: Mapping[str, Any]) -> str:
    """A new value for a secret declared with ``properties`` (its ``SecretString`` if any)."""
    value = properties.get("SecretString")
    return value if isinstance(value, str) else _random_value(properties)


def create_secrets(
    template: Mapping[str, Any],
    clients: Any,
    value_for: Callable[[str, Mapping[str, Any]], str] | None = None,
) -> dict[str, str]:
    """Creates every Secrets Manager secret of the template in moto (idempotent).

    An existing secret keeps its value, so links minted before a worker restart stay valid.
    A secret with a ``SecretString`` in the template gets that value (templates of this
    project never hard-code one).

    Args:
        template: The parsed template.
        clients: Where to reach moto: anything with ``client(service_name)`` (``LocalSession``,
            a boto3 session) or with a ``secretsmanager`` client attribute (``provision.Clients``).
        value_for: The value of a secret moto does not hold yet, by logical id and properties
            (default ``random_value``): the embedded store's, which keeps the values itself.

    Returns:
        ``{logical_id: secret ARN}`` — what ``!Ref <logical_id>`` resolves to.

    Raises:
        ClientError: For errors other than "already exists".
    """
    logical_ids = provisioned(template, SECRET_TYPE)
    if not logical_ids:
        return {}
    client = getattr(clients, "secretsmanager", None) or clients.client("secretsmanager")
    arns: dict[str, str] = {}
    for logical_id in logical_ids:
        properties = (template["Resources"][logical_id].get("Properties")) or {}
        name = local_name(logical_id)
        value = (value_for or (lambda _, props: random_value(props)))(logical_id, properties)
        try:
            created = client.create_secret(
                Name=name,
                Description=str(properties.get("Description", logical_id)),
                SecretString=value,
            )
            arns[logical_id] = str(created["ARN"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceExistsException":
                raise
            arns[logical_id] = str(client.describe_secret(SecretId=name)["ARN"])
    return arns
