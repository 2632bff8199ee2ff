"""Reading runs straight from the journal in a moto server (``durable-agents runs ...``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from durable_agents.agent import AgentRegistry
from durable_agents.errors import InfrastructureError, RunNotFoundError, RunStateConflictError
from durable_agents.events import EventBridgePublisher
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents.local.aws import LocalSession
from durable_agents.local.console import history_table, run_details, runs_table
from durable_agents.local.functions import local_name
from durable_agents.models import RunStatus
from durable_agents.runtime import Runtime
from durable_agents.views import history, run_view

T = TypeVar("T")


class RunsError(Exception):
    """A ``runs`` command failed; the message says why and what to do."""


class RunsClient:
    """The journal (and the bus, for redrive) of a local moto server.

    Args:
        endpoint: The moto server's URL.
        table: The journal table's local name.
    """

    def __init__(self, endpoint: str, table: str | None = None):
        session = LocalSession(endpoint, fail_fast=True)
        self.endpoint = endpoint
        self.table = table or local_name("JournalTable")
        payloads = S3PayloadStore(session.client("s3"), local_name("PayloadBucket"))
        self.store = DynamoDBJournal(session.client("dynamodb"), self.table, payloads=payloads)
        self.runtime = Runtime(
            self.store,
            registry=AgentRegistry(),
            publisher=EventBridgePublisher(session.client("events"), local_name("EventBus")),
        )

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except RunNotFoundError as exc:
            raise RunsError(f"run {exc.run_id!r} not found in {self.endpoint}") from exc
        except RunStateConflictError as exc:
            raise RunsError(
                f"run {exc.run_id!r} is already {exc.actual}: nothing to redrive"
            ) from exc
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

    def list(
        self,
        status: str | None,
        limit: int,
        *,
        agent: str | None = None,
        version: str | None = None,
        since: str | None = None,
    ) -> tuple[dict[str, Any], str]:
        """Runs, newest start first: (JSON, table).

        Optionally only runs of ``agent``, only those pinned to workflow ``version``, and only
        those started at or after ``since`` (ISO-8601 with a timezone).

        Raises:
            RunsError: If the endpoint is down or has no journal, or ``since`` is not a time.
        """
        wanted = RunStatus(status) if status else None
        since_ms = None if since is None else _epoch_ms(since)
        page = self._call(
            lambda: self.store.list_runs(
                status=wanted, limit=limit, agent=agent, version=version, since_ms=since_ms
            )
        )
        runs = [run_view(h) for h in page.runs]
        return {"runs": runs, "cursor": page.cursor}, runs_table(runs)

    def show(self, run_id: str) -> tuple[dict[str, Any], str]:
        """One run: (JSON, ``key: value`` lines).

        Raises:
            RunsError: If the run is unknown or the endpoint is down.
        """
        view = run_view(self._call(lambda: self.store.get_run(run_id)))
        return view, run_details(view)

    def history(self, run_id: str) -> tuple[dict[str, Any], str]:
        """A run's history: (JSON, timeline).

        Raises:
            RunsError: If the run is unknown or the endpoint is down.
        """
        events = history(self._call(lambda: self.store.load(run_id)))
        return {"run_id": run_id, "events": events}, history_table(events)

    def redrive(self, run_id: str) -> tuple[dict[str, Any], str]:
        """Resumes a PAUSED run or nudges an active one with ``Step Ready``.

        Raises:
            RunsError: If the run is unknown or finished, or the endpoint is down.
        """
        view = run_view(self._call(lambda: self.runtime.redrive(run_id)))
        return view, f"re-driven: {run_id} is {view['status']}; a Step Ready event is on its way"


def _epoch_ms(text: str) -> int:
    """An ISO-8601 time with a timezone as epoch milliseconds.

    Raises:
        RunsError: If it is not one.
    """
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise RunsError(f"--since {text!r} is not an ISO-8601 time") from exc
    if moment.tzinfo is None:
        raise RunsError(f"--since {text!r} needs a timezone (e.g. 2026-12-01T20:00:00Z)")
    return int(moment.timestamp() * 1000)
