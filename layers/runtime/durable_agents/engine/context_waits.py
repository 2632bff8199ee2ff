"""``DurableContext``'s waits: timers, polling, approvals and callbacks (no compute held).

Mixed into ``DurableContext`` (``durable_agents.engine.context``), which is where agents meet them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from durable_agents.core.ids import check_name, name_of
from durable_agents.core.principals import check_approvers
from durable_agents.core.serde import SerdesSpec, as_serdes, canonical_json
from durable_agents.engine.context_scope import OperationScope
from durable_agents.engine.fingerprints import Fingerprint
from durable_agents.engine.operations.approval import ApprovalDecision
from durable_agents.engine.operations.callback import Callback, run_create_callback
from durable_agents.engine.operations.condition import Polling, run_condition
from durable_agents.engine.operations.event_wait import (
    EventMessage,
    run_set_status,
    run_wait_for_event,
)
from durable_agents.engine.operations.wait import run_wait
from durable_agents.retry import NO_RETRY, Jitter, RetryPolicy

if TYPE_CHECKING:
    from durable_agents.engine.context import DurableContext
    from durable_agents.engine.operations.condition import WaitStrategy


class WaitOperations(OperationScope):
    """The operations that wait for time or for someone outside the run."""

    __slots__ = ()

    def _context(self) -> DurableContext:
        # Only DurableContext mixes these in; the operation modules take the whole context.
        return cast("DurableContext", self)

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
        return run_condition(self._context(), check_name(name), polling)

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
        return run_wait_for_approval(
            self._context(), check_name(name), spec, Fingerprint.of_value(request)
        )

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
            self._context(),
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
        its result is the callback's. The submitter runs once per attempt, never again on
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
            self._context().step(legacy_submitter, callback.callback_id, name=f"{submitter}-submit")
            return callback.result()
        if not callable(submitter):
            raise TypeError("wait_for_callback needs a submitter: a function of the callback id")
        submit = submitter
        op_name = check_name(name) if name is not None else name_of(submit)

        def composite(scope: DurableContext) -> Any:
            callback = scope.create_callback(
                op_name, timeout=timeout, heartbeat_timeout=heartbeat_timeout, serdes=serdes
            )
            scope.step(submit, callback.callback_id, name="submit", retry=retry)
            return callback.result()

        return self._context().run_in_child_context(composite, name=op_name, serdes=serdes)

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
        return run_wait_for_event(self._context(), check_name(name), _ms(timeout))

    def set_status(self, value: Any, *, name: str = "status") -> None:
        """Publishes ``value`` (JSON) as the run's status, read by ``GET /runs/{id}/status-value``.

        Recorded once, as an operation: a replay does not write it again, and the latest
        recorded value is what the Api returns.

        Raises:
            TypeError: If ``value`` is not JSON-serialisable.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        run_set_status(self._context(), value, check_name(name))

    def wait(self, duration: float | timedelta, *, name: str = "wait") -> None:
        """Suspends the run for ``duration`` (seconds or a timedelta) without holding compute.

        Raises:
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        run_wait(self._context(), float(seconds), check_name(name))


def _ms(duration: float | timedelta | None) -> int | None:
    if duration is None:
        return None
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    if seconds < 0:
        raise ValueError("a timeout cannot be negative")
    return int(seconds * 1000)
