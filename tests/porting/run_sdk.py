"""Runs the SDK handlers of ``sdk_handlers.py`` with the SDK's local test runner; prints JSON.

Run with the interpreter that has AWS's SDK and its testing library installed:
``/work/main/.venv-bench/bin/python tests/porting/run_sdk.py`` (the porting differential test,
``test_porting_differential.py``, does). Prints one JSON object: per case, the final status,
the decoded result (or the error's type and message), and the recorded operations, flattened
depth first in the order the SDK recorded them, each with its depth, the SDK's operation type
normalized to durable-agents' kind names, name, status, decoded result or error type, and (for
steps) attempt count.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sdk_handlers as h  # the sibling module, by path: no package import here
from aws_durable_execution_sdk_python import BatchResult
from aws_durable_execution_sdk_python.lambda_service import (
    OperationStatus,
    OperationType,
)
from aws_durable_execution_sdk_python.serdes import ExtendedTypeSerDes
from aws_durable_execution_sdk_python_testing.runner import (
    DurableFunctionTestResult,
    DurableFunctionTestRunner,
    Operation,
)

# The SDK's (operation type, sub-type) → durable-agents' kind. A sub-type the SDK records
# with ``OperationType.CONTEXT`` decides which of our kinds the scope is.
_CONTEXT_KINDS = {
    "Map": "map",
    "Parallel": "parallel",
    "MapIteration": "child",
    "ParallelBranch": "child",
    "RunInChildContext": "child",
    "WaitForCallback": "child",
}
_STATUS = {
    OperationStatus.SUCCEEDED: "succeeded",
    OperationStatus.FAILED: "failed",
}


@dataclass
class Case:
    """One handler run: its input and, for a callback, the result the test sends."""

    handler: Callable[..., Any]
    event: dict[str, Any]
    callback_result: Any = None
    extra: dict[str, Callable[..., Any]] | None = None


CASES: dict[str, Case] = {
    "retry_then_succeed": Case(h.retry_then_succeed, {"token": "sdk-retry"}),
    "step_fails": Case(h.step_fails, {}),
    "wait_between_steps": Case(h.wait_between_steps, {"n": 4}),
    "callback_completed": Case(h.callback_completed, {}, callback_result={"approved": True}),
    "wait_for_callback_completed": Case(
        h.wait_for_callback_completed, {}, callback_result={"amount": 42}
    ),
    "poll_until_ready": Case(h.poll_until_ready, {}),
    "parallel_lookups": Case(h.parallel_lookups, {}),
    "map_tolerating_failure": Case(h.map_tolerating_failure, {"items": [1, 2, 3, 4]}),
    "map_beyond_tolerance": Case(h.map_beyond_tolerance, {"items": [1, 2, 3, 4]}),
    "child_context": Case(h.child_context, {"kg": 5}),
    "invoke_doubler": Case(h.invoke_doubler, {"n": 20}, extra={"doubler": h.doubler}),
}


def kind_of(op: Operation) -> str:
    """The durable-agents kind of an SDK operation."""
    if op.operation_type is OperationType.CONTEXT:
        return _CONTEXT_KINDS.get(op.sub_type or "", "child")
    if op.operation_type is OperationType.STEP:
        return "condition" if op.sub_type == "WaitForCondition" else "step"
    if op.operation_type is OperationType.CHAINED_INVOKE:
        return "invoke"
    return str(op.operation_type.value).lower()


def _decode(payload: str | None) -> Any:
    """A recorded payload as a value: JSON, or the SDK's tagged envelope for its own types."""
    if payload is None:
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return payload
    if isinstance(value, dict) and set(value) == {"t", "v"}:
        value = ExtendedTypeSerDes().deserialize(payload)
    if isinstance(value, BatchResult):
        return batch_summary(value)
    return value


def batch_summary(batch: BatchResult[Any]) -> dict[str, Any]:
    """A recorded batch as the test compares it: its completion reason and item statuses."""
    return {
        "completion_reason": batch.completion_reason.value.lower(),
        "items": [item.status.value.lower() for item in batch.all],
    }


def flatten(ops: list[Operation], depth: int = 0) -> list[dict[str, Any]]:
    """The operations depth first, each a row as ``test_porting_differential.Summary`` says."""
    rows: list[dict[str, Any]] = []
    for op in ops:
        error = getattr(op, "error", None)
        is_step = op.operation_type is OperationType.STEP
        rows.append(
            {
                "depth": depth,
                "kind": kind_of(op),
                "name": op.name,
                "status": _STATUS.get(op.status, str(op.status.value).lower()),
                "result": None if error is not None else _decode(getattr(op, "result", None)),
                "error_type": error.type if error is not None else None,
                "attempts": getattr(op, "attempt", None) if is_step else None,
                "sub_kind": "wait_for_callback" if op.sub_type == "WaitForCallback" else None,
            }
        )
        rows.extend(flatten(list(getattr(op, "child_operations", None) or []), depth + 1))
    return rows


def summarize(result: DurableFunctionTestResult) -> dict[str, Any]:
    """The final status, result or error, and operations of one execution."""
    error = None
    if result.error is not None:
        error = {"type": result.error.type, "message": result.error.message}
    return {
        "status": str(result.status.value),
        "result": _decode(result.result),
        "error": error,
        "operations": flatten(result.operations),
    }


def run_case(case: Case) -> dict[str, Any]:
    """Runs one case to its end, completing its callback when it has one."""
    with DurableFunctionTestRunner(handler=case.handler, poll_interval=0.05) as runner:
        for name, handler in (case.extra or {}).items():
            runner.register_durable_function(name, handler)
        payload = json.dumps(case.event)
        if case.callback_result is None:
            return summarize(runner.run(input=payload, execution_timeout=60))
        arn = runner.run_async(input=payload, execution_timeout=60)
        callback_id = runner.wait_for_callback(arn, timeout=30)
        runner.send_callback_success(callback_id, json.dumps(case.callback_result).encode())
        return summarize(runner.wait_for_result(arn, timeout=60))


def main(names: list[str]) -> None:
    """Runs the named cases (all by default) and prints their summaries as one JSON object."""
    logging.disable(logging.CRITICAL)  # the SDK logs failed attempts; stdout is the JSON
    out = {name: run_case(CASES[name]) for name in (names or list(CASES))}
    json.dump(out, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
