"""Instrumentation hooks (plugins): what each invocation did, told to observers as it happens.

A plugin implements any of the ``Plugin`` hooks (subclass it to inherit no-op defaults) and is
given to ``Runtime(plugins=[...])`` or ``AgentTestRunner(plugins=[...])``. The hooks, in the
names of AWS's durable functions SDK:

* ``on_run_start`` — a run was created by ``start_run`` (once: not for a repeated start with
  the same idempotency key);
* ``on_invocation_start`` / ``on_invocation_end`` — around every ``Runtime.execute`` (one
  StepRunner invocation). ``is_first_invocation`` says whether it is the run's first: the
  journal it read held nothing the run had recorded yet (see ``InvocationStartInfo``);
* ``on_operation_start`` / ``on_operation_end`` — every operation the invocation takes up.
  ``replayed=True`` when its result was already recorded before the invocation took it up
  (nothing ran); otherwise it ends ``succeeded`` or ``failed`` when its result is recorded, or
  ``pending`` when the invocation ends with it unfinished (a timer, a retry delay, a wait for a
  person, the step budget, a crash). An operation completed outside any invocation (an approval
  decided, a callback completed) is reported replayed the first time the run sees it;
* ``on_operation_attempt_start`` / ``on_operation_attempt_end`` — every attempt of the
  operations that claim attempts (steps, model calls, tools): ``succeeded``, ``failed`` (with
  the error type and the next attempt's time when it is retried) or ``interrupted`` (its worker
  died; reported when that is recorded or when the next attempt is claimed).

What is reported is what the journal recorded, reported once the write landed: an attempt
starts when its claim is recorded, an operation ends when its result is. Hooks run in the
invocation's thread, in order, plugin after plugin, so keep them fast.

A hook that raises is logged (logger ``durable_agents.plugins``, with its traceback) and
ignored, whatever it raises — even ``SuspendExecution`` or ``InfrastructureError``: a plugin
never changes a run's outcome and never aborts an invocation. Only ``KeyboardInterrupt`` and
``SystemExit`` go through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class RunStartInfo:
    """A run was created (its header written; a repeated start with the same key is not).

    Attributes:
        run_id: The new run.
        agent: Its agent.
        tenant: Its tenant.
        parent_run_id: The run that invoked it, for a sub-agent's run.
    """

    run_id: str
    agent: str
    tenant: str
    parent_run_id: str | None


@dataclass(frozen=True, slots=True)
class InvocationStartInfo:
    """An invocation begins: it has read the run (reported after that read, timed from before).

    Attributes:
        run_id: The run it advances.
        target: The parallel branch it was sent to advance, if any.
        started_at_ms: When it began (the runtime's clock).
        deadline_ms: When it must be done (the Lambda's remaining time; 15 minutes if unknown).
        is_first_invocation: The run's first invocation, by what this one read (AWS's SDK's
            name and meaning: the first invocation of the execution). True when the run it
            read, strongly consistently, at its start, was in its first generation and its
            journal held no entry of its own (none but a rerun's copies and migration
            records): no operation taken up yet. That read decides, never what a warm
            container remembers. So:

            * a **rerun** (``Runtime.rerun``) is a new run: its first invocation is first,
              although it replays the operations copied from the original (copies are the
              original's records, not its own);
            * a run past **continue-as-new** is the same run: the first invocation of a later
              generation is not first (the generation's opening was recorded by the switch);
            * **duplicate deliveries** of the first ``Step Ready`` event that both read the
              journal before either recorded anything both report True: the flag says what
              an invocation saw, not which one won (``on_run_start`` is never called twice);
            * an invocation that recorded nothing (it crashed before its first write)
              leaves the next one first as well, as a retried invocation is in AWS's SDK;
            * False when the invocation could not read the run (its end then has an
              ``error_type``): True is only ever said on a read that showed it.
    """

    run_id: str
    target: str | None
    started_at_ms: int
    deadline_ms: int
    # A default (False: not shown by a read), so that infos built without it keep working.
    is_first_invocation: bool = False


@dataclass(frozen=True, slots=True)
class InvocationEndInfo:
    """An invocation ended.

    Attributes:
        run_id: The run.
        target: The parallel branch it advanced, if any.
        outcome: What it did (``OutcomeKind`` value: ``succeeded``, ``suspended``, ``noop``…),
            or None if an exception escaped it (``error_type``; Lambda retries the event).
        executed: The operation ids it executed.
        detail: The outcome's detail.
        duration_ms: How long it took.
        error_type: The exception that escaped it, if any.
        agent: The run's agent ("" if the run could not be read).
        is_first_invocation: What its start said (``InvocationStartInfo.is_first_invocation``).
    """

    run_id: str
    target: str | None
    outcome: str | None
    executed: tuple[str, ...]
    detail: str
    duration_ms: int
    error_type: str | None
    agent: str = ""
    is_first_invocation: bool = False


@dataclass(frozen=True, slots=True)
class OperationStartInfo:
    """An invocation takes an operation up.

    Attributes:
        run_id: The run.
        op_id: The operation id.
        kind: The operation kind (``step``, ``wait``, ``tool``…).
        name: The operation name.
        replayed: Its result was recorded already: it is only replayed, nothing runs.
        sub_kind: What a composite operation recorded under a general kind is
            (``wait_for_callback`` for that scope, whose kind is ``child``; the SDK's
            ``sub_type``); None for the others. Told whether or not the record is marked
            (a scope recorded before the marker existed).
    """

    run_id: str
    op_id: str
    kind: str
    name: str
    replayed: bool
    sub_kind: str | None = None


@dataclass(frozen=True, slots=True)
class OperationEndInfo:
    """An invocation is done with an operation.

    Attributes:
        run_id: The run.
        op_id: The operation id.
        kind: The operation kind.
        name: The operation name.
        replayed: Its result was recorded before this invocation took it up.
        outcome: ``succeeded``, ``failed``, or ``pending`` (not finished in this invocation).
        attempts: The attempts claimed so far (0 for operations without attempts).
        duration_ms: From its start in this invocation to its end; None when replayed.
        error_type: The recorded error's type, if it failed.
        model_id: For a model call this invocation recorded: the model that answered.
        input_tokens: For a model call this invocation recorded: the tokens it was sent.
        output_tokens: For a model call this invocation recorded: the tokens it answered.
        sub_kind: As ``OperationStartInfo.sub_kind``.
    """

    run_id: str
    op_id: str
    kind: str
    name: str
    replayed: bool
    outcome: str
    attempts: int
    duration_ms: int | None
    error_type: str | None
    model_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    sub_kind: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptStartInfo:
    """An attempt was claimed (recorded): its code is about to run.

    Attributes:
        run_id: The run.
        op_id: The operation id.
        kind: The operation kind.
        name: The operation name.
        attempt: The attempt number, 1-based.
    """

    run_id: str
    op_id: str
    kind: str
    name: str
    attempt: int


@dataclass(frozen=True, slots=True)
class AttemptEndInfo:
    """An attempt's outcome was recorded.

    Attributes:
        run_id: The run.
        op_id: The operation id.
        kind: The operation kind.
        name: The operation name.
        attempt: The attempt number, 1-based.
        outcome: ``succeeded``, ``failed`` or ``interrupted`` (its worker died).
        error_type: The recorded error's type, if it failed.
        duration_ms: From its claim to its outcome, when both happened in this invocation.
        next_attempt_at_ms: When the next attempt is due, if it is retried.
    """

    run_id: str
    op_id: str
    kind: str
    name: str
    attempt: int
    outcome: str
    error_type: str | None
    duration_ms: int | None
    next_attempt_at_ms: int | None


class Plugin(Protocol):
    """Instrumentation hooks. Subclass to inherit no-op defaults and override what you need.

    Example:
        >>> from durable_agents import AgentRegistry, Plugin, agent
        >>> from durable_agents_local.testing import AgentTestRunner
        >>> class Attempts(Plugin):
        ...     def __init__(self):
        ...         self.seen = []
        ...     def on_operation_attempt_end(self, info):
        ...         self.seen.append((info.name, info.attempt, info.outcome))
        >>> @agent(name="plugged", version="1", registry=AgentRegistry())
        ... def plugged(ctx, _):
        ...     return ctx.step(lambda: "done", name="work")
        >>> attempts = Attempts()
        >>> AgentTestRunner(plugged, plugins=[attempts]).run(None).output
        'done'
        >>> attempts.seen
        [('work', 1, 'succeeded')]
    """

    replayed_operations: bool = True
    """Whether to be told about operations an invocation only replays (``on_operation_start``
    and ``on_operation_end`` with ``info.replayed``). A plugin that ignores them sets False:
    with no plugin wanting them, a replay builds no reports at all (a cold container replays
    every operation of a run)."""

    def on_run_start(self, info: RunStartInfo) -> None:
        """A run was created (once per run: the conditional create is what says so)."""
        return None

    def on_invocation_start(self, info: InvocationStartInfo) -> None:
        """An invocation begins (called once it has read the run; ``info.is_first_invocation``)."""
        return None  # a default: not abstract, so a subclass overrides only what it needs

    def on_invocation_end(self, info: InvocationEndInfo) -> None:
        """An invocation ended (also when an exception escaped it)."""
        return None

    def on_operation_start(self, info: OperationStartInfo) -> None:
        """The invocation takes an operation up (``info.replayed``: only to replay it)."""
        return None

    def on_operation_end(self, info: OperationEndInfo) -> None:
        """The invocation is done with an operation."""
        return None

    def on_operation_attempt_start(self, info: AttemptStartInfo) -> None:
        """An attempt's claim was recorded."""
        return None

    def on_operation_attempt_end(self, info: AttemptEndInfo) -> None:
        """An attempt's outcome was recorded."""
        return None
