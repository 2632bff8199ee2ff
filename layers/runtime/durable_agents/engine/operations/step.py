"""``ctx.step``: claim the attempt, run it, record the result — or replay the record."""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from durable_agents.core.leases import lease_end, lease_expired
from durable_agents.core.log_context import note_operation
from durable_agents.core.models import EntryType, OpKind
from durable_agents.core.semantics import StepSemantics
from durable_agents.core.serde import (
    Serdes,
    decode_value,
    encode_value,
    error_info,
    rebuild_error,
    replay_value,
)
from durable_agents.engine.crash_budget import CRASH_BUDGET, CrashBudgetExceededError
from durable_agents.engine.fingerprints import NO_ARGS, Fingerprint
from durable_agents.engine.invocation import Reason, Suspension
from durable_agents.engine.replay_index import OpRecord
from durable_agents.engine.step_context import call_step
from durable_agents.errors import (
    EntryConflictError,
    PayloadError,
    StepInterruptedError,
    SuspendExecution,
)
from durable_agents.llm.types import ModelThrottledError
from durable_agents.retry import DEFAULT_RETRY, NO_RETRY, RetryDecision, RetryPolicy

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope


@lru_cache(maxsize=1024)
def _return_hint(fn: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(fn).get("return")
    except Exception:
        return None


def return_hint(fn: Callable[..., Any]) -> Any:
    """The return annotation of ``fn`` (None if absent or unhashable)."""
    annotations = getattr(fn, "__annotations__", None)
    if not annotations or "return" not in annotations:
        return None  # lambdas and unannotated functions: no lookup, nothing cached
    try:
        return _return_hint(fn)
    except TypeError:  # unhashable callable
        return None


# ``StepSemantics.value`` is a Python-level descriptor call; this is read on every claim.
_SEMANTICS_VALUES = {member: member.value for member in StepSemantics}


@dataclass(frozen=True, slots=True)
class StepInfo:
    """What an operation's code may know about its own execution."""

    operation_id: str
    attempt: int


def run_step(
    ctx: OperationScope,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    name: str,
    retry: RetryPolicy | None,
    semantics: StepSemantics,
    result_type: Any,
    *,
    kind: OpKind = OpKind.STEP,
    pass_info: bool = False,
    fingerprint: Fingerprint | None = None,
    ready: Callable[[], None] | None = None,
    serdes: Serdes | None = None,
) -> Any:
    """Executes or replays one step (see ``DurableContext.step``).

    Other leaf operations (model calls) reuse it with their own ``kind``; with ``pass_info``
    the code receives a ``StepInfo`` (operation id, attempt) as its first argument. The input
    fingerprint (``args``'s unless ``fingerprint`` is given) goes into the claim's meta.
    ``ready`` is called when the step is about to be claimed and executed (never on replay):
    it may refuse by raising, before anything is written.
    """
    if fingerprint is None:
        fingerprint = Fingerprint.of_args(args) if args else NO_ARGS
    replayed = ctx.replayed_record(kind, name, fingerprint)
    if replayed is not None:  # the common case, kept short: a finished step replayed
        hint = result_type if result_type is not None else return_hint(fn)
        return replayed.replayed(hint, serdes, replay_value)
    position, op_id, record = ctx.next_operation(kind, name, fingerprint)
    hint = result_type if result_type is not None else return_hint(fn)
    if record is not None and record.result is not None:
        return record.replayed(hint, serdes, replay_value)
    inv = ctx.invocation

    policy = retry or DEFAULT_RETRY
    now = inv.now_ms()
    attempt = record.attempts if record is not None else 0
    if record is not None and record.last_started is not None:
        started = record.last_started
        finished = record.last_failed is not None and record.last_failed.attempt >= started.attempt
        if not finished:
            lease = started.lease_expires_at_ms or 0
            if not lease_expired(lease, now):
                # Another invocation claimed this attempt and may still be running it.
                raise SuspendExecution(Reason.CONTENDED, wake_at_ms=lease_end(lease), detail=op_id)
            _handle_interrupted(ctx, position, op_id, name, record, policy, semantics, kind)
    last_failed = record.last_failed if record is not None else None
    if last_failed is not None and last_failed.attempt == attempt:
        due = last_failed.due_at_ms or 0
        if due > now:
            raise SuspendExecution(Reason.TIMER, wake_at_ms=due, detail=op_id)

    inv.take_budget(op_id)  # first: a budget of 0 (a dry run) stops before any check
    now = (
        inv.now_ms()
    )  # again: a parked agent (durable_agents.engine.sticky.parking) goes on here later
    if ready is not None:
        ready()
    inv.hooks.before_claim(op_id)
    attempt += 1
    claim = inv.entry(
        position,
        op_id,
        kind,
        name,
        EntryType.STARTED,
        attempt=attempt,
        lease_expires_at_ms=now + inv.lease_ms,
        meta={"semantics": _SEMANTICS_VALUES[semantics], **fingerprint.meta()},
    )
    try:
        inv.commit([claim])
    except EntryConflictError as exc:
        raise inv.contended(op_id, exc) from exc
    inv.executed.append(op_id)

    inv.hooks.before_execute(op_id, attempt)
    note_operation(op_id, name, attempt)  # its lines (and the runtime's) name the attempt
    inv.in_step = True
    try:
        if pass_info:
            value = fn(StepInfo(op_id, attempt), *args)
        else:  # with its StepContext first if its signature asks for it
            value = call_step(ctx, fn, args, op_id, name, attempt)
        payload = encode_value(value, hint, serdes)
        # Read back before recording: a value a replay could not read is a failure, now.
        value = decode_value(payload, hint, serdes)
    except Exception as exc:
        inv.in_step = False
        failures = _failures(record) + 1  # crashes before this attempt do not count
        return _record_failure(ctx, position, op_id, name, attempt, failures, exc, policy, kind)
    finally:
        inv.in_step = False
    inv.hooks.after_execute(op_id, attempt)

    result = inv.entry(
        position, op_id, kind, name, EntryType.SUCCEEDED, attempt=attempt, value=payload
    )
    _record_result(ctx, result, op_id)
    return value


def _record_result(ctx: OperationScope, entry: Any, op_id: str) -> None:
    inv = ctx.invocation
    try:
        inv.commit([entry])
    except EntryConflictError as exc:
        # Only possible if our lease expired and another attempt recorded first: its result is
        # the truth, and that invocation publishes what follows.
        raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
    inv.hooks.after_record(op_id)


def _record_failure(
    ctx: OperationScope,
    position: str,
    op_id: str,
    name: str,
    attempt: int,
    failures: int,
    exc: Exception,
    policy: RetryPolicy,
    kind: OpKind,
    *,
    interrupted: bool = False,
) -> Any:
    """Records a failed attempt: a retry after the policy's delay, or the final error.

    ``attempt`` numbers the claim; ``failures`` counts the attempts that failed (this one
    included) — what the retry policy's ``max_attempts`` and backoff are about.
    """
    inv = ctx.invocation
    info = error_info(exc)
    # A payload that cannot be recorded fails the same way on every attempt: never retry it.
    # Asked once: the delay is recorded (due_at_ms) and read back, never recomputed. A
    # provider's throttle is its own limit, not the agent's failure: a durable back-off.
    throttled = isinstance(exc, ModelThrottledError)
    if isinstance(exc, ModelThrottledError):
        decision = throttle_backoff(exc, attempt - failures, seed=op_id)
    elif isinstance(exc, PayloadError):
        decision = None
    else:
        decision = policy.decision(exc, failures, seed=op_id)
    if decision is not None and decision.should_retry:
        due = inv.now_ms() + int(decision.delay_seconds * 1000)
        failed = inv.entry(
            position,
            op_id,
            kind,
            name,
            EntryType.ATTEMPT_FAILED,
            attempt=attempt,
            error=info,
            due_at_ms=due,
            meta={"interrupted": True} if interrupted else {"throttled": True} if throttled else {},
        )
        try:
            inv.commit(
                [failed],
                Suspension(
                    due, {"kind": "retry", "op_id": op_id, "attempt": attempt + 1, "until_ms": due}
                ),
            )
        except EntryConflictError as conflict:
            raise SuspendExecution(Reason.CONTENDED, detail=op_id) from conflict
        raise SuspendExecution(Reason.TIMER, wake_at_ms=due, detail=f"retry {op_id}") from exc
    final = inv.entry(position, op_id, kind, name, EntryType.FAILED, attempt=attempt, error=info)
    _record_result(ctx, final, op_id)
    rebuilt = rebuild_error(info)
    # A typed wrapper rebuilt keeps the error it wraps as its cause, as on every replay.
    raise rebuilt from (rebuilt.__cause__ or exc)


def _failures(record: OpRecord | None) -> int:
    """How many attempts failed (a crash pause is not a failure, nor a provider's throttle)."""
    if record is None:
        return 0
    return sum(
        1
        for e in record.entries
        if e.type is EntryType.ATTEMPT_FAILED
        and not e.meta.get("crash_pause")
        and not e.meta.get("throttled")
    )


THROTTLE_BACKOFF = RetryPolicy(initial_delay_seconds=2, backoff_rate=2, max_delay_seconds=300)
"""How long a throttled model call waits when its provider did not say: 2 s doubling to 5
minutes, jittered from the operation id (so throttled calls do not all come back at once)."""


def throttle_backoff(exc: ModelThrottledError, earlier: int, *, seed: str) -> RetryDecision:
    """When to call again after a provider's throttle: what it asked for, else a back-off.

    Args:
        exc: The throttle.
        earlier: Attempts of this operation that did not fail by the agent's doing (throttles
            and crashes) before this one: the back-off grows with them.
        seed: What makes the jitter the same on every replay (the operation id).
    """
    if exc.retry_after_seconds is not None:
        return RetryDecision.retry(max(exc.retry_after_seconds, 0.0))
    return RetryDecision.retry(THROTTLE_BACKOFF.delay_seconds(max(earlier, 0) + 1, seed=seed))


def _interruptions(record: OpRecord) -> int:
    """Claimed attempts that never finished, since the last crash pause was redriven."""
    failed = {e.attempt: e for e in record.entries if e.type is EntryType.ATTEMPT_FAILED}
    last = record.last_started.attempt if record.last_started is not None else 0
    count = 0
    for attempt in range(1, last + 1):
        entry = failed.get(attempt)
        if entry is None:
            count += 1  # claimed, then nothing: its worker died
        elif entry.meta.get("crash_pause"):
            count = 0  # a person redrove the run after this pause: a fresh budget
    return count


def _handle_interrupted(
    ctx: OperationScope,
    position: str,
    op_id: str,
    name: str,
    record: OpRecord,
    policy: RetryPolicy,
    semantics: StepSemantics,
    kind: OpKind,
) -> None:
    """Decides what to do with an attempt whose claimant died (its lease expired).

    At-least-once: the work runs again, and the crash does not count as a failed attempt —
    only the crash budget (``durable_agents.engine.crash_budget``) bounds how often, and exhausting
    it pauses the run for a person. At-most-once: the interruption is a failed attempt like
    an error (the work may have happened), recorded and retried only as the policy says.

    Raises:
        SuspendExecution: To wait for the policy's delay before the next attempt.
        StepInterruptedError: If the policy does not retry the interruption.
        CrashBudgetExceededError: If workers died too often (the run is paused).
    """
    assert record.last_started is not None
    attempt = record.last_started.attempt
    interrupted = StepInterruptedError(op_id, attempt)
    if semantics is StepSemantics.AT_MOST_ONCE:
        failures = _failures(record) + 1
        # The work may have happened: retried only where the policy names the interruption
        # itself, never merely because it retries every ``Exception``.
        listed = policy.names_interruption()
        if not listed:
            # AWS's SDK retries it under any retry-everything strategy: the recorded error says
            # why it was not retried here, and how to opt in.
            interrupted = StepInterruptedError(op_id, attempt, not_retried=True)
        _record_failure(
            ctx,
            position,
            op_id,
            name,
            attempt,
            failures,
            interrupted,
            policy if listed else NO_RETRY,
            kind,
            interrupted=True,
        )
        return  # not reached: _record_failure suspends or raises
    count = _interruptions(record)
    if count <= CRASH_BUDGET:
        return  # the caller claims attempt + 1
    inv = ctx.invocation
    exhausted = CrashBudgetExceededError(op_id, count)
    marker = inv.entry(
        position,
        op_id,
        kind,
        name,
        EntryType.ATTEMPT_FAILED,
        attempt=attempt,
        error=error_info(exhausted),
        due_at_ms=inv.now_ms(),
        meta={"interrupted": True, "crash_pause": True},
    )
    try:
        inv.commit([marker])
    except EntryConflictError as exc:
        raise inv.contended(op_id, exc) from exc
    inv.fault = exhausted  # the runtime pauses the run; agent code cannot carry on past it
    raise exhausted
