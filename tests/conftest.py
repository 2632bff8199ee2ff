"""Shared fixtures: journal backends (in-memory and DynamoDB on moto), clock, runtime."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pytest
from moto import mock_aws

from durable_agents import AgentRegistry, SkipClock
from durable_agents.aws.memory_table import DynamoDBMemoryStore
from durable_agents.engine.memory_store import InMemoryMemoryStore, MemoryStore
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.payloads import S3PayloadStore
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents.journal.store import JournalStore
from durable_agents_local import moto_server
from durable_agents_local.template import create_journal_table, load_template, table_definition

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"

# Never reach a real AWS account from the test suite.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ.pop("AWS_PROFILE", None)
os.environ.pop("AWS_ENDPOINT_URL", None)

# The runtime builds a fresh boto3 Session per cold start (deployment.build_runtime), and the
# fixtures reset the handlers' runtimes per test: each Session would read and parse botocore's
# service models again (~0.2 s per client). One loader (its cache of those read-only JSON
# models) is shared by every Session in the test process instead; nothing else is shared.
_LOADERS: dict[str | None, botocore.loaders.Loader] = {}


def _register_shared_data_loader(self: botocore.session.Session) -> None:
    def create() -> botocore.loaders.Loader:
        path = self.get_config_variable("data_path")
        if path not in _LOADERS:
            _LOADERS[path] = botocore.loaders.create_loader(path)
        return _LOADERS[path]

    self._components.lazy_register_component("data_loader", create)


if hasattr(botocore.session.Session, "_register_data_loader"):  # else: a slower suite, as before
    botocore.session.Session._register_data_loader = _register_shared_data_loader


# Under pytest-xdist, two workers asking the OS for a free port at the same moment could be
# handed the same one (free_port releases it before the server binds it). Each worker keeps to
# its own share of the ports instead: (port // 2) % workers == its index (Linux hands out odd
# ports to bind(0), so the parity alone would leave one worker nothing).
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_os_free_port = moto_server.free_port


def _worker_free_port(host: str = moto_server.HOST) -> int:
    """``free_port``, restricted to this xdist worker's share of the ports."""
    index = int(_XDIST_WORKER.removeprefix("gw"))
    for _ in range(10_000):
        port = _os_free_port(host)
        if (port // 2) % _XDIST_WORKERS == index:
            return port
    raise RuntimeError(f"no free port in xdist worker {_XDIST_WORKER}'s share")


if _XDIST_WORKER.startswith("gw") and _XDIST_WORKERS > 1:
    moto_server.free_port = _worker_free_port


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A pytest-xdist worker finished: keep its fault-suite counts for the report."""
    state = getattr(node, "workeroutput", {}).get("reliability")
    if state:
        from tests.reliability import report

        report.merge(state)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    # Without xdist, tests/reliability/conftest.py prints the fault suite's report itself.
    if config.pluginmanager.hasplugin("dsession"):
        from tests.reliability import report

        report.write(terminalreporter)


@pytest.fixture
def aws() -> Iterator[None]:
    """Everything AWS inside this test goes to in-process moto."""
    with mock_aws():
        yield


@pytest.fixture
def dynamodb_journal(aws: None) -> DynamoDBJournal:
    """A DynamoDB journal on a moto table created from template.yaml, with S3 spill.

    It reads a run it read before as header and tail whatever the journal's size (ADR 0015),
    so that the contract suite runs the tail path on every load it can.
    """
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_journal_table(client, "journal", TEMPLATE)
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="payloads")
    return DynamoDBJournal(
        client, "journal", payloads=S3PayloadStore(s3, "payloads"), tail_reads=True
    )


@pytest.fixture(params=["memory", "dynamodb", "sqlite"])
def journal(request: pytest.FixtureRequest) -> Iterator[JournalStore]:
    """Each test using it runs once per backend: the contract suite."""
    if request.param == "memory":
        yield InMemoryJournal()
    elif request.param == "sqlite":
        tmp_path: Path = request.getfixturevalue("tmp_path")
        with SqliteJournal(tmp_path / "journal.sqlite3") as store:
            yield store
    else:
        yield request.getfixturevalue("dynamodb_journal")


@pytest.fixture(params=["memory-store", "dynamodb-store"])
def memory_store(request: pytest.FixtureRequest) -> MemoryStore:
    """Each test using it runs once per memory store: in memory, and DynamoDB on moto (the
    template's MemoryTable)."""
    if request.param == "memory-store":
        return InMemoryMemoryStore()
    request.getfixturevalue("aws")
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(
        TableName="memory", **table_definition(load_template(TEMPLATE), "MemoryTable")
    )
    return DynamoDBMemoryStore(client, "memory")


@pytest.fixture
def clock() -> SkipClock:
    return SkipClock()


@pytest.fixture
def registry() -> AgentRegistry:
    return AgentRegistry()


@pytest.fixture
def runtime(journal: JournalStore, registry: AgentRegistry, clock: SkipClock) -> Runtime:
    return Runtime(journal, registry=registry, clock=clock)
