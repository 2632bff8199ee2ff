"""What handlers make on first use instead of at init (durable_agents.aws.deferred).

The point of each object is what it does not do at import: these tests check that nothing is
made before it is used, that it is made once when it is, and that the handlers' modules keep
the X-Ray SDK out of their init (docs/benchmarks.md, "Cold start").
"""

from __future__ import annotations

import contextlib
import inspect
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools import Tracer

from durable_agents.aws.deferred import DeferredClient, DeferredTracer

ROOT = Path(__file__).resolve().parents[2]


class _Client:
    def ping(self) -> str:
        return "pong"


def test_a_client_is_made_on_first_use_and_once() -> None:
    made: list[_Client] = []

    def make() -> _Client:
        made.append(_Client())
        return made[-1]

    client = DeferredClient(make)
    assert made == []
    assert client.ping() == "pong"
    assert client.ping() == "pong"
    assert len(made) == 1 and client.client is made[0]


def test_a_client_that_fails_to_be_made_is_tried_again() -> None:
    attempts: list[int] = []

    def make() -> _Client:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("endpoint malformed")
        return _Client()

    client = DeferredClient(make)
    with pytest.raises(ValueError, match="endpoint malformed"):
        client.ping()
    assert client.ping() == "pong"
    assert len(attempts) == 2


def test_threads_that_race_to_the_first_use_make_one_client() -> None:
    made: list[int] = []

    def make() -> _Client:
        made.append(1)
        time.sleep(0.05)  # long enough for every thread to arrive while it is being made
        return _Client()

    client = DeferredClient(make)
    threads = [threading.Thread(target=client.ping) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == [1]


def test_a_tracer_is_made_by_the_first_traced_call_not_by_decorating() -> None:
    tracer = DeferredTracer(service="deferred-test", disabled=True)

    @tracer.capture_method(capture_response=False)
    def route(x: int, *, y: int = 1) -> int:
        """A route."""
        return x + y

    @tracer.capture_lambda_handler(capture_response=False)
    def handler(event: dict[str, Any], context: object) -> int:
        return route(event["x"], y=2)

    assert tracer._tracer is None
    # Powertools reads a route's signature through the decorators (the Api's OpenAPI document).
    assert inspect.unwrap(route).__name__ == "route" and route.__doc__ == "A route."
    assert inspect.signature(route) == inspect.signature(inspect.unwrap(route))
    assert handler({"x": 1}, None) == 3
    assert isinstance(tracer._tracer, Tracer)
    made = tracer._tracer
    assert route(1) == 2 and handler({"x": 2}, None) == 4
    assert tracer._tracer is made


def test_generators_and_context_managers_are_captured_by_the_tracer_at_once() -> None:
    # The Tracer wraps each kind its own way; a plain wrapper would trace the generator's
    # creation, not its run. These make the Tracer when decorated.
    tracer = DeferredTracer(service="deferred-test", disabled=True)

    @tracer.capture_method
    def numbers() -> Iterator[int]:
        yield from (1, 2)

    assert isinstance(tracer._tracer, Tracer)
    assert list(numbers()) == [1, 2]

    other = DeferredTracer(service="deferred-test", disabled=True)

    @other.capture_method
    @contextlib.contextmanager
    def opened() -> Iterator[str]:
        yield "open"

    assert isinstance(other._tracer, Tracer)
    with opened() as value:
        assert value == "open"


def test_errors_of_a_traced_method_reach_the_caller() -> None:
    tracer = DeferredTracer(service="deferred-test", disabled=True)

    @tracer.capture_method
    def failing() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        failing()


# A handler's environment: the functions' code first, as Lambda lays it out, and the settings a
# handler module reads at init.
_HANDLER_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT / "functions"), *sys.path]),
    "JOURNAL_TABLE": "journal",
    "EVENT_BUS_NAME": "bus",
    "AGENT_MODULES": "agents.example",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _run_in_handler_env(code: str, env: dict[str, str]) -> str:
    """What ``code`` prints in a fresh interpreter with ``env``."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=ROOT
    ).stdout


@pytest.mark.parametrize("module", ["api.app", "step_runner.app", "reconciler.app", "relay.app"])
def test_no_handler_loads_the_xray_sdk_at_init(module: str) -> None:
    # The SDK is half of the Api's init otherwise (docs/benchmarks.md, "Cold start").
    env = {**_HANDLER_ENV, "LAMBDA_TASK_ROOT": str(ROOT / "functions")}  # Tracer: "on Lambda"
    env.pop("POWERTOOLS_TRACE_DISABLED", None)
    out = _run_in_handler_env(f"import sys, {module}\nprint('aws_xray_sdk' in sys.modules)", env)
    assert out.strip() == "False", f"importing {module} loaded the X-Ray SDK"


def test_the_api_loads_the_jwt_stack_only_for_a_jwt() -> None:
    # PyJWT and cryptography verify people's tokens; an Api called with IAM never needs them.
    code = (
        "import sys, api.app\n"
        "print(sorted(m for m in ('jwt', 'cryptography') if m in sys.modules))\n"
        "from api.routes.approvals import jwt_verifier\n"
        "try:\n    jwt_verifier()\nexcept Exception as exc:\n    print(type(exc).__name__)\n"
        "print('jwt' in sys.modules)"
    )
    out = _run_in_handler_env(code, _HANDLER_ENV).split()
    assert out == ["[]", "AuthUnavailableError", "True"]
