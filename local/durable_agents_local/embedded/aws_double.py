"""What the handlers still ask AWS for, answered in this process: moto's mock, secrets kept.

With the embedded store the journal, memory, stream cache and bus are not AWS services any
more; what is left are the calls the handlers and tools make through boto3 themselves: Secrets
Manager (the approval-link key, the payments API key), and whatever an agent's own tools call.
Those go to moto's in-process mock (``mock_aws``), so local mode is one process: no moto
server to start, to keep a key for, or to find left running after a crash.

The mock keeps nothing across restarts, but a secret must: a link minted before a restart has
to verify after it. So each secret's value is kept in the embedded store's file (table
``local_secrets``, the first value written wins) and given to the mock at every start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from durable_agents_local.embedded.sqlite_files import connect, wrap_errors, write_transaction
from durable_agents_local.secrets import create_secrets, random_value

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS local_secrets (logical_id TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
# botocore sends a request to a configured endpoint instead of AWS's, and the mock answers
# only AWS's: a variable left in the shell would send the handlers' calls out of the process.
_ENDPOINT_PREFIX = "AWS_ENDPOINT_URL"


class InProcessAws:
    """moto's mock for this process, with the template's secrets (see the module docstring).

    Args:
        path: The embedded store's file (the secrets' values are kept there).
        region: The region clients are made for.

    Raises:
        InfrastructureError: If the store's file cannot be opened.
    """

    def __init__(self, path: Path, region: str):
        from moto import mock_aws  # noqa: PLC0415 - local mode only, and only this store

        self._region = region
        self._conn = connect(path, _SCHEMA)
        for name in [k for k in os.environ if k.startswith(_ENDPOINT_PREFIX)]:
            del os.environ[name]
        self._mock = mock_aws()
        self._mock.start()

    def _value(self, logical_id: str, properties: Mapping[str, Any]) -> str:
        """The secret's kept value; a new one is kept first (the first writer's wins)."""
        with wrap_errors("keep secret"), write_transaction(self._conn):
            self._conn.execute(
                "INSERT OR IGNORE INTO local_secrets (logical_id, value) VALUES (?, ?)",
                (logical_id, random_value(properties)),
            )
            row = self._conn.execute(
                "SELECT value FROM local_secrets WHERE logical_id = ?", (logical_id,)
            ).fetchone()
        return str(row[0])

    def create_secrets(self, template: Mapping[str, Any]) -> dict[str, str]:
        """Creates the template's secrets in the mock with their kept values.

        Returns:
            ``{logical_id: secret ARN}`` — what ``!Ref <logical_id>`` resolves to.

        Raises:
            InfrastructureError: If a value cannot be kept.
        """
        import boto3  # noqa: PLC0415 - keep boto3 out of module import time

        session = boto3.session.Session(region_name=self._region)
        return create_secrets(template, session, self._value)

    def stop(self) -> None:
        """Stops the mock and closes the store's connection."""
        self._mock.stop()
        self._conn.close()
