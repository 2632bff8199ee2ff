"""``DurableContext``: what an agent function uses to do anything non-deterministic.

One class, the façade agents meet: every operation (steps, tools, events, model calls,
sub-agents, batches, child contexts, waits, approvals, callbacks, continue-as-new) and the
run's values that are the same on every replay (time, ids, randomness, memory, pinned prompts
and model configurations). Each operation's work is in its module of
``durable_agents.engine.operations``, which takes the execution state
(``durable_agents.engine.context_scope.OperationScope``: positions, operation ids, divergence
checks), not this class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, NoReturn, TypeVar

from durable_agents.agent import AgentDefinition
from durable_agents.core.ids import check_name, name_of
from durable_agents.core.models import OpKind, SubKind
from durable_agents.core.principals import check_approvers
from durable_agents.core.semantics import StepSemantics
from durable_agents.core.serde import Serdes, SerdesSpec, as_serdes, canonical_json
from durable_agents.engine.context_scope import OperationScope
from durable_agents.engine.fingerprints import NO_ARGS, Fingerprint
from durable_agents.engine.generations import run_continue_as_new
from durable_agents.engine.operations.approval import ApprovalDecision
from durable_agents.engine.operations.callback import Callback, run_create_callback
from durable_agents.engine.operations.child import run_child
from durable_agents.engine.operations.condition import Polling, WaitStrategy, run_condition
from durable_agents.engine.operations.emit import run_emit
from durable_agents.engine.operations.event_wait import (
    EventMessage,
    run_set_status,
    run_wait_for_event,
)
from durable_agents.engine.operations.invoke import run_invoke
from durable_agents.engine.operations.llm import run_llm
from durable_agents.engine.operations.memory import Memory
from durable_agents.engine.operations.now import run_now
from durable_agents.engine.operations.parallel import BatchResult, CompletionPolicy
from durable_agents.engine.operations.step import run_step
from durable_agents.engine.operations.tool import run_tool
from durable_agents.engine.operations.wait import run_wait
from durable_agents.engine.replay_fast_path import NOT_REPLAYED, replayed_step
from durable_agents.engine.step_context import StepContext, first_is_step_context, wants_context
from durable_agents.errors import DurableError
from durable_agents.llm.types import LlmRequest, LlmResponse, ModelConfig
from durable_agents.prompts import Prompt, pinned_for_run
from durable_agents.retry import NO_RETRY, Jitter, RetryPolicy
from durable_agents.tools import Tool, ToolNotApprovedError

T = TypeVar("T")


class DurableContext(OperationScope):
    """The handle an agent function receives. Each operation is recorded once and replayed.

    Operation ids are derived from the run and the position in the code path:
    ``<run_id>:<name>:<n>`` for the n-th operation of the run, and
    ``<parent op id>/<name>:<n>`` inside a child context. On replay each operation checks that
    the journal recorded the same kind and name at its position, and the same input fingerprint
    where it has an input (see ``durable_agents.engine.fingerprints``); otherwise
    ``ReplayDivergedError`` stops the run visibly.

    Attributes:
        run_id: The id of the run being executed.
        logger: A logger that stays quiet while recorded operations are being replayed.
    """

    __slots__ = ()

    # -- operations -------------------------------------------------------------------------

    def step(
        self,
        fn: Callable[..., T],
        *args: Any,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        semantics: StepSemantics = StepSemantics.AT_LEAST_ONCE,
        result_type: Any = None,
        serdes: SerdesSpec | None = None,
    ) -> T:
        """Runs ``fn(*args)`` once and records its result; replays return the record.

        Args:
            fn: The work: reads, computation, an external call. It must not call ``ctx``. It
                receives a ``StepContext`` (attempt, operation id, logger, deadline) first if
                its signature asks for it (``durable_agents.engine.step_context``).
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
            serdes: A custom serializer for the result (a ``Serdes`` or a pair of functions);
                by default datetimes, decimals, sets, dataclasses, … round-trip as tagged
                JSON (docs/values-and-errors.md).

        Returns:
            The result, exactly as a replay will return it (serializer round trip).

        Raises:
            Exception: The step's final error, rebuilt with the same type, ``args`` and
                attributes on the first run and on every replay (``StepError`` if its class
                cannot be rebuilt here).
            ReplayDivergedError: If the journal recorded another operation at this position.

        Example:
            >>> def research(ctx, topic: str) -> str:
            ...     return ctx.step(lambda: topic.upper(), name="shout")
        """
        if serdes is None and self._inv.replaying_quietly:  # a speed trick, in its own module
            replayed = replayed_step(self, fn, args, name, result_type)
            if replayed is not NOT_REPLAYED:
                return replayed  # type: ignore[no-any-return]
        op_name = name_of(fn) if name is None else check_name(name)
        fingerprint = Fingerprint.of_args(args) if args else NO_ARGS
        return run_step(  # type: ignore[no-any-return]
            self,
            fn,
            args,
            op_name,
            retry,
            semantics,
            result_type,
            fingerprint=fingerprint,
            serdes=None if serdes is None else as_serdes(serdes),
        )

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
        return run_llm(self, check_name(name), request, config, stream=stream, retry=retry)

    def invoke(
        self,
        agent: AgentDefinition[Any, T] | str,
        value: Any,
        *,
        name: str | None = None,
        tenant_id: str | None = None,
        payload_serdes: SerdesSpec | None = None,
        result_serdes: SerdesSpec | None = None,
    ) -> T:
        """Runs a sub-agent as a child run and waits for its output (holding no compute).

        The child is started exactly once, however often this run replays: its id comes from
        this operation's position and creating it is a conditional write.

        Args:
            agent: The sub-agent: what ``@agent`` returned, or the name of any agent of the
                deployment (its latest version).
            value: Its input.
            name: The operation name (defaults to the agent name).
            tenant_id: The child run's tenant (default: this run's).
            payload_serdes: Makes the child's input: ``serialize(value)`` must be JSON text.
            result_serdes: Makes this call's result from the JSON text of the child's output
                (default: validated by the sub-agent's output type).

        Returns:
            The child's output.

        Raises:
            ChildRunFailedError: If the child run failed (its error type and message inside).
            SubAgentNotDeployedError: If the sub-agent is not deployed (the run pauses).
            ReplayDivergedError: If the journal recorded another operation at this position.
            ValueError: If ``tenant_id`` is not a valid tenant name.
        """
        agent_name = agent if isinstance(agent, str) else agent.name
        return run_invoke(  # type: ignore[no-any-return]
            self,
            agent,
            value,
            check_name(name or agent_name),
            tenant_id,
            payload_serdes=as_serdes(payload_serdes),
            result_serdes=as_serdes(result_serdes),
        )

    def parallel(
        self,
        branches: Sequence[Callable[[DurableContext], Any]]
        | Mapping[str, Callable[[DurableContext], Any]],
        *,
        name: str = "parallel",
        completion: CompletionPolicy | None = None,
        max_concurrency: int | None = None,
        serdes: SerdesSpec | None = None,
        item_serdes: SerdesSpec | None = None,
        nesting: Literal["nested", "flat"] = "nested",
        on_failure: Literal["raise", "return"] = "raise",
    ) -> BatchResult[Any]:
        """Runs branches as independent child scopes; on Lambda, each in its own invocation.

        Args:
            branches: Functions ``fn(child_ctx)``, or a mapping of branch names to them; their
                results are recorded as step results are (tagged JSON).
            name: The operation name.
            completion: When the batch is done (default: all branches, failing on the first
                failure). Only the failure tolerances end a batch early on failures.
            max_concurrency: At most this many branches in progress at a time.
            serdes: A custom serializer for the ``BatchResult`` as a whole (the AWS SDK's
                meaning): its text of the whole batch is recorded in the batch's record, and a
                replay returns what it decodes that text to. Given without ``item_serdes``,
                it serializes every branch's result too (the SDK's backward-compatible rule),
                so it must accept both.
            item_serdes: A custom serializer for every branch's result, each recorded in its
                branch's record (what ``serdes=`` alone did before it also meant the batch).
            nesting: ``flat``: branches write no scope record of their own (one write less
                per branch; a finished branch is replayed until the batch records its result).
            on_failure: What a batch whose failures go beyond ``completion`` does: ``raise``
                ``BatchFailedError`` (recorded FAILED), or ``return`` its ``BatchResult``
                with ``completion_reason`` ``failure_tolerance_exceeded`` (the AWS SDK's
                behaviour, for ported code that checks it). A replay does what was recorded.

        Returns:
            A ``BatchResult`` with every branch's outcome in index order (``throw_if_error()``
            raises on any failure, even a tolerated one).

        Raises:
            BatchFailedError: If the failures went beyond ``completion`` (with ``on_failure``
                ``raise``): it names the failed branches and the first error, and carries the
                ``BatchResult`` as ``result``. Raised again, identically, on every replay.
            ValueError: If ``max_concurrency`` is below 1, or ``on_failure`` is neither
                ``raise`` nor ``return``.
            TypeError: If ``serdes`` or ``item_serdes`` is not a serializer.
            PayloadError: If ``serdes`` cannot serialize the ``BatchResult`` or decode it back
                to one, or a batch recorded as a whole is replayed without ``serdes``.
            InvalidNameError: If a branch name is not a valid operation name.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.engine.operations.parallel import (  # noqa: PLC0415
            ALL_SUCCESSFUL,
            branch_names,
            run_batch,
        )

        fns, names = branch_names(branches)
        policy = completion or ALL_SUCCESSFUL
        whole, item = _batch_serdes(serdes, item_serdes)
        flat = _flat(nesting)
        return run_batch(
            self,
            OpKind.PARALLEL,
            check_name(name),
            fns,
            policy,
            max_concurrency,
            item,
            names,
            flat,
            on_failure,
            batch_serdes=whole,
        )

    def map(
        self,
        items: Sequence[Any],
        fn: Callable[..., Any],
        *,
        name: str = "map",
        completion: CompletionPolicy | None = None,
        max_concurrency: int | None = None,
        serdes: SerdesSpec | None = None,
        item_serdes: SerdesSpec | None = None,
        item_namer: Callable[[Any, int], str] | None = None,
        nesting: Literal["nested", "flat"] = "nested",
        on_failure: Literal["raise", "return"] = "raise",
    ) -> BatchResult[Any]:
        """Runs ``fn(child_ctx, item, index)`` for every item, like ``parallel``.

        ``fn`` may take ``(child_ctx, item, index, items)`` instead; a ``fn(child_ctx, item)``
        fails every branch it is called in with a ``TypeError`` (and so, under the default
        policy, the batch). ``serdes`` serializes the ``BatchResult`` as a whole, and each
        item's result too unless ``item_serdes`` is given; ``item_serdes`` serializes each
        item's result (both as for ``parallel``). ``item_namer(item, index)`` names each
        item's branch (``branch-<i>`` by default); ``nesting`` and ``on_failure`` as for
        ``parallel``.

        Raises:
            BatchFailedError: If the failures went beyond ``completion`` (with ``on_failure``
                ``raise``), as for ``parallel``; identically on every replay.
            ValueError: If ``max_concurrency`` is below 1, or ``on_failure`` is neither
                ``raise`` nor ``return``.
            TypeError: If ``serdes`` or ``item_serdes`` is not a serializer.
            PayloadError: As for ``parallel``: ``serdes`` cannot serialize or decode the
                ``BatchResult``, or a batch recorded as a whole is replayed without it.
            InvalidNameError: If ``item_namer`` gives an invalid operation name.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        from durable_agents.engine.operations.parallel import (  # noqa: PLC0415
            ALL_SUCCESSFUL,
            map_branches,
            run_batch,
        )

        fns, names = map_branches(items, fn, item_namer)
        policy = completion or ALL_SUCCESSFUL
        whole, item = _batch_serdes(serdes, item_serdes)
        flat = _flat(nesting)
        return run_batch(
            self,
            OpKind.MAP,
            check_name(name),
            fns,
            policy,
            max_concurrency,
            item,
            names,
            flat,
            on_failure,
            batch_serdes=whole,
        )

    def run_in_child_context(
        self,
        fn: Callable[[DurableContext], T],
        *,
        name: str | None = None,
        result_type: Any = None,
        serdes: SerdesSpec | None = None,
    ) -> T:
        """Runs ``fn(child_ctx)`` as one operation with its own nested operation ids.

        Once the child's result is recorded, replays return it without running ``fn`` again.
        ``serdes`` serializes the result as for ``step``.

        Raises:
            Exception: The child's final error, re-raised identically on replay.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        op_name = check_name(name) if name is not None else name_of(fn)
        return run_child(self, fn, op_name, result_type, serdes=as_serdes(serdes))  # type: ignore[no-any-return]

    def continue_as_new(self, input_value: Any) -> NoReturn:
        """Ends this generation of the run and starts the next with ``input_value`` (ADR 0016).

        Same run id, fresh journal: the agent function runs again from its start with the new
        input, and replay reads only the new generation. Never returns. Call it only from the
        agent function's own context. Events sent to the run and not yet taken stay for the
        next generation. See docs/context.md ("Continue as new").

        Raises:
            ContinueAsNewNotAllowedError: Inside a step, a child context or a parallel branch.
            InputValidationError: If ``input_value`` does not match the agent's input type.
            PayloadError: If it cannot be recorded (for example it holds a secret).
        """
        run_continue_as_new(self, input_value, self._pos_prefix)

    # -- waits: timers, polling, approvals, callbacks, events (no compute held) ----------

    def wait_for_condition(
        self,
        check: Callable[[Any], Any],
        *,
        initial_state: Any,
        until: Callable[[Any], bool] | None = None,
        wait_strategy: WaitStrategy | None = None,
        name: str = "condition",
        max_attempts: int = 60,
        delay_seconds: float = 5.0,
        backoff_rate: float = 1.5,
        max_delay_seconds: float = 300.0,
        jitter: float | Jitter = Jitter.NONE,
        retry: RetryPolicy | None = None,
        serdes: SerdesSpec | None = None,
    ) -> Any:
        """Polls durably: ``state = check(state)`` until polling ends, sleeping in between.

        Each check is a recorded step and each pause a durable timer, so the state threads
        through suspensions and crashes; nothing is held while waiting. Give exactly one of
        ``until`` (stop once it is true of a state; pauses back off from ``delay_seconds``) and
        ``wait_strategy`` (``(state, checks_done) -> WaitDecision``: stop, or the next pause).
        Both must be deterministic. A check that raises fails the condition at once, unless
        ``retry`` retries it.

        Args:
            check: ``state -> state``.
            initial_state: The first check's argument.
            until: Stop as soon as it is true of the state a check returned.
            wait_strategy: Decides after each check whether and when to check again.
            name: The operation name.
            max_attempts: At most this many checks.
            delay_seconds: The first pause under ``until``.
            backoff_rate: Each further pause's multiplier under ``until``.
            max_delay_seconds: The longest pause under ``until`` (before jitter).
            jitter: ``Jitter.NONE`` (default), ``HALF``, ``FULL`` or a fraction, applied to
                the pauses under ``until`` (deterministic per run and operation, recorded).
            retry: The retry policy of each check (default: no retry).
            serdes: How the state is recorded (default: tagged JSON, as step results are).

        Returns:
            The state that ended the polling.

        Raises:
            ConditionCheckFailedError: If a check raised (after its retries).
            ConditionNotMetError: If ``max_attempts`` checks did not end the polling.
            ValueError: Unless exactly one of ``until`` and ``wait_strategy`` is given, or if
                ``max_attempts`` is below 1.
            ReplayDivergedError: If the journal recorded another operation at this position.

        Example:
            >>> from durable_agents import AgentRegistry, agent
            >>> from durable_agents_local.testing import AgentTestRunner
            >>> @agent(name="ready", version="1", registry=AgentRegistry())
            ... def ready(ctx, job_id: str) -> dict:
            ...     return ctx.wait_for_condition(
            ...         lambda s: {**s, "done": s["polls"] >= 2, "polls": s["polls"] + 1},
            ...         initial_state={"job": job_id, "polls": 0, "done": False},
            ...         until=lambda s: s["done"],
            ...         delay_seconds=10,
            ...         jitter=Jitter.HALF,
            ...     )
            >>> AgentTestRunner(ready).run("job-7").output
            {'job': 'job-7', 'polls': 3, 'done': True}
        """
        pacing = RetryPolicy(
            max_attempts=max_attempts,
            initial_delay_seconds=delay_seconds,
            backoff_rate=backoff_rate,
            max_delay_seconds=max_delay_seconds,
            jitter=jitter,
        )
        polling = Polling(
            check,
            initial_state,
            until,
            wait_strategy,
            max_attempts,
            pacing,
            retry or NO_RETRY,
            as_serdes(serdes),
        )
        return run_condition(self, check_name(name), polling)

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
        from durable_agents.engine.operations.approval import (  # noqa: PLC0415
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
        name: str = "callback",
        *,
        timeout: float | timedelta | None = None,
        heartbeat_timeout: float | timedelta | None = None,
        serdes: SerdesSpec | None = None,
    ) -> Callback:
        """Creates a callback an external system completes with ``POST /callbacks/{id}/…``.

        Args:
            name: The operation name (default ``callback``).
            timeout: Seconds (or a timedelta) until it expires (None = never).
            heartbeat_timeout: The longest silence allowed between heartbeats.
            serdes: Turns the result's JSON text into the value ``result()`` returns.

        Returns:
            A handle: pass ``callback_id`` on, then call ``result()`` to wait for it.

        Raises:
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        return run_create_callback(
            self,
            check_name(name),
            _ms(timeout),
            _ms(heartbeat_timeout),
            as_serdes(serdes),
        )

    def wait_for_callback(
        self,
        submitter: Callable[[str], Any] | str,
        legacy_submitter: Callable[[str], Any] | None = None,
        *,
        name: str | None = None,
        timeout: float | timedelta | None = None,
        heartbeat_timeout: float | timedelta | None = None,
        serdes: SerdesSpec | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Creates a callback, hands its id to ``submitter``, and waits: one operation.

        The operation is a scope named ``name`` (default: the submitter's name) holding the
        callback (same name) and the submitter's step (``submit``, retried with ``retry``);
        its result is the callback's. The submitter is called ``submitter(callback_id)``, or,
        if it takes two arguments, ``submitter(callback_id, step_context)`` (the AWS SDK's
        order: its second argument is the step's ``StepContext``, which has the SDK context's
        ``logger``); one whose first parameter is annotated ``StepContext`` is called with the
        context first, as any step. The scope is recorded as kind ``child`` with sub-kind
        ``wait_for_callback`` (``Entry.sub_kind``; scopes recorded before the marker have
        none and replay all the same). The submitter runs once per attempt, never again on
        replay. ``serdes`` is the callback's result's (see ``create_callback``).

        The earlier form ``wait_for_callback(name, submitter)`` still works, with its journal
        layout (a callback, then a ``<name>-submit`` step, side by side): runs recorded with it
        replay unchanged.

        Raises:
            CallbackFailedError: If the external system reported failure.
            CallbackTimeoutError: If the deadline passed or heartbeats stopped first.
            ReplayDivergedError: If the journal recorded another operation at this position.
            TypeError: If ``submitter`` is not callable.

        Example:
            >>> from durable_agents import AgentRegistry, agent
            >>> from durable_agents_local.testing import AgentTestRunner
            >>> sent = []
            >>> @agent(name="shipper", version="1", registry=AgentRegistry())
            ... def shipper(ctx, order: str) -> dict:
            ...     return ctx.wait_for_callback(lambda cid: sent.append(cid), name="ship")
            >>> runner = AgentTestRunner(shipper)
            >>> waiting = runner.run("o-1")
            >>> runner.complete_callback(waiting.run_id, "ship", result={"ok": True}).output
            {'ok': True}
            >>> len(sent)
            1
        """
        if isinstance(submitter, str):  # the earlier form: (name, submitter)
            if legacy_submitter is None:
                raise TypeError("wait_for_callback(name, submitter): the submitter is missing")
            callback = self.create_callback(
                submitter, timeout=timeout, heartbeat_timeout=heartbeat_timeout, serdes=serdes
            )
            self.step(legacy_submitter, callback.callback_id, name=f"{submitter}-submit")
            return callback.result()
        if not callable(submitter):
            raise TypeError("wait_for_callback needs a submitter: a function of the callback id")
        submit = _sdk_ordered(submitter)
        op_name = check_name(name) if name is not None else name_of(submitter)

        def composite(scope: DurableContext) -> Any:
            callback = scope.create_callback(
                op_name, timeout=timeout, heartbeat_timeout=heartbeat_timeout, serdes=serdes
            )
            scope.step(submit, callback.callback_id, name="submit", retry=retry)
            return callback.result()

        # Marked (``SubKind.WAIT_FOR_CALLBACK``): recognisable in the journal, the harness and
        # plugins as what it is, not a scope of the agent's own; replay ignores the marker.
        return run_child(
            self,
            composite,
            op_name,
            None,
            serdes=as_serdes(serdes),
            sub_kind=SubKind.WAIT_FOR_CALLBACK,
        )

    def wait_for_event(
        self, name: str, *, timeout: float | timedelta | None = None
    ) -> EventMessage:
        """Returns the next event of ``name`` sent to the run (``POST /runs/{id}/events/{name}``).

        Events are taken strictly in the order they arrived, each by one ``wait_for_event``
        only; one sent before the agent gets here is kept and taken then. While none is there
        the run is suspended and holds no compute; the event wakes it. On replay the event
        recorded the first time is returned again.

        Args:
            name: The event name (also this operation's name).
            timeout: Seconds (or a timedelta) to wait at most (None = no limit).

        Returns:
            The event: its ``payload``, ``event_id``, ``seq`` and ``received_at``.

        Raises:
            EventWaitTimeoutError: If no event of ``name`` arrived in time (one that arrives
                later is kept for the next wait).
            ValueError: If ``timeout`` is negative.
            ReplayDivergedError: If the journal recorded another operation at this position.

        Example:
            >>> from durable_agents import AgentRegistry, agent
            >>> from durable_agents_local.testing import AgentTestRunner
            >>> @agent(name="echo", version="1", registry=AgentRegistry())
            ... def echo(ctx, first: str) -> list:
            ...     heard = [first]
            ...     while heard[-1] != "bye":
            ...         heard.append(ctx.wait_for_event("message", timeout=3600).payload["text"])
            ...         ctx.set_status({"turns": len(heard)})
            ...     return heard
            >>> runner = AgentTestRunner(echo)
            >>> waiting = runner.run("hi")
            >>> _ = runner.send_event(waiting.run_id, "message", {"text": "more"})
            >>> runner.send_event(waiting.run_id, "message", {"text": "bye"}).output
            ['hi', 'more', 'bye']
        """
        return run_wait_for_event(self, check_name(name), _ms(timeout))

    def set_status(self, value: Any, *, name: str = "status") -> None:
        """Publishes ``value`` (JSON) as the run's status, read by ``GET /runs/{id}/status-value``.

        Recorded once, as an operation: a replay does not write it again, and the latest
        recorded value is what the Api returns.

        Raises:
            TypeError: If ``value`` is not JSON-serialisable.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        run_set_status(self, value, check_name(name))

    def wait(self, duration: float | timedelta, *, name: str = "wait") -> None:
        """Suspends the run for ``duration`` (seconds or a timedelta) without holding compute.

        Raises:
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        run_wait(self, float(seconds), check_name(name))

    # -- values that are the same on every replay: time, ids, randomness, memory, pins ---

    def now(self) -> datetime:
        """Returns the current time (UTC), recorded on first execution and replayed after.

        Raises:
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        return run_now(self)

    @property
    def memory(self) -> Memory:
        """The run's tenant's long-term memory, default scope (``docs/memory.md``).

        ``ctx.memory.scope("user:alice")`` is another scope of the same tenant. Reads are
        recorded (a replay sees what the first execution saw); writes happen once per position.

        Raises:
            ValueError: If the run's tenant is not a valid tenant name.
        """
        return Memory(self)

    def prompt(self, name: str) -> Prompt:
        """Returns exactly the version of prompt ``name`` this run pinned when it started.

        Newer versions registered since (a redeploy during a three-day approval) do not
        change what a running run sees; ``docs/versions.md``.

        Raises:
            NotPinnedError: If the run did not pin it (the run pauses for a person).
        """
        found = self._pinned("prompt", name)
        assert isinstance(found, Prompt)
        return found

    def model_config(self, name: str) -> ModelConfig:
        """Returns exactly the model configuration ``name`` this run pinned when it started.

        Raises:
            NotPinnedError: If the run did not pin it (the run pauses for a person).
        """
        found = self._pinned("model_config", name)
        assert isinstance(found, ModelConfig)
        return found

    def _pinned(self, what: str, name: str) -> Prompt | ModelConfig:
        inv = self._inv
        try:
            return pinned_for_run(
                inv.registry.prompts, inv.header.agent, inv.header.versions, what, name
            )
        except DurableError as exc:
            # Not the agent's error to handle: a version question for a person, like a
            # divergence (agent code cannot catch its way past it).
            inv.fault = exc
            raise


def _flat(nesting: str) -> bool:
    if nesting not in ("nested", "flat"):
        raise ValueError(f"nesting is 'nested' or 'flat', not {nesting!r}")
    return nesting == "flat"


def _sdk_ordered(submitter: Callable[..., Any]) -> Callable[..., Any]:
    """A ``wait_for_callback`` submitter as the step calls it: context first, if it takes one.

    The AWS SDK calls a submitter ``(callback_id, context)``; a step's function that asks for a
    ``StepContext`` takes it first (``wants_context``). A submitter of two arguments whose
    first is not annotated ``StepContext`` is the SDK's shape: it is called with the id first.

    Returns:
        ``submitter`` itself, or a function of ``(step_context, callback_id)`` calling it
        ``(callback_id, step_context)``, named as it is (the step keeps its name).
    """
    if not wants_context(submitter, 1) or first_is_step_context(submitter):
        return submitter

    def sdk_order(step: StepContext, callback_id: str) -> Any:
        return submitter(callback_id, step)

    sdk_order.__name__ = getattr(submitter, "__name__", "submit")
    sdk_order.__qualname__ = getattr(submitter, "__qualname__", sdk_order.__name__)
    return sdk_order


def _batch_serdes(
    serdes: SerdesSpec | None, item_serdes: SerdesSpec | None
) -> tuple[Serdes | None, Serdes | None]:
    """A batch's serializers, as the AWS SDK reads ``serdes`` and ``item_serdes``.

    Returns ``(whole, item)``: ``serdes`` for the ``BatchResult`` as a whole; ``item_serdes``
    for each branch's value, else ``serdes`` (the SDK's backward-compatible rule: given alone,
    ``serdes`` is used for both). The same object for both when ``serdes`` is alone, which is
    how the batch tells that case apart (its error message says so).

    Raises:
        TypeError: If either is not a serializer.
    """
    whole = as_serdes(serdes)
    item = as_serdes(item_serdes)
    return whole, item if item is not None else whole


def _ms(duration: float | timedelta | None) -> int | None:
    if duration is None:
        return None
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    if seconds < 0:
        raise ValueError("a timeout cannot be negative")
    return int(seconds * 1000)
