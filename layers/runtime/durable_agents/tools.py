"""Declaring tools: functions that change the outside world, and what recovery may rely on.

A tool is ``fn(request, call) -> result`` where ``request`` is a pydantic model and ``call`` is a
``ToolCall`` (operation id, idempotency key, attempt, short-lived credentials). It declares what
the runtime may do when it cannot tell whether a call happened:

* ``idempotent=True`` — the provider deduplicates on ``call.idempotency_key``: calling again with
  the same key is safe.
* ``lookup`` — asks the provider by operation id / idempotency key / business key whether the
  action happened: ``Found(result)``, ``NotFound()`` (certain) or ``Unknown(reason)``.
* ``compensate`` — undoes the action (``reversible``); used when a person abandons the call, or
  to retry safely when neither lookup nor idempotency can settle the question. A compensation
  is claimed and recorded once; ``compensate_idempotent=True`` lets one interrupted by a crash
  be repeated (see ``durable_agents.engine.effects.compensation``).

With none of them, an unclear outcome goes to a person (``NEEDS_REVIEW``): automatic recovery
would risk doing it twice.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from durable_agents.core.credentials import CredentialSource, Secret
from durable_agents.core.ids import check_name
from durable_agents.core.principals import check_approvers
from durable_agents.errors import DurableError
from durable_agents.flow_control import RateLimit

Req = TypeVar("Req", bound=BaseModel)
Res = TypeVar("Res")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """What a tool receives besides its request.

    Attributes:
        operation_id: The deterministic operation id (``<run_id>:<name>:<n>``).
        idempotency_key: Stable across retries, crashes and recoveries: send it to the provider.
        attempt: 1 for the first execution, higher for re-executions after recovery.
        credentials: Short-lived credentials minted for this call; never recorded.
        compensation_key: Only in ``compensate``: the key of this compensation
            (``<idempotency_key>:compensate:<n>``), the same whenever this compensation is
            repeated. Send it to the provider to deduplicate the undo itself; find what to undo
            by ``idempotency_key``.
    """

    operation_id: str
    idempotency_key: str
    attempt: int
    credentials: dict[str, Secret] = field(default_factory=dict)
    compensation_key: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult(Generic[Res]):
    """A tool's return value together with the external resource id it created."""

    value: Res
    external_id: str | None = None


@dataclass(frozen=True, slots=True)
class Found(Generic[Res]):
    """``lookup`` found the action: it happened, with this result."""

    value: Res
    external_id: str | None = None


@dataclass(frozen=True, slots=True)
class NotFound:
    """``lookup`` is certain the action did not happen."""


@dataclass(frozen=True, slots=True)
class Unknown:
    """``lookup`` could not tell (the provider is down, the record is not queryable)."""

    reason: str = ""


LookupResult = Found[Any] | NotFound | Unknown


class ToolRejectedError(DurableError):
    """The provider definitely refused the call (for example a 4xx): nothing happened.

    Raise it from a tool for business refusals; it is recorded as the call's final error and the
    agent can handle it. Any other exception is an *unclear* outcome and goes through recovery.
    """

    recorded_fields = ("tool", "reason")

    def __init__(self, tool: str, reason: str):
        self.tool = tool
        self.reason = reason
        super().__init__(f"{tool} rejected the call: {reason}")


class ToolAbandonedError(DurableError):
    """A person abandoned the call in review; ``compensated`` says whether it was undone."""

    recorded_fields = ("operation_id", "tool", "compensated", "comment")

    def __init__(self, operation_id: str, tool: str, compensated: bool, comment: str = ""):
        self.operation_id = operation_id
        self.tool = tool
        self.compensated = compensated
        self.comment = comment
        state = "compensated" if compensated else "not compensated (no compensate declared)"
        super().__init__(f"{tool} call {operation_id} was abandoned in review, {state}")


class ToolNotApprovedError(DurableError):
    """A person rejected the call (``requires_approval``); nothing was executed."""

    recorded_fields = ("tool", "decided_by", "comment")

    def __init__(self, tool: str, decided_by: str, comment: str = ""):
        self.tool = tool
        self.decided_by = decided_by
        self.comment = comment
        why = f": {comment}" if comment else ""
        super().__init__(f"{tool} was not approved by {decided_by}{why}")


