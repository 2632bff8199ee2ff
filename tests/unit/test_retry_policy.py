"""RetryPolicy: presets, filters, jitter modes and custom decisions (no journal involved)."""

from __future__ import annotations

import doctest
import random
import re

import pytest

from durable_agents import retry
from durable_agents.errors import DurableError, StepInterruptedError
from durable_agents.retry import DEFAULT_RETRY, NO_RETRY, Jitter, RetryDecision, RetryPolicy


def test_the_module_s_examples_run() -> None:
    assert doctest.testmod(retry).failed == 0


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        # (max_attempts, initial delay, backoff rate, max delay, jitter): the AWS SDK's values,
        # except default(), which is ours (docs/retries.md says why).
        (RetryPolicy.none(), (1, 1.0, 2.0, 300.0, 0.5)),
        (RetryPolicy.default(), (3, 1.0, 2.0, 300.0, 0.5)),
        (RetryPolicy.transient(), (3, 5, 2, 300.0, Jitter.HALF)),
        (RetryPolicy.resource_availability(), (5, 5, 2, 300, Jitter.FULL)),
        (RetryPolicy.critical(), (10, 1, 1.5, 60, Jitter.NONE)),
    ],
)
def test_presets(preset: RetryPolicy, expected: tuple[object, ...]) -> None:
    got = (
        preset.max_attempts,
        preset.initial_delay_seconds,
        preset.backoff_rate,
        preset.max_delay_seconds,
        preset.jitter,
    )
    assert got == expected


def test_none_and_default_are_the_runtime_s_own_policies() -> None:
    assert RetryPolicy.none() is NO_RETRY
    assert RetryPolicy.default() is DEFAULT_RETRY


def test_a_fraction_jitter_draws_what_it_always_drew() -> None:
    """Existing policies (jitter as a fraction) keep their delays: same formula, same seed."""
    policy = RetryPolicy(max_attempts=5, initial_delay_seconds=2, jitter=0.5)
    base, spread = 4.0, 2.0  # second delay: 2 * 2**1, half of it randomised
    expected = base - spread + random.Random("op:2").random() * spread
    assert policy.delay_seconds(2, seed="op") == expected


@pytest.mark.parametrize(
    ("jitter", "low", "high"),
    [(Jitter.NONE, 8.0, 8.0), (Jitter.HALF, 4.0, 8.0), (Jitter.FULL, 0.0, 8.0), ("full", 0, 8)],
)
def test_jitter_modes_bound_the_delay(jitter: Jitter | str, low: float, high: float) -> None:
    policy = RetryPolicy(max_attempts=9, initial_delay_seconds=1, jitter=jitter)
    delays = [policy.delay_seconds(4, seed=f"run-{n}:op") for n in range(200)]
    assert all(low <= d <= high for d in delays)
    if low != high:
        assert max(delays) - min(delays) > (high - low) / 2  # actually spread out
    # Deterministic: the same seed draws the same delay.
    assert policy.delay_seconds(4, seed="run-1:op") == delays[1]


def test_an_unknown_jitter_mode_or_fraction_is_refused() -> None:
    with pytest.raises(ValueError, match="quarter"):
        RetryPolicy(jitter="quarter")
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=1.5)


def test_a_subclass_of_a_listed_type_is_retried() -> None:
    policy = RetryPolicy(retryable=(OSError,))
    assert policy.should_retry(ConnectionResetError("reset"), 1)
    assert not policy.should_retry(ValueError("bad"), 1)


def test_types_or_messages_make_an_error_retryable_and_non_retryable_wins() -> None:
    policy = RetryPolicy(
        retryable=[TimeoutError],
        retryable_messages=["Throttling", re.compile(r"^HTTP 5\d\d$")],
        non_retryable=(PermissionError,),
    )
    assert policy.retryable == (TimeoutError,)  # lists are stored as tuples
    assert policy.should_retry(TimeoutError("slow"), 1)
    assert policy.should_retry(RuntimeError("ThrottlingException: slow down"), 1)
    assert policy.should_retry(RuntimeError("HTTP 503"), 1)
    assert not policy.should_retry(RuntimeError("HTTP 503 from proxy"), 1)  # regex: search
    assert not policy.should_retry(RuntimeError("HTTP 404"), 1)
    assert not policy.should_retry(PermissionError("Throttling"), 1)
    assert not policy.should_retry(TimeoutError("slow"), 3)  # attempts exhausted


def test_without_filters_every_exception_is_retried() -> None:
    assert RetryPolicy().should_retry(KeyError("k"), 1)


def test_a_decision_function_alone_decides() -> None:
    seen: list[tuple[str, int]] = []

    def decide(error: BaseException, attempt: int) -> RetryDecision:
        seen.append((str(error), attempt))
        return RetryDecision.retry(attempt * 10) if attempt < 7 else RetryDecision.no_retry()

    policy = RetryPolicy(max_attempts=1, non_retryable=(ValueError,), decide=decide)
    assert policy.decision(ValueError("x"), 5, seed="s") == RetryDecision(True, 50.0)
    assert not policy.decision(ValueError("x"), 7, seed="s").should_retry
    assert seen == [("x", 5), ("x", 7)]


@pytest.mark.parametrize(
    "decide",
    [
        lambda error, attempt: 1 / 0,
        lambda error, attempt: True,  # not a RetryDecision
        lambda error, attempt: RetryDecision.retry(-1),
    ],
)
def test_a_broken_decision_function_does_not_retry(
    decide: retry.RetryStrategy, caplog: pytest.LogCaptureFixture
) -> None:
    policy = RetryPolicy(decide=decide)
    assert policy.decision(RuntimeError("boom"), 1, seed="s") == RetryDecision.no_retry()
    assert "retry decision function failed" in caplog.text


def test_the_interruption_is_named_by_a_listed_type_or_a_decision_function() -> None:
    assert RetryPolicy(retryable=(StepInterruptedError,)).names_interruption()
    assert RetryPolicy(retryable=(DurableError,)).names_interruption()
    assert RetryPolicy(decide=lambda e, n: RetryDecision.no_retry()).names_interruption()
    assert not RetryPolicy().names_interruption()
    assert not RetryPolicy(retryable=(Exception,)).names_interruption()
    assert not RetryPolicy(retryable_messages=("interrupted",)).names_interruption()
