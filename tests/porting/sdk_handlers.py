"""Handlers written with AWS's durable execution SDK, the source side of the porting test.

Each handler exercises one or two operations in the style of the SDK's documented examples.
``ported_agents.py`` holds the same handlers ported line by line per
docs/migrating-from-aws-durable-functions.md; ``run_sdk.py`` runs these with the SDK's local
test runner. This module imports ``aws_durable_execution_sdk_python``: only the
``.venv-bench`` interpreter runs it, the project's tests never import it.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from aws_durable_execution_sdk_python import (
    DurableContext,
    StepContext,
    durable_execution,
)
from aws_durable_execution_sdk_python.config import (
    CallbackConfig,
    CompletionConfig,
    Duration,
    MapConfig,
    ParallelConfig,
    StepConfig,
    WaitForCallbackConfig,
)
from aws_durable_execution_sdk_python.retries import (
    RetryPresets,
    RetryStrategyConfig,
    create_retry_strategy,
)
from aws_durable_execution_sdk_python.types import WaitForCallbackContext
from aws_durable_execution_sdk_python.waits import (
    WaitForConditionConfig,
    WaitStrategyConfig,
    create_wait_strategy,
)

# How often each flaky step ran, per run token (the input's "token").
CALLS: Counter[str] = Counter()
# The callback ids the submitters were handed.
SUBMITTED: list[str] = []


class PaymentDeclinedError(Exception):
    """A user error class the failing step raises."""


# -- 1. a step retried twice, then succeeding ------------------------------------------------


@durable_execution
def retry_then_succeed(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    """A step that fails twice with a retryable error, then succeeds on its third attempt."""
    token = event["token"]

    def flaky(step_context: StepContext) -> str:
        CALLS[token] += 1
        if CALLS[token] < 3:
            raise ConnectionError(f"attempt {CALLS[token]} timed out")
        return "fetched"

    retry = create_retry_strategy(
        RetryStrategyConfig(
            max_attempts=3,
            initial_delay=Duration.from_seconds(1),
            retryable_error_types=[ConnectionError],
        )
    )
    value = context.step(flaky, name="fetch", config=StepConfig(retry_strategy=retry))
    return {"value": value}


# -- 2. a step that fails for good -----------------------------------------------------------


@durable_execution
def step_fails(event: dict[str, Any], context: DurableContext) -> str:
    """A step that raises a user error and is not retried: the execution fails."""

    def charge(step_context: StepContext) -> str:
        raise PaymentDeclinedError("card declined")

    context.step(lambda _: "ok", name="prepare")
    return context.step(
        charge, name="charge", config=StepConfig(retry_strategy=RetryPresets.none())
    )


# -- 3. a wait between two steps --------------------------------------------------------------


@durable_execution
def wait_between_steps(event: dict[str, Any], context: DurableContext) -> int:
    """A step, a five-second wait, another step."""
    first = context.step(lambda _: event["n"] + 1, name="first")
    context.wait(Duration.from_seconds(5), name="cool-down")
    return context.step(lambda _: first * 10, name="second")


# -- 4. create_callback, completed from the test ---------------------------------------------


@durable_execution
def callback_completed(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    """Creates a callback, hands its id on in a step, and waits for its result."""
    callback = context.create_callback(
        name="approval", config=CallbackConfig(timeout=Duration.from_minutes(10))
    )
    context.step(lambda _: SUBMITTED.append(callback.callback_id) or "sent", name="notify")
    decision = json.loads(callback.result())  # no serdes: result() is the text that was sent
    return {"decision": decision}


# -- 5. wait_for_callback, completed from the test -------------------------------------------


def submit_payment(callback_id: str, callback_context: WaitForCallbackContext) -> None:
    """The submitter: asks the (pretend) payment service to call back."""
    SUBMITTED.append(json.dumps({"callback_id": callback_id, "amount": 42}))


@durable_execution
def wait_for_callback_completed(event: dict[str, Any], context: DurableContext) -> Any:
    """wait_for_callback with a named submitter and a timeout."""
    payment = json.loads(
        context.wait_for_callback(
            submit_payment,
            name="payment",
            config=WaitForCallbackConfig(timeout=Duration.from_hours(1)),
        )
    )
    return context.step(lambda _: {"paid": payment["amount"]}, name="record")


# -- 6. wait_for_condition -------------------------------------------------------------------


@durable_execution
def poll_until_ready(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    """Polls a (pretend) job until its third check reports it done."""

    def check(state: dict[str, Any], check_context: Any) -> dict[str, Any]:
        checks = state["checks"] + 1
        return {"checks": checks, "done": checks >= 3}

    strategy = create_wait_strategy(
        WaitStrategyConfig(
            should_continue_polling=lambda state: not state["done"],
            max_attempts=10,
            initial_delay=Duration.from_seconds(2),
        )
    )
    return context.wait_for_condition(
        check,
        config=WaitForConditionConfig(
            wait_strategy=strategy, initial_state={"checks": 0, "done": False}
        ),
        name="job-ready",
    )


# -- 7. parallel -----------------------------------------------------------------------------


@durable_execution
def parallel_lookups(event: dict[str, Any], context: DurableContext) -> list[Any]:
    """Three branches, each one step, run with at most two at a time."""

    def price(ctx: DurableContext) -> int:
        return ctx.step(lambda _: 100, name="price")

    def stock(ctx: DurableContext) -> int:
        return ctx.step(lambda _: 7, name="stock")

    def rating(ctx: DurableContext) -> float:
        return ctx.step(lambda _: 4.5, name="rating")

    batch = context.parallel(
        [price, stock, rating], name="lookups", config=ParallelConfig(max_concurrency=2)
    )
    return batch.get_results()


# -- 8. map with a completion config that tolerates a failure --------------------------------


def _square_unless_three(ctx: DurableContext, item: int, index: int, items: list[int]) -> int:
    def square(_: StepContext) -> int:
        if item == 3:
            raise ValueError("three is not allowed")
        return item * item

    return ctx.step(square, name="square", config=StepConfig(retry_strategy=RetryPresets.none()))


@durable_execution
def map_tolerating_failure(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    """Maps over four items, one of which fails; one failure is tolerated."""
    batch = context.map(
        event["items"],
        _square_unless_three,
        name="squares",
        config=MapConfig(
            max_concurrency=1,
            completion_config=CompletionConfig(tolerated_failure_count=1),
        ),
    )
    return {
        "results": batch.get_results(),
        "succeeded": batch.success_count,
        "failed": batch.failure_count,
    }


# -- 9. map beyond its completion config -----------------------------------------------------


@durable_execution
def map_beyond_tolerance(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    """The same map with no failure tolerated: the SDK returns the batch, it does not raise."""
    batch = context.map(
        event["items"],
        _square_unless_three,
        name="squares",
        config=MapConfig(max_concurrency=1, completion_config=CompletionConfig.all_successful()),
    )
    return {"succeeded": batch.success_count, "failed": batch.failure_count}


# -- 10. run_in_child_context ----------------------------------------------------------------


@durable_execution
def child_context(event: dict[str, Any], context: DurableContext) -> int:
    """Groups two steps and a wait in a child context."""

    def shipping(child: DurableContext) -> int:
        weight = child.step(lambda _: event["kg"] * 2, name="weigh")
        child.wait(Duration.from_seconds(1), name="settle")
        return child.step(lambda _: weight + 3, name="quote")

    quote = context.run_in_child_context(shipping, name="shipping")
    return context.step(lambda _: quote * 100, name="total")


# -- 11. invoke ------------------------------------------------------------------------------


@durable_execution
def doubler(event: dict[str, Any], context: DurableContext) -> int:
    """The callee of ``invoke_doubler``: doubles its input in a step."""
    return context.step(lambda _: event["n"] * 2, name="double")


@durable_execution
def invoke_doubler(event: dict[str, Any], context: DurableContext) -> int:
    """Invokes another durable function and adds one to its result."""
    doubled = context.invoke("doubler", {"n": event["n"]}, name="call-doubler")
    return context.step(lambda _: doubled + 1, name="add-one")
