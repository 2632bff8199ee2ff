"""The journal contract against local mode's durable store, also restarted from its files.

The store is a separate process (``MotoProcess`` on a state directory), so these tests talk
to it over HTTP as local mode does. Two backends:

* ``durable``: the store as it runs: every write goes through the write-ahead log.
* ``durable-restarted``: before a test's second journal call the store is SIGKILLed and
  started again on the same state directory, so what the test then reads, and every
  conditional write it then attempts, runs against the state rebuilt from the snapshot and
  the log (idempotency keys, run-id conflicts, finished runs, S3-spilled values, listings).

Each test gets its own table and bucket, created from ``template.yaml`` like local mode's.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents.journal.store import JournalStore
from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.template import create_journal_table
from tests.contract import test_journal_contract as contract

pytestmark = [pytest.mark.slow]

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
RESTARTS_PER_TEST = 1
_names = itertools.count()

# The whole journal contract, collected again here with this module's ``journal`` fixture.
globals().update({name: f for name, f in vars(contract).items() if name.startswith("test_")})


class Store:
    """The store process on one state directory; ``restart`` SIGKILLs it and starts it again."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.port = free_port()
        self.process = MotoProcess(self.port, state_dir)
        self.process.start()
        self.restarts = 0

    def restart(self) -> None:
        pid = self.process.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        self.process.stop()  # reaps it
        # The same session key, so that the clients made before reach the restarted store.
        self.process = MotoProcess(self.port, self.state_dir, store_key=self.process.store_key)
        self.process.start()
        self.restarts += 1

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.process.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.process.store_key,  # the store answers only its key
            aws_secret_access_key="testing",
        )


class RestartingJournal:
    """A journal whose store is killed and restarted before its first few calls but one."""

    def __init__(self, inner: JournalStore, restart: Callable[[], None], restarts: int):
        self._inner = inner
        self._restart = restart
        self._left = restarts
        self._calls = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls += 1
            if self._calls > 1 and self._left > 0:
                self._left -= 1
                self._restart()
            return attribute(*args, **kwargs)

        return call


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    running = Store(tmp_path_factory.mktemp("durable-store"))
    yield running
    running.process.stop()


@pytest.fixture(params=["durable", "durable-restarted"])
def journal(request: pytest.FixtureRequest, store: Store) -> JournalStore:
    """Overrides the conftest's backends: the durable store, as it runs and restarted."""
    number = next(_names)
    dynamodb, s3 = store.client("dynamodb"), store.client("s3")
    create_journal_table(dynamodb, f"journal-{number}", TEMPLATE)
    s3.create_bucket(Bucket=f"payloads-{number}")
    inner = DynamoDBJournal(
        dynamodb, f"journal-{number}", payloads=S3PayloadStore(s3, f"payloads-{number}")
    )
    if request.param == "durable":
        return inner
    restarting: Any = RestartingJournal(inner, store.restart, RESTARTS_PER_TEST)
    return restarting  # quacks like the journal it wraps


def test_an_acknowledged_run_survives_a_sigkill_of_the_store(
    journal: JournalStore, store: Store
) -> None:
    """Not only through the wrapper: the store process really dies and comes back."""
    created, _ = journal.create_run(contract.header("run-kill", key="key-kill"))
    before = store.restarts
    store.restart()
    assert store.restarts == before + 1
    assert journal.get_run("run-kill") == created
    again, fresh = journal.create_run(contract.header("run-other", key="key-kill"))
    assert (again.run_id, fresh) == ("run-kill", False)