class ToolGaveUpError(DurableError):
    """The call failed on every allowed attempt and the provider confirms it never happened."""

    recorded_fields = ("operation_id", "tool", "attempts")

    def __init__(self, operation_id: str, tool: str, attempts: int):
        self.operation_id = operation_id
        self.tool = tool
        self.attempts = attempts
        super().__init__(f"{tool} call {operation_id} did not happen after {attempts} attempts")


@dataclass(frozen=True)
class Tool(Generic[Req, Res]):
    """A declared tool (what ``@tool`` returns). Call it through ``ctx.tool(tool, request)``.

    Attributes:
        name: The tool name (the operation name in the journal unless overridden).
        schema_version: Version of the request/result schema (part of the run's bundle).
        fn: The implementation ``fn(request, call)``.
        request_model: The pydantic request model (from ``fn``'s first annotation).
        result_type: The result type (from ``fn``'s return annotation), or None for JSON.
        idempotent: The provider deduplicates on the idempotency key.
        lookup: ``lookup(request, call) -> Found | NotFound | Unknown``.
        compensate: ``compensate(request, call) -> None``; makes the tool reversible.
        compensate_idempotent: Repeating a compensation with the same
            ``call.compensation_key`` is safe, so one interrupted by a crash is simply repeated
            (otherwise it goes to review).
        stale_after_seconds: How long a PREPARED call may stay unresolved before the reconciler
            takes it over.
        max_attempts: Executions that may fail (observed failures: an unclear exception) before
            giving up or asking a person. Attempts whose worker died do not count (see
            ``durable_agents.engine.crash_budget``).
        requires_approval: A person approves the exact canonical request before PREPARE.
        approvers: Who may approve (patterns, see ``durable_agents.core.principals``).
        approval_when: When set, approval is needed only if it returns true for the request.
        approval_timeout_seconds: How long the approval may stay pending (None = forever).
        reviewers: Who may decide this tool's calls in review (``POST /reviews/{op}``; patterns
            as for approvers). None declared: only ``REVIEW_OPERATORS`` may.
        credentials: What is minted for each call (``durable_agents.aws.credentials``).
        rate_limit: Calls per period every Lambda of the deployment shares
            (``durable_agents.flow_control.RateLimit``); a call over it waits for the next
            period on a durable timer, before anything is prepared (ADR 0030).
    """

    name: str
    schema_version: str
    fn: Callable[[Req, ToolCall], Res | ToolResult[Res]]
    request_model: type[Req]
    result_type: Any = None
    idempotent: bool = False
    lookup: Callable[[Req, ToolCall], LookupResult] | None = None
    compensate: Callable[[Req, ToolCall], None] | None = None
    stale_after_seconds: float = 300.0
    max_attempts: int = 3
    requires_approval: bool = False
    approvers: tuple[str, ...] = ()
    compensate_idempotent: bool = False
    approval_timeout_seconds: float | None = None
    approval_when: Callable[[Req], bool] | None = None
    reviewers: tuple[str, ...] = ()
    credentials: tuple[CredentialSource, ...] = ()
    rate_limit: RateLimit | None = None

    def needs_approval(self, request: Req) -> bool:
        """Whether this call must be approved first (``approval_when`` decides, if given)."""
        if not self.requires_approval:
            return False
        return self.approval_when is None or bool(self.approval_when(request))

    @property
    def reversible(self) -> bool:
        """Whether the tool can undo its action."""
        return self.compensate is not None


