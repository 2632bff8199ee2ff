"""boto3 clients for the local moto server (its session key, fixed region, its endpoint)."""

from __future__ import annotations

from typing import Any

from durable_agents_local.store_key import key_for

# The secret access key: moto checks no signature, the access key id (the store's session
# key, ``store_key``) is what the store checks.
DUMMY_SECRET = "local"  # noqa: S105 - not a secret: moto checks no signature
DEFAULT_REGION = "us-east-1"


class LocalSession:
    """Makes boto3 clients that talk to the moto server at ``endpoint``.

    It has the ``client(name)`` method ``build_runtime`` and ``provision`` expect from a
    session, so the runtime's own wiring is reused unchanged.

    Args:
        endpoint: The moto server's URL, e.g. ``http://127.0.0.1:5010``.
        region: The region to sign for.
        fail_fast: One attempt and short timeouts (for the CLI: a stopped server is reported
            at once instead of after botocore's retries).
        store_key: The store's session key (the access key id its clients must use); None:
            found with ``store_key.key_for`` (``DURABLE_AGENTS_STORE_KEY``, else the key file
            of the endpoint's port).

    Raises:
        StoreKeyMissingError: If no key is given and none is found.
    """

    def __init__(
        self,
        endpoint: str,
        region: str = DEFAULT_REGION,
        *,
        fail_fast: bool = False,
        store_key: str | None = None,
    ):
        import boto3  # noqa: PLC0415 - keep boto3 out of module import time
        from botocore.config import Config  # noqa: PLC0415

        self.endpoint = endpoint
        self.region = region
        self.store_key = store_key or key_for(endpoint)
        self._session = boto3.session.Session(
            aws_access_key_id=self.store_key,
            aws_secret_access_key=DUMMY_SECRET,
            region_name=region,
        )
        self._config = (
            Config(
                retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=2, read_timeout=10
            )
            if fail_fast
            else Config(retries={"max_attempts": 3, "mode": "standard"})
        )

    def client(self, service_name: str) -> Any:
        """Returns a new client for ``service_name`` on the moto endpoint."""
        return self._session.client(
            service_name,
            endpoint_url=self.endpoint,
            config=self._config,  # type: ignore[call-overload]
        )
