"""``DurableContext``: what an agent function uses to do anything non-deterministic."""

from __future__ import annotations

import random as _random
import uuid as _uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from durable_agents.agent import AgentDefinition
from durable_agents.errors import NestedOperationError, ReplayDivergedError
from durable_agents.fingerprints import Fingerprint
from durable_agents.ids import check_name, format_position, name_of
from durable_agents.invocation import Invocation, OpRecord
from durable_agents.llm.types import LlmRequest, LlmResponse, ModelConfig
from durable_agents.models import OpKind
from durable_agents.observability import ReplayAwareLogger
from durable_agents.operations.parallel import BatchResult, CompletionPolicy
from durable_agents.retry import RetryPolicy
from durable_agents.semantics import StepSemantics
from durable_agents.serde import canonical_json
from durable_agents.side_effects.tools import Tool, ToolNotApprovedError
from durable_agents.waits.approval import ApprovalDecision
from durable_agents.waits.callback import Callback
from durable_agents.waits.principals import check_approvers

T = TypeVar("T")

_UUID_NAMESPACE = _uuid.UUID("6f1d7a52-8d1c-4d8e-9a57-1f0f4f6b2c11")


class DurableContext:
    """The handle an agent function receives. Each operation is recorded once and replayed.

    Operation ids are derived from the run and the position in the code path:
    ``<run_id>:<name>:<n>`` for the n-th operation of the run, and
    ``<parent op id>/<name>:<n>`` inside a child context. On replay each operation checks that
    the journal recorded the same kind and name at its position, and the same input fingerprint
    where it has an input (see ``durable_agents.fingerprints``); otherwise
    ``ReplayDivergedError`` stops the run visibly.

    Attributes:
        run_id: The id of the run being executed.
        logger: A logger that stays quiet while recorded operations are being replayed.
    """

    __slots__ = (
        "_counter",
        "_id_prefix",
        "_inv",
        "_n_random",
        "_n_uuid",
        "_pos_prefix",
        "logger",
        "run_id",
    )

    def __init__(self, invocation: Invocation, *, id_prefix: str, pos_prefix: str, logger: Any):
        self._inv = invocation
        self._id_prefix = id_prefix
        self._pos_prefix = pos_prefix
        self._counter = 0
        self._n_uuid = 0
        self._n_random = 0
        self.run_id = invocation.run_id
        self.logger: ReplayAwareLogger = logger

    # -- operations -------------------------------------------------------------------------

    def step(
        self,
        fn: Callable[..., T],
        *args: Any,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        semantics: StepSemantics = StepSemantics.AT_LEAST_ONCE,
        result_type: Any = None,
    ) -> T:
        """Runs ``fn(*args)`` once and records its result; replays return the record.

        Args:
            fn: The work: reads, computation, an external call. It must not call ``ctx``.
            *args: Arguments passed to ``fn``. Not recorded, but fingerprinted when they are
                JSON values or pydantic models: a replay with other arguments diverges. Pass the
                input here rather than capturing it in a closure (closures are not checked).
            name: The operation name (defaults to ``fn.__name__``).
            retry: The retry policy (default: 3 attempts, exponential backoff with jitter).
            semantics: AT_LEAST_ONCE (an interrupted attempt runs again) or AT_MOST_ONCE
                (an interrupted attempt is a failure, retried only if the policy lists
                ``StepInterruptedError``).
            result_type: The type to validate the recorded result against (defaults to
                ``fn``'s return annotation).

        Returns:
            The result, exactly as a replay will return it (serializer round trip).

        Raises:
            Exception: The step's final error, with the same type and message on every replay.
            ReplayDivergedError: If the journal recorded another operation at this position.

        Example:
            >>> def research(ctx, topic: str) -> str:
            ...     return ctx.step(lambda: topic.upper(), name="shout")
        """
        from durable_agents.operations.step import run_step  # noqa: PLC0415 - avoid a cycle

        op_name = check_name(name) if name is not None else name_of(fn)
        return run_step(self, fn, args, op_name, retry, semantics, result_type)  # type: ignore[no-any-return]

    def tool(self, tool: Tool[Any, T], request: Any, *, name: str | None = None) -> T:
        """Calls a tool that changes the outside world, exactly once, with recovery.

        PREPARE records the canonical request (sorted-key JSON of the validated model) and an
        idempotency key derived from the run and position; EXECUTE calls the tool with that key;
        COMMIT records the result and the external id in one transaction. If the process dies
        in between, recovery asks the provider (``lookup``), re-executes only when that is
        safe (not found, or ``idempotent``), compensates a ``reversible`` tool, and otherwise
        pauses the run for a person (``NEEDS_REVIEW``). The request is never rebuilt.

        Args:
            tool: The declared tool (``@tool``).
            request: The request model, or a dict it validates.
            name: The operation name (defaults to the tool name).

        Returns:
            The tool's result, exactly as a replay will return it.

        Raises:
            ToolRejectedError: The provider definitely refused (recorded; same on replay).
            ToolAbandonedError: A person abandoned the call in review.
            ToolGaveUpError: Every allowed attempt failed and the provider confirms nothing
                happened.
            ToolNotApprovedError: The tool requires approval and a person rejected the call.
            ApprovalTimeoutError: The tool requires approval and nobody decided in time.
            pydantic.ValidationError: If ``request`` does not match the tool's request model.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.tool import run_tool  # noqa: PLC0415

        op_name = check_name(name) if name is not None else tool.name
        model = tool.request_model.model_validate(request)
        if tool.needs_approval(model):
            decision = self.wait_for_approval(
                f"{op_name}-approval",
                request=model,
                approvers=list(tool.approvers),
                summary=f"Run {tool.name} with the request below?",
                timeout=tool.approval_timeout_seconds,
            )
            if not decision.approved:
                raise ToolNotApprovedError(tool.name, decision.decided_by, decision.comment)
            # Execute exactly what the person approved (a replay computing another request has
            # already diverged at the approval, whose fingerprint is the request's).
            request = tool.request_model.model_validate_json(decision.request)
        return run_tool(self, tool, request, op_name)  # type: ignore[no-any-return]

    def emit(self, detail_type: str, detail: Any, *, name: str = "emit") -> str:
        """Publishes an event through the transactional outbox, exactly once per position.

        The event is written into the journal as this operation's record (one conditional
        write); the relay (DynamoDB stream → Relay function → EventBridge) publishes it with
        ``event_id`` = the operation id. A crash can neither lose the event (it is in the
        journal before the run moves on) nor create a second one (replay returns the record);
        the relay delivers at least once, so consumers dedupe on ``event_id``.

        Args:
            detail_type: The EventBridge detail type (1-128 characters).
            detail: The event detail (JSON; secrets are refused).
            name: The operation name.

        Returns:
            The event id.

        Raises:
            ValueError: If ``detail_type`` is empty or too long.
            SecretSerializationError: If the detail holds a secret.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.emit import run_emit  # noqa: PLC0415

        return run_emit(self, detail_type, detail, check_name(name))

    def llm(
        self,
        name: str,
        request: LlmRequest,
        *,
        config: ModelConfig,
        stream: bool = False,
        retry: RetryPolicy | None = None,
    ) -> LlmResponse:
        """Calls the model once; the whole response is recorded and replayed, never re-asked.

        Args:
            name: The operation name (for example ``turn-3``).
            request: The messages and tool specs.
            config: The versioned model configuration (model id, temperature, prompt, …).
            stream: Stream text chunks to the stream cache while the call runs.
            retry: The retry policy for transient provider errors.

        Returns:
            The recorded response: content blocks, tool calls, stop reason, usage, model id.

        Raises:
            ConfigurationError: If no provider serves ``config.provider``.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.llm import run_llm  # noqa: PLC0415

        return run_llm(self, check_name(name), request, config, stream=stream, retry=retry)

    def invoke(self, agent: AgentDefinition[Any, T], value: Any, *, name: str | None = None) -> T:
        """Runs a sub-agent as a child run and waits for its output (holding no compute).

        The child is started exactly once, however often this run replays: its id comes from
        this operation's position and creating it is a conditional write.

        Args:
            agent: The sub-agent (what ``@agent`` returned); it must be deployed too.
            value: Its input.
            name: The operation name (defaults to the agent name).

        Returns:
            The child's output.

        Raises:
            ChildRunFailedError: If the child run failed (its error type and message inside).
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.invoke import run_invoke  # noqa: PLC0415

        return run_invoke(self, agent, value, check_name(name or agent.name))  # type: ignore[no-any-return]

    def wait_for_condition(
        self,
        check: Callable[[Any], Any],
        *,
        initial_state: Any,
        until: Callable[[Any], bool],
        name: str = "condition",
        max_attempts: int = 60,
        delay_seconds: float = 5.0,
        backoff_rate: float = 1.5,
        max_delay_seconds: float = 300.0,
    ) -> Any:
        """Polls durably: ``state = check(state)`` until ``until(state)``, sleeping in between.

        Each check is a recorded step and each pause a durable timer, so the state threads
        through suspensions and crashes; nothing is held while waiting.

        Returns:
            The first state for which ``until`` is true.

        Raises:
            ConditionNotMetError: If ``max_attempts`` checks did not satisfy ``until``.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.condition import run_condition  # noqa: PLC0415

        return run_condition(
            self,
            check_name(name),
            check,
            initial_state,
            until,
            max_attempts,
            delay_seconds,
            backoff_rate,
            max_delay_seconds,
        )

    def parallel(
        self,
        branches: Sequence[Callable[[DurableContext], Any]],
        *,
        name: str = "parallel",
        completion: CompletionPolicy | None = None,
        max_concurrency: int | None = None,
    ) -> BatchResult[Any]:
        """Runs branches as independent child scopes; on Lambda, each in its own invocation.

        Args:
            branches: Functions ``fn(child_ctx)``; results must be JSON values.
            name: The operation name.
            completion: When the batch is done (default: all branches, failing on the first
                failure).
            max_concurrency: At most this many branches in progress at a time.

        Returns:
            A ``BatchResult`` with every branch's outcome in index order (call
            ``raise_on_failure()`` to turn an exceeded failure tolerance into an error).

        Raises:
            ValueError: If ``max_concurrency`` is below 1.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.parallel import ALL_SUCCESSFUL, run_batch  # noqa: PLC0415

        return run_batch(
            self,
            OpKind.PARALLEL,
            check_name(name),
            list(branches),
            completion or ALL_SUCCESSFUL,
            max_concurrency,
        )

    def map(
        self,
        items: Sequence[Any],
        fn: Callable[[DurableContext, Any, int], Any],
        *,
        name: str = "map",
        completion: CompletionPolicy | None = None,
        max_concurrency: int | None = None,
    ) -> BatchResult[Any]:
        """Runs ``fn(child_ctx, item, index)`` for every item, like ``parallel``.

        Raises:
            ValueError: If ``max_concurrency`` is below 1.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.parallel import ALL_SUCCESSFUL, run_batch  # noqa: PLC0415

        branches = [
            (lambda child, item=item, index=index: fn(child, item, index))
            for index, item in enumerate(items)
        ]
        return run_batch(
            self,
            OpKind.MAP,
            check_name(name),
            branches,
            completion or ALL_SUCCESSFUL,
            max_concurrency,
        )

    def wait_for_approval(
        self,
        name: str,
        *,
        request: Any,
        approvers: list[str],
        summary: str = "",
        timeout: float | timedelta | None = None,
    ) -> ApprovalDecision:
        """Asks people to approve ``request``; the run holds no compute while it waits.

        The complete pending approval (the exact request as canonical JSON, the summary, who
        may decide, the deadline) is recorded with the run's wait in one transaction before the
        invocation returns, and an ``Approval Requested`` event goes out. The decision is
        recorded once, with who and when, and returned here — on the first run and on every
        replay alike.

        Args:
            name: The operation name.
            request: What will happen if approved (a pydantic model or JSON value).
            approvers: Who may decide: ``"user:<subject or email>"``, ``"group:<name>"``,
                ``"iam:<ARN or ARN prefix ending in *>"``.
            summary: One or two sentences for the person.
            timeout: Seconds (or a timedelta) until the approval expires (None = never).

        Returns:
            The decision (``approved`` True or False, by whom, the comment).

        Raises:
            ApprovalTimeoutError: If nobody decided before the deadline.
            ValueError: If ``approvers`` is empty or malformed.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.waits.approval import (  # noqa: PLC0415
            ApprovalSpec,
            run_wait_for_approval,
        )

        spec = ApprovalSpec(
            request=canonical_json(request),
            summary=summary,
            approvers=check_approvers(approvers),
            timeout_ms=_ms(timeout),
        )
        # Fingerprinted from the value (sets sorted), not from the request text shown.
        return run_wait_for_approval(self, check_name(name), spec, Fingerprint.of_value(request))

    def create_callback(
        self,
        name: str,
        *,
        timeout: float | timedelta | None = None,
        heartbeat_timeout: float | timedelta | None = None,
    ) -> Callback:
        """Creates a callback an external system completes with ``POST /callbacks/{id}/…``.

        Args:
            name: The operation name.
            timeout: Seconds (or a timedelta) until it expires (None = never).
            heartbeat_timeout: The longest silence allowed between heartbeats.

        Returns:
            A handle: pass ``callback_id`` on, then call ``result()`` to wait for it.

        Raises:
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.waits.callback import run_create_callback  # noqa: PLC0415

        return run_create_callback(self, check_name(name), _ms(timeout), _ms(heartbeat_timeout))

    def wait_for_callback(
        self,
        name: str,
        submitter: Callable[[str], Any],
        *,
        timeout: float | timedelta | None = None,
        heartbeat_timeout: float | timedelta | None = None,
    ) -> Any:
        """Creates a callback, hands its id to ``submitter`` (a recorded step), and waits.

        Raises:
            CallbackFailedError: If the external system reported failure.
            CallbackTimeoutError: If the deadline passed or heartbeats stopped first.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        callback = self.create_callback(name, timeout=timeout, heartbeat_timeout=heartbeat_timeout)
        self.step(submitter, callback.callback_id, name=f"{name}-submit")
        return callback.result()

    def wait(self, duration: float | timedelta, *, name: str = "wait") -> None:
        """Suspends the run for ``duration`` (seconds or a timedelta) without holding compute.

        Raises:
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.wait import run_wait  # noqa: PLC0415

        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        run_wait(self, float(seconds), check_name(name))

    def run_in_child_context(
        self,
        fn: Callable[[DurableContext], T],
        *,
        name: str | None = None,
        result_type: Any = None,
    ) -> T:
        """Runs ``fn(child_ctx)`` as one operation with its own nested operation ids.

        Once the child's result is recorded, replays return it without running ``fn`` again.

        Raises:
            Exception: The child's final error, re-raised identically on replay.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.child import run_child  # noqa: PLC0415

        op_name = check_name(name) if name is not None else name_of(fn)
        return run_child(self, fn, op_name, result_type)  # type: ignore[no-any-return]

    def now(self) -> datetime:
        """Returns the current time (UTC), recorded on first execution and replayed after.

        Raises:
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.operations.now import run_now  # noqa: PLC0415

        return run_now(self)

    def uuid(self) -> _uuid.UUID:
        """Returns a UUID that is the same on every replay (derived from the position)."""
        self._n_uuid += 1
        return _uuid.uuid5(_UUID_NAMESPACE, f"{self._id_prefix}uuid:{self._n_uuid}")

    def random(self) -> float:
        """Returns a float in [0, 1) that is the same on every replay (seeded by position)."""
        self._n_random += 1
        return _random.Random(f"{self._id_prefix}random:{self._n_random}").random()

    # -- plumbing for operation modules ------------------------------------------------------

    @property
    def invocation(self) -> Invocation:
        """The invocation this context belongs to (for operation modules)."""
        return self._inv

    def next_operation(
        self, kind: OpKind, name: str, fingerprint: Fingerprint | None = None
    ) -> tuple[str, str, OpRecord | None]:
        """Allocates the next position and checks the journal's record at it.

        Args:
            kind: The operation kind the code asks for.
            name: Its name.
            fingerprint: Its input's fingerprint, compared with the recorded one (if the record
                has one) so that a same-named operation with another input cannot take the
                recorded result. None for operations without an input.

        Returns:
            The position path, the operation id and the record at that position (if any).

        Raises:
            ReplayDivergedError: If another kind or name, or another input, is recorded at
                this position.
            NestedOperationError: If called from inside a step function.
        """
        inv = self._inv
        if inv.fault is not None:
            raise inv.fault
        if inv.in_step:
            raise NestedOperationError(
                f"{kind} {name!r} was called inside a step; steps are leaves — call it from "
                "the agent function or a child context"
            )
        self._counter += 1
        position = format_position(self._pos_prefix, self._counter)
        op_id = f"{self._id_prefix}{name}:{self._counter}"
        record = inv.records.get(position)
        if record is not None and (record.kind is not kind or record.name != name):
            inv.fault = ReplayDivergedError(
                record.op_id,
                recorded_kind=str(record.kind),
                recorded_name=record.name,
                requested_kind=str(kind),
                requested_name=name,
            )
            raise inv.fault
        mismatch = None
        if record is not None and fingerprint is not None:
            mismatch = fingerprint.mismatch(record)
        if record is not None and mismatch is not None:
            # Same kind and name, another input: a loop whose items changed would otherwise
            # hand this position another item's recorded result.
            inv.fault = ReplayDivergedError(
                record.op_id,
                recorded_kind=str(record.kind),
                recorded_name=record.name,
                requested_kind=str(kind),
                requested_name=name,
                recorded_fingerprint=mismatch[0],
                requested_fingerprint=mismatch[1],
            )
            raise inv.fault
        if record is None or record.result is None:
            inv.live = True
        return position, op_id, record

    def child(self, op_id: str, position: str) -> DurableContext:
        """Returns the nested context of a child operation."""
        return DurableContext(
            self._inv, id_prefix=f"{op_id}/", pos_prefix=f"{position}/", logger=self.logger
        )

    def check_scope_end(self) -> None:
        """Verifies that the code did not stop short of operations recorded in this scope.

        Raises:
            ReplayDivergedError: If the journal has an operation after the last one the code
                asked for (an operation was removed from the code while the run was in flight).
        """
        inv = self._inv
        if inv.fault is not None:
            raise inv.fault
        record = inv.records.get(format_position(self._pos_prefix, self._counter + 1))
        if record is not None:
            inv.fault = ReplayDivergedError(
                record.op_id,
                recorded_kind=str(record.kind),
                recorded_name=record.name,
                requested_kind="end",
                requested_name="(no further operation)",
            )
            raise inv.fault


def _ms(duration: float | timedelta | None) -> int | None:
    if duration is None:
        return None
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    if seconds < 0:
        raise ValueError("a timeout cannot be negative")
    return int(seconds * 1000)
