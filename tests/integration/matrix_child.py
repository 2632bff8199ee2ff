"""Child process of the side-effect matrix: ONE invocation of a run, killed mid-protocol.

Run from the repository root (``PYTHONPATH`` holding the root, ``functions`` and
``layers/runtime``)::

    python -m tests.integration.matrix_child --endpoint http://127.0.0.1:PORT --table journal \\
        --services http://127.0.0.1:PORT --run-id RUN --clock-ms 1767225600000 \\
        --remaining-ms 1000 --crash-point after_execute --operation charge-reversible

It executes one invocation (``budget=1``) of the run against the journal on the moto server,
with a fixed clock value from the parent (time is the parent's to control), and SIGKILLs itself
at ``--crash-point`` of ``--operation``: no exception handler, no ``finally``, no flush runs. The
parent asserts the return code is ``-9``. Without ``--crash-point`` nothing kills it from the
inside (the parent kills it while its HTTP request is in flight).

It prints the invocation outcome as JSON if it survives (which the parent treats as a failure).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

import boto3

from durable_agents import SkipClock
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from tests.integration import matrix_tools

HOOKS = ("before_claim", "before_execute", "after_execute", "after_record")


class KillHooks(InvocationHooks):
    """SIGKILLs this process at one hook of one operation: a real crash, not an exception.

    Args:
        point: ``before_claim``, ``before_execute``, ``after_execute`` or ``after_record``.
        operation: The operation name (``create-ticket``) or full operation id.
    """

    def __init__(self, point: str | None, operation: str):
        self.point = point
        self.operation = operation

    def _maybe(self, point: str, op_id: str) -> None:
        name = op_id.rsplit("/", 1)[-1].rsplit(":", 2)[-2] if ":" in op_id else op_id
        if point == self.point and self.operation in (op_id, name):
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def before_claim(self, op_id: str) -> None:
        """Dies before the PREPARE record (or a recovery's claim) is written."""
        self._maybe("before_claim", op_id)

    def before_execute(self, op_id: str, attempt: int) -> None:
        """Dies after PREPARE, before the tool runs."""
        self._maybe("before_execute", op_id)

    def after_execute(self, op_id: str, attempt: int) -> None:
        """Dies after the provider answered, before COMMIT."""
        self._maybe("after_execute", op_id)

    def after_record(self, op_id: str) -> None:
        """Dies after COMMIT, before the next step."""
        self._maybe("after_record", op_id)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parses the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True, help="the moto server URL")
    parser.add_argument("--table", required=True, help="the journal table")
    parser.add_argument("--services", required=True, help="the fake services' base URL")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--clock-ms", type=int, required=True, help="the (fixed) time")
    parser.add_argument("--remaining-ms", type=int, required=True, help="bounds the lease")
    parser.add_argument("--crash-point", choices=HOOKS, default=None)
    parser.add_argument("--operation", default="", help="the operation to crash in")
    parser.add_argument("--model-start", type=int, default=None, help="the model's first answer")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Runs one invocation; returns 0 if nothing killed the process."""
    args = parse_args(argv)
    matrix_tools.configure(args.services)
    if args.model_start is not None:
        matrix_tools.model.reset(args.model_start)
    client = boto3.client("dynamodb", endpoint_url=args.endpoint, region_name="us-east-1")
    runtime = Runtime(
        DynamoDBJournal(client, args.table),
        registry=matrix_tools.agents,
        publisher=CollectingPublisher(),
        clock=SkipClock(args.clock_ms),
    )
    outcome = runtime.execute(
        args.run_id,
        budget=1,
        remaining_ms=args.remaining_ms,
        hooks=KillHooks(args.crash_point, args.operation),
    )
    print(json.dumps({"kind": outcome.kind.value, "executed": outcome.executed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