class ToolRegistry:
    """Tools by name: the reconciler needs them to recover calls outside any agent run."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool[Any, Any]] = {}

    def add(self, tool_: Tool[Any, Any]) -> None:
        """Registers a tool (re-registering the same name replaces it)."""
        self._tools[tool_.name] = tool_

    def get(self, name: str) -> Tool[Any, Any] | None:
        """Returns the tool called ``name``, if registered."""
        return self._tools.get(name)

    def tools(self) -> list[Tool[Any, Any]]:
        """Every registered tool, by name."""
        return [self._tools[name] for name in sorted(self._tools)]

    def names(self) -> list[str]:
        """Returns the registered tool names."""
        return sorted(self._tools)


default_tools = ToolRegistry()


def tool(
    *,
    name: str,
    schema_version: str = "1",
    idempotent: bool = False,
    lookup: Callable[[Any, ToolCall], LookupResult] | None = None,
    compensate: Callable[[Any, ToolCall], None] | None = None,
    compensate_idempotent: bool = False,
    stale_after_seconds: float = 300.0,
    max_attempts: int = 3,
    requires_approval: bool = False,
    approvers: tuple[str, ...] | list[str] = (),
    approval_timeout_seconds: float | None = None,
    approval_when: Callable[[Any], bool] | None = None,
    reviewers: tuple[str, ...] | list[str] = (),
    credentials: tuple[CredentialSource, ...] | list[CredentialSource] = (),
    rate_limit: RateLimit | None = None,
    registry: ToolRegistry | None = None,
) -> Callable[[Callable[[Req, ToolCall], Any]], Tool[Req, Any]]:
    """Declares a tool.

    Args:
        name: The tool name.
        schema_version: The request/result schema version.
        idempotent: The provider deduplicates on ``call.idempotency_key``.
        lookup: Asks the provider whether the call happened.
        compensate: Undoes the call.
        compensate_idempotent: Repeating a compensation with the same
            ``call.compensation_key`` is safe (an interrupted one is repeated, not reviewed).
        stale_after_seconds: When the reconciler may take over an unresolved call.
        max_attempts: Executions whose failure was observed before giving up; crashes of the
            worker do not count.
        requires_approval: Insert a human approval of the canonical request before PREPARE;
            what executes is exactly what was approved.
        approvers: Who may approve (``user:…``, ``group:…``, ``iam:…``).
        approval_timeout_seconds: How long the approval may stay pending.
        approval_when: Ask only when this is true of the request (for example refunds above
            a threshold); it must be a pure function of the request.
        reviewers: Who may decide a call of this tool in review (``iam:…`` patterns match
            SigV4 callers of ``POST /reviews/{op}``). None declared: only the deployment's
            ``REVIEW_OPERATORS`` may (nobody, until configured).
        credentials: Minted right before each ``fn``, ``lookup`` and ``compensate`` call
            and handed over in ``call.credentials``, never recorded (``assume_role``,
            ``secret`` in ``durable_agents.aws.credentials``).
        rate_limit: How often the deployment may call it (``RateLimit(5)``: five calls a
            second), shared by every Lambda; calls over it wait durably.
        registry: Where to register (the default tool registry if omitted).

    Returns:
        A decorator producing a ``Tool``.

    Raises:
        InvalidNameError: If ``name`` is not a valid operation name.
        TypeError: If the function's first parameter is not annotated with a pydantic model.
        ValueError: If an approver or reviewer pattern is malformed.

    Example:
        >>> from pydantic import BaseModel
        >>> class Charge(BaseModel):
        ...     customer: str
        ...     cents: int
        >>> @tool(name="charge", idempotent=True, registry=ToolRegistry())
        ... def charge(request: Charge, call: ToolCall) -> dict:
        ...     return {"charged": request.cents, "key": call.idempotency_key}
        >>> charge.name, charge.idempotent, charge.request_model.__name__
        ('charge', True, 'Charge')
    """
    check_name(name, "tool")
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")

    if requires_approval:
        approvers = check_approvers(approvers)
    if isinstance(reviewers, str):
        raise ValueError(f"reviewers must be a list of patterns, not the string {reviewers!r}")
    if reviewers:
        reviewers = check_approvers(reviewers, role="reviewer")

    def decorate(fn: Callable[[Req, ToolCall], Any]) -> Tool[Req, Any]:
        hints = typing.get_type_hints(fn)
        params = fn.__code__.co_varnames[: fn.__code__.co_argcount]
        request_model: Any = hints.get(params[0]) if params else None
        if not (isinstance(request_model, type) and issubclass(request_model, BaseModel)):
            raise TypeError(f"tool {name!r}: annotate the first parameter with a pydantic model")
        result_type = hints.get("return")
        origin = typing.get_origin(result_type)
        if result_type is ToolResult or origin is ToolResult:
            args = typing.get_args(result_type)
            result_type = args[0] if args else None
        declared: Tool[Req, Any] = Tool(
            name=name,
            schema_version=schema_version,
            fn=fn,
            request_model=typing.cast("type[Req]", request_model),
            result_type=result_type,
            idempotent=idempotent,
            lookup=lookup,
            compensate=compensate,
            compensate_idempotent=compensate_idempotent,
            stale_after_seconds=stale_after_seconds,
            max_attempts=max_attempts,
            requires_approval=requires_approval,
            approvers=tuple(approvers),
            approval_timeout_seconds=approval_timeout_seconds,
            approval_when=approval_when,
            reviewers=tuple(reviewers),
            credentials=tuple(credentials),
            rate_limit=rate_limit,
        )
        (registry or default_tools).add(declared)
        return declared

    return decorate
