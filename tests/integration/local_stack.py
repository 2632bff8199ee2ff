"""Shared pieces for tests against local mode: moto, the fake services, and workers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.processes import ServicesProcess, WorkerProcess
from durable_agents_local.services import ServicesHandle

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoProcess]:
    """A moto server process for the module (the journal survives worker restarts)."""
    server = MotoProcess(free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def services_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServicesProcess]:
    """The fake payments / email / tickets services in their own process."""
    process = ServicesProcess(tmp_path_factory.mktemp("services") / "ledgers.json")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def services(services_process: ServicesProcess) -> ServicesHandle:
    """A handle on the services with empty ledgers."""
    handle = ServicesHandle(services_process.url)
    handle.reset()
    return handle


@contextmanager
def workers(moto: MotoProcess, services: ServicesHandle) -> Iterator[Callable[..., WorkerProcess]]:
    """Starts workers on demand (extra CLI args allowed); stops them all at the end and
    prints their logs on failure."""
    started: list[WorkerProcess] = []

    def start(*args: str) -> WorkerProcess:
        worker = WorkerProcess(
            api_port=free_port(),
            moto_endpoint=moto.endpoint,
            store_key=moto.store_key,
            args=["--services-url", services.url, "--log-level", "ERROR", *args],
            cwd=ROOT,
        )
        started.append(worker)
        worker.start()
        return worker

    try:
        yield start
    except BaseException:
        for index, worker in enumerate(started, start=1):
            print(f"--- worker {index} log ---", *worker.lines, sep="\n")
        raise
    finally:
        for worker in started:
            worker.stop()


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Polls ``check`` until it returns something truthy.

    Raises:
        AssertionError: If ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
