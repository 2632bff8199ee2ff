"""``StepContext``: what a step's code may know about its own execution.

A step function asks for it by its signature (AWS's durable functions SDK passes one to every
step; here zero-argument steps keep working unchanged):

* it takes exactly one more required positional parameter than the arguments ``ctx.step`` was
  given (for ``ctx.step(fn)``: exactly one, as in ``ctx.step(lambda step: ...)``), or
* its first positional parameter is annotated ``StepContext``.

The context is passed first, before the step's arguments. It is not recorded and not
fingerprinted: nothing about it can make a replay diverge.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from types import FunctionType
from typing import TYPE_CHECKING, Any

from durable_agents.core.clock import Clock
from durable_agents.core.observability import ReplayAwareLogger

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True, slots=True)
class StepContext:
    """The context a step function receives when its signature asks for it.

    Attributes:
        run_id: The run.
        operation_id: The step's operation id (``<run_id>:<name>:<n>``), the same on every
            attempt: a natural idempotency key for what the step calls.
        name: The step's name.
        attempt: This attempt's number, 1-based (retries and re-runs after a crash count up).
        logger: A logger whose lines carry ``run_id``, ``agent``, ``operation_id`` (and
            ``op_id``), ``operation_name`` and ``attempt``; like
            ``ctx.logger`` it is replay-aware (a step's code only runs when it executes, so its
            lines are never repeated by a replay) and never raises.
        deadline_ms: When the invocation running this attempt must be done (epoch ms): the
            Lambda's remaining time when it started (15 minutes when unknown). Work that cannot
            finish by then should stop and fail, to be retried.

    Example:
        >>> from durable_agents import AgentRegistry, StepContext, agent
        >>> from durable_agents_local.testing import AgentTestRunner
        >>> def fetch(step: StepContext, url: str) -> str:
        ...     step.logger.info("fetching %s", url)
        ...     return f"{url} (attempt {step.attempt}, {step.remaining_ms()} ms left)"
        >>> @agent(name="fetcher", version="1", registry=AgentRegistry())
        ... def fetcher(ctx, url: str) -> str:
        ...     return ctx.step(fetch, url)
        >>> AgentTestRunner(fetcher, lease_seconds=30).run("https://example.com").output
        'https://example.com (attempt 1, 30000 ms left)'
    """

    run_id: str
    operation_id: str
    name: str
    attempt: int
    logger: ReplayAwareLogger
    deadline_ms: int
    clock: Clock

    def remaining_ms(self) -> int:
        """Milliseconds left until ``deadline_ms`` on the runtime's clock (never negative)."""
        return max(0, self.deadline_ms - self.clock.now_ms())


def _is_step_context(annotation: Any) -> bool:
    # With ``from __future__ import annotations`` the annotation is a string.
    return annotation is StepContext or (
        isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "StepContext"
    )


def first_is_step_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``'s first positional parameter is annotated ``StepContext``."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    positional = [p for p in signature.parameters.values() if p.kind in _POSITIONAL]
    return bool(positional) and _is_step_context(positional[0].annotation)


def wants_context(fn: Callable[..., Any], n_args: int) -> bool:
    """Whether ``fn`` asks for a ``StepContext`` before its ``n_args`` arguments.

    A callable without a signature (some builtins) is called as before, without it.
    """
    if type(fn) is FunctionType and not fn.__annotations__ and not hasattr(fn, "__wrapped__"):
        # The common case (a lambda, an unannotated function), answered from its code object:
        # ``inspect.signature`` on every executed step was a tenth of a short step's cost.
        n_positional = fn.__code__.co_argcount
        n_required = n_positional - len(fn.__defaults__ or ())
        return n_positional > 0 and n_required == n_args + 1
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    positional = [p for p in signature.parameters.values() if p.kind in _POSITIONAL]
    if not positional:
        return False
    if _is_step_context(positional[0].annotation):
        return True
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    # One required parameter more than the arguments: called without the context it would
    # raise TypeError, so no step that works today changes.
    return len(required) == n_args + 1


def call_step(
    ctx: OperationScope,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    op_id: str,
    name: str,
    attempt: int,
) -> Any:
    """Calls a step's function, with its ``StepContext`` first if its signature asks for it."""
    if not wants_context(fn, len(args)):
        return fn(*args)
    inv = ctx.invocation
    step = StepContext(
        run_id=inv.run_id,
        operation_id=op_id,
        name=name,
        attempt=attempt,
        logger=ctx.logger.bind(
            op_id=op_id, operation_id=op_id, operation_name=name, attempt=attempt
        ),
        deadline_ms=inv.deadline_ms,
        clock=inv.clock,
    )
    return fn(step, *args)
