"""The exception tree of the runtime, organised around what the caller must do.

* ``DurableError`` subclasses describe situations an agent or an API caller can handle.
* ``SuspendExecution`` is a ``BaseException``: it ends the current invocation (the run waits for
  a timer, a decision or the next ``Step Ready`` event). It derives from ``BaseException`` so an
  agent's ``except Exception`` can never swallow it.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import Enum
from typing import Any


class DurableError(Exception):
    """Base class of every error raised by durable-agents.

    ``recorded_fields`` names the attributes the journal keeps so that a replayed error has
    them too (JSON values only).
    """

    recorded_fields: tuple[str, ...] = ()


class WrapperError(DurableError):
    """A typed wrapper whose error, as users see it, is the one it wraps (issue 32).

    ``except ConditionCheckFailedError`` (or ``CallbackFailedError``, ``BatchFailedError``)
    keeps working, but what happened is not hidden behind the wrapper's own words: its message
    is the wrapped error's, and the journal records the wrapped error's type, module and
    message (so the run's error in the Api, the console and the CLI is ``StatusCheckError:
    ...``, not the wrapper's). The wrapper's own type and ``recorded_fields`` are recorded
    beside them, so a replay raises the wrapper again, the wrapped error rebuilt as its
    ``__cause__`` and as ``wrapped``. AWS's SDK does the same: its ``WaitForConditionError``,
    ``CallbackExternalError`` and ``ChildContextError`` carry the original message.

    A wrapper rebuilt from a record written before (its own type and message) has no
    ``wrapped``, and is recorded again as it was.

    Attributes:
        wrapped: The error it wraps (None for a wrapper recorded before the change).
    """

    wrapped: BaseException | None = None


class ConfigurationError(DurableError):
    """The runtime was wired incorrectly (missing table, unknown agent module, bad option)."""


class InvalidNameError(DurableError, ValueError):
    """An operation or agent name cannot be used in a deterministic operation id."""


class InvalidCursorError(DurableError, ValueError):
    """A listing cursor this listing did not hand out: malformed, or another listing's.

    Attributes:
        cursor: The refused cursor.
    """

    def __init__(self, cursor: str, reason: str = "the cursor continues another listing"):
        super().__init__(reason)
        self.cursor = cursor


class AgentNotFoundError(DurableError):
    """No agent is registered under the requested name (and version)."""

    def __init__(self, name: str, version: str | None = None, known: list[str] | None = None):
        self.name = name
        self.version = version
        self.known = known or []
        wanted = f"{name!r} version {version!r}" if version else repr(name)
        super().__init__(f"no agent registered as {wanted}; registered: {self.known or 'none'}")


class RunNotFoundError(DurableError):
    """The journal has no run with this id."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        super().__init__(f"run {run_id!r} not found")


class IdempotencyConflictError(DurableError):
    """A start request reused a client idempotency key with a different input."""

    def __init__(self, key: str, existing_run_id: str):
        self.key = key
        self.existing_run_id = existing_run_id
        super().__init__(
            f"idempotency key {key!r} was already used for run {existing_run_id!r} "
            "with a different agent or input"
        )


class EntryConflictError(DurableError):
    """A conditional journal write lost: an entry already exists at that key.

    This is how two writers racing for the same operation find out that the other one won.
    ``existing`` is the winner's entry when the backend could return it.
    """

    def __init__(self, sort_key: str, existing: Any | None = None):
        self.sort_key = sort_key
        self.existing = existing
        super().__init__(f"journal entry {sort_key!r} already exists")


class EffectConflictError(DurableError):
    """A conditional write of a side-effect record lost (someone else holds or settled it)."""

    def __init__(self, operation_id: str, current: Any | None = None):
        self.operation_id = operation_id
        self.current = current
        state = getattr(current, "status", None)
        super().__init__(f"side effect {operation_id!r} changed meanwhile (now {state})")


class EffectNotFoundError(DurableError):
    """No side-effect record exists for this operation id."""

    def __init__(self, operation_id: str):
        self.operation_id = operation_id
        super().__init__(f"no side effect recorded for operation {operation_id!r}")


class WaitNotFoundError(DurableError):
    """No approval or callback with this id."""

    def __init__(self, wait_id: str):
        self.wait_id = wait_id
        super().__init__(f"no approval or callback with id {wait_id!r}")


class WaitConflictError(DurableError):
    """A conditional write of a wait record lost: it was settled or changed meanwhile."""

    def __init__(self, wait_id: str, current: Any | None = None):
        self.wait_id = wait_id
        self.current = current
        super().__init__(f"{wait_id!r} changed meanwhile (now {getattr(current, 'status', None)})")


def _shown(value: Any) -> str:
    """A status as a person reads it: an enum's value (``FAILED``), not its Python repr."""
    return str(value.value) if isinstance(value, Enum) else str(value)


def _any_of(values: Any) -> str:
    """``RUNNING``, ``RUNNING or SUSPENDED``, ``RUNNING, SUSPENDED or PAUSED``."""
    if isinstance(values, str | Enum) or not isinstance(values, Collection):
        return _shown(values)
    shown = [_shown(v) for v in values]
    if isinstance(values, set | frozenset):
        shown.sort()
    return " or ".join([", ".join(shown[:-1]), shown[-1]] if len(shown) > 1 else shown)


class RunStateConflictError(DurableError):
    """A conditional update of the run header failed: its status is not what was expected.

    The message names the statuses by their values (``run 'run-1' is SUCCEEDED, expected
    RUNNING or SUSPENDED``): it reaches people (the Api's 409s, the CLI).
    """

    def __init__(self, run_id: str, expected: Any, actual: Any | None = None):
        self.run_id = run_id
        self.expected = expected
        self.actual = actual
        now = "in another status" if actual is None else _shown(actual)
        super().__init__(f"run {run_id!r} is {now}, expected {_any_of(expected)}")


class RunRevisionConflictError(RunStateConflictError):
    """The run header changed since it was read: the change decided on that read is refused.

    The status may still be one the change accepts; what moved is the revision (someone
    settled a wait, another invocation suspended the run with a timer, …). The writer reloads
    and decides again instead of overwriting.
    """

    def __init__(self, run_id: str, expected_revision: int, actual_revision: int, status: Any):
        self.expected_revision = expected_revision
        self.actual_revision = actual_revision
        super().__init__(run_id, [status], status)
        self.args = (
            f"run {run_id!r} changed meanwhile (revision {actual_revision}, "
            f"expected {expected_revision})",
        )


class PayloadError(DurableError):
    """A value cannot be recorded: not serialisable, a secret, or too large for any store.

    Terminal by design: resending the same payload would fail the same way forever.
    """


class SecretSerializationError(PayloadError):
    """A credential reached the serializer; credentials are never written to the journal."""


class ReplayDivergedError(DurableError):
    """The agent code asked for a different operation than the one recorded at this position.

    Either another kind or name, or the same kind and name with another input (its input
    fingerprint differs: for example a loop whose list of items changed). The run is paused in a
    visible state instead of forking. Both sides are carried (and recorded with the pause).

    Attributes:
        recorded_fingerprint: The input fingerprint the journal holds (None if not compared).
        requested_fingerprint: Today's input fingerprint (None if not compared, or if today's
            input cannot be serialised although the recorded one could).
    """

    recorded_fields = (
        "op_id",
        "recorded_kind",
        "recorded_name",
        "requested_kind",
        "requested_name",
        "recorded_fingerprint",
        "requested_fingerprint",
    )

    def __init__(
        self,
        op_id: str,
        *,
        recorded_kind: str,
        recorded_name: str,
        requested_kind: str,
        requested_name: str,
        recorded_fingerprint: str | None = None,
        requested_fingerprint: str | None = None,
    ):
        self.op_id = op_id
        self.recorded_kind = recorded_kind
        self.recorded_name = recorded_name
        self.requested_kind = requested_kind
        self.requested_name = requested_name
        self.recorded_fingerprint = recorded_fingerprint
        self.requested_fingerprint = requested_fingerprint
        recorded = f"{recorded_kind} {recorded_name!r}"
        requested = f"{requested_kind} {requested_name!r}"
        if recorded_fingerprint is not None:
            recorded += f" with input fingerprint {recorded_fingerprint}"
            requested += (
                f" with input fingerprint {requested_fingerprint}"
                if requested_fingerprint is not None
                else " with an input that cannot be fingerprinted"
            )
        super().__init__(
            f"replay diverged at position {op_id!r}: the journal recorded {recorded} "
            f"but the code asked for {requested}"
        )


class NestedOperationError(DurableError):
    """A durable operation was called inside a step function (steps are leaves)."""


class StepError(DurableError):
    """A recorded failure whose original exception cannot be rebuilt in this process.

    Raised (on the first run and on replay alike) when the original class is not importable
    here, or cannot be made without its constructor. Agent code can still branch on it.

    Attributes:
        original_type: The original exception's class name (``error_type`` is the same).
        module: The module the original class was defined in (``""`` if unknown).
        message: The original message (scrubbed of revealed secrets).
        attributes: The original instance attributes that could be recorded and decoded
            here (values whose own classes are missing stay in their recorded JSON form).
        recorded_traceback: Where the original failed, as recorded (scrubbed, bounded; ``None``
            in records written before tracebacks were kept). Every rebuilt error has it.
    """

    recorded_fields = ("error_type", "message")

    def __init__(
        self,
        error_type: str,
        message: str,
        *,
        module: str = "",
        attributes: dict[str, Any] | None = None,
        recorded_data: dict[str, Any] | None = None,
    ):
        self.error_type = error_type
        self.original_type = error_type
        self.module = module
        self.message = message
        self.attributes: dict[str, Any] = dict(attributes or {})
        # What the journal held, recorded again as it was if this error fails a scope.
        self.recorded_data = recorded_data
        self.recorded_traceback: str | None = None  # set by rebuild_error from the record
        super().__init__(f"{error_type}: {message}")


class StepInterruptedError(DurableError):
    """A step's previous attempt started but never finished (its process died).

    An at-most-once step whose policy does not name this error is not retried after it (its
    work may have happened), unlike AWS's SDK, whose retry-everything strategies retry it: the
    message then says so, and how to opt in (``docs/retries.md``).
    """

    recorded_fields = ("op_id", "attempt")

    NOT_RETRIED = (
        "; an at-most-once step is not retried after an interruption (its work may have "
        "happened) unless its retry policy names it: retry=RetryPolicy(retryable="
        "(StepInterruptedError,)) or a decide= function (AWS's SDK retries it under any "
        "retry-everything strategy)"
    )
    """What the message adds when the step is not retried because its policy does not name
    the interruption."""

    def __init__(self, op_id: str, attempt: int, *, not_retried: bool = False):
        self.op_id = op_id
        self.attempt = attempt
        why = self.NOT_RETRIED if not_retried else ""
        super().__init__(f"attempt {attempt} of {op_id!r} was interrupted before it finished{why}")


class RunCancelledError(DurableError):
    """The run was asked to stop: raised by the operation the agent asks for next.

    The agent may catch it to clean up (compensations and other operations still run
    durably); however its function then ends, the run is ``CANCELLED``.
    """

    recorded_fields = ("run_id", "reason", "requested_by")

    def __init__(self, run_id: str, reason: str, requested_by: str):
        self.run_id = run_id
        self.reason = reason
        self.requested_by = requested_by
        super().__init__(f"run {run_id} was cancelled by {requested_by}: {reason}")


class VersionUnavailableError(DurableError):
    """A run is pinned to a version of something this deployment does not have.

    ``component`` says what: ``agent`` (no agent of that name at all), ``workflow_version``
    (its code), ``prompt <name>`` or ``model_config <name>``. The run goes
    ``VERSION_UNAVAILABLE`` and resumes by itself once that version is deployed again.
    """

    recorded_fields = ("agent", "component", "version", "deployed")

    def __init__(
        self, agent: str, component: str, version: str, deployed: list[str], detail: str = ""
    ):
        self.agent = agent
        self.component = component
        self.version = version
        self.deployed = deployed
        super().__init__(
            detail
            or f"run of {agent!r} is pinned to {component} {version!r}, which is not "
            f"deployed; deployed: {deployed or 'none'}"
        )


class VersionNotDeployedError(VersionUnavailableError):
    """The run is pinned to an agent version that this deployment does not contain."""

    def __init__(self, agent: str, version: str, deployed: list[str]):
        super().__init__(
            agent,
            "workflow_version",
            version,
            deployed,
            f"run is pinned to {agent!r} version {version!r}; deployed versions: {deployed}",
        )


class SuspendExecution(BaseException):
    """Ends the current invocation; the run continues when the awaited event happens.

    A ``BaseException`` so that ``except Exception`` in agent code cannot swallow it.
    """

    def __init__(
        self,
        reason: str,
        *,
        wake_at_ms: int | None = None,
        detail: str = "",
        targets: tuple[str, ...] = (),
        waiting_on: dict[str, Any] | None = None,
    ):
        self.reason = reason
        self.wake_at_ms = wake_at_ms
        self.detail = detail
        self.targets = targets
        # What the header says the run waits for, when the suspension is not a wait's own
        # commit (a rate limit's slot, a budget): None lets the runtime describe it.
        self.waiting_on = waiting_on
        super().__init__(f"{reason}: {detail}" if detail else reason)


class InfrastructureError(BaseException):
    """A storage or messaging failure that is not the protocol's own conflict.

    Throttling after the SDK's retries, a ``TransactionConflict``, a 500, a timeout, an S3 or
    EventBridge failure: none of these is the agent's doing, and none may be recorded as the
    run's outcome. A ``BaseException`` (like ``SuspendExecution``) so that agent code's
    ``except Exception`` cannot catch it and record the wrong branch: it aborts the invocation,
    the Lambda fails, and the platform delivers the event again.

    Attributes:
        operation: What was being done (``PutItem``, ``TransactWriteItems``, ``PutEvents``, …).
        code: The service's error code, or the botocore exception's name.
    """

    def __init__(self, operation: str, code: str, message: str = ""):
        self.operation = operation
        self.code = code
        detail = f": {message}" if message else ""
        super().__init__(f"{operation} failed with {code}{detail} (the invocation is retried)")


class InvocationRetryError(DurableError):
    """A Lambda invocation was aborted by an ``InfrastructureError``; the platform retries it.

    Handlers turn the ``BaseException`` into this ordinary error at their edge, so the Lambda
    runtime reports a function error (and the event source retries) instead of the process
    exiting.
    """

    def __init__(self, cause: InfrastructureError):
        self.operation = cause.operation
        self.code = cause.code
        super().__init__(str(cause))


class MigrationRefusedError(DurableError):
    """The migration was not committed: the reason says why (nothing was written).

    Attributes:
        run_id: The run.
        reason: What made it unsafe (a divergence found by the dry run, a plan that does not
            match the journal, a run that is still executing, …).
    """

    recorded_fields = ("run_id", "reason")

    def __init__(self, run_id: str, reason: str):
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"migration of run {run_id!r} refused: {reason}")


class MigrationNotFoundError(DurableError):
    """No migration is registered between the run's version and the requested one."""

    def __init__(self, agent: str, from_version: str, to_version: str, known: list[str]):
        self.agent = agent
        self.from_version = from_version
        self.to_version = to_version
        self.known = known
        super().__init__(
            f"no migration of {agent!r} from version {from_version!r} to {to_version!r} is "
            f"deployed; migrations from {from_version!r}: {known or 'none'}"
        )
