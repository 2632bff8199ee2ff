"""Local mode runs every function in one process: each log line must name its own function.

Powertools loggers of one service share one handler and its keys; on Lambda each function
has its own process, locally two functions invoked at once overwrote each other's
``function_name`` (and ``run_id``) keys.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from durable_agents_local.functions import FunctionSpec
from durable_agents_local.invoke import LocalFunction, load_handler

SHARED = """
import io, threading
STREAM = io.StringIO()
BARRIER = threading.Barrier(2, timeout=10)
"""
HANDLER = """
from aws_lambda_powertools import Logger
from logkeys_pkg.shared import BARRIER, STREAM

logger = Logger(service="logkeys-test", stream=STREAM)


@logger.inject_lambda_context(clear_state=True)
def handler(event, context):
    logger.append_keys(run_id=event["run_id"])
    BARRIER.wait()  # both functions have set their keys before either writes a line
    logger.info("hello from {name}")
    return {{}}
"""


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    package = tmp_path / "logkeys_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "shared.py").write_text(SHARED)
    for name in ("alpha", "beta"):
        (package / f"{name}.py").write_text(HANDLER.format(name=name))
    yield tmp_path
    for module in [m for m in sys.modules if m.startswith("logkeys_pkg")]:
        del sys.modules[module]
    sys.path.remove(str(tmp_path))


def _function(code_dir: Path, name: str) -> LocalFunction:
    spec = FunctionSpec(
        logical_id=f"{name.capitalize()}Function",
        handler=f"logkeys_pkg.{name}.handler",
        code_dir=code_dir,
        timeout_seconds=10,
        memory_mb=128,
        max_retries=0,
        environment={},
    )
    return LocalFunction(spec, load_handler(spec), region="us-east-1")


def test_each_line_names_the_function_and_run_that_wrote_it(code_dir: Path) -> None:
    functions = {name: _function(code_dir, name) for name in ("alpha", "beta")}
    threads = [
        threading.Thread(target=f.invoke, args=({"run_id": f"run-{name}"},))
        for name, f in functions.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    from logkeys_pkg.shared import STREAM  # type: ignore[import-not-found]

    lines = [json.loads(line) for line in STREAM.getvalue().splitlines()]
    assert len(lines) == 2
    for line in lines:
        name = line["message"].removeprefix("hello from ")
        assert line["function_name"] == f"{name.capitalize()}Function", line
        assert line["run_id"] == f"run-{name}", line
