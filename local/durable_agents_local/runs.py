"""Reading runs straight from the journal in a moto server, for tests and tools.

The ``durable-agents runs`` commands go through the Api instead
(``durable_agents_local.cli.remote``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from durable_agents.admin.views import history
from durable_agents.errors import InfrastructureError, RunNotFoundError, RunStateConflictError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents_local.aws import LocalSession
from durable_agents_local.console import history_table
from durable_agents_local.functions import local_name
from durable_agents_local.store_key import StoreKeyError

T = TypeVar("T")


class RunsError(Exception):
    """A ``runs`` command failed; the message says why and what to do."""


class RunsClient:
    """The journal of a local moto server.

    Args:
        endpoint: The moto server's URL.
        table: The journal table's local name.
        store_key: The store's session key (``MotoProcess.store_key``); None: found with
            ``store_key.key_for`` (``DURABLE_AGENTS_STORE_KEY``, else the store's key file).

    Raises:
        RunsError: If no key is given and none is found.
    """

    def __init__(self, endpoint: str, table: str | None = None, *, store_key: str | None = None):
        try:
            session = LocalSession(endpoint, fail_fast=True, store_key=store_key)
        except (StoreKeyError, OSError) as exc:
            raise RunsError(str(exc)) from exc
        self.endpoint = endpoint
        self.table = table or local_name("JournalTable")
        payloads = S3PayloadStore(session.client("s3"), local_name("PayloadBucket"))
        self.store = DynamoDBJournal(session.client("dynamodb"), self.table, payloads=payloads)

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except RunNotFoundError as exc:
            raise RunsError(f"run {exc.run_id!r} not found in {self.endpoint}") from exc
        except RunStateConflictError as exc:
            raise RunsError(f"run {exc.run_id!r} is already {exc.actual}: nothing to do") from exc
        except InfrastructureError as exc:  # the journal's guard wraps botocore's errors
            if isinstance(exc.__cause__, EndpointConnectionError):
                raise RunsError(
                    f"cannot reach {self.endpoint}: start `durable-agents local` (or "
                    "`durable-agents moto`), or pass --endpoint"
                ) from exc
            raise RunsError(f"talking to {self.endpoint} failed: {exc}") from exc
        except EndpointConnectionError as exc:
            raise RunsError(
                f"cannot reach {self.endpoint}: start `durable-agents local` (or "
                "`durable-agents moto`), or pass --endpoint"
            ) from exc
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                raise RunsError(
                    f"{self.endpoint} has no journal table {self.table!r}: "
                    "`durable-agents local` creates it on start"
                ) from exc
            raise RunsError(f"{self.endpoint} refused the request: {exc}") from exc
        except BotoCoreError as exc:
            raise RunsError(f"talking to {self.endpoint} failed: {exc}") from exc

    def history(self, run_id: str) -> tuple[dict[str, Any], str]:
        """A run's history: (JSON, timeline).

        Raises:
            RunsError: If the run is unknown or the endpoint is down.
        """
        events = history(self._call(lambda: self.store.load(run_id)))
        return {"run_id": run_id, "events": events}, history_table(events)
