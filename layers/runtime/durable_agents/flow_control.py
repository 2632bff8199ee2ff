"""Flow control an agent declares: concurrency limits, rate limits, priorities and budgets.

Agents share scarce things: a model provider's requests and tokens per minute, a downstream
API's rate, a tenant's fair share, a budget of tokens and money. What an agent declares here is
enforced by the runtime across every Lambda of the deployment (``durable_agents.engine.flow``,
ADR 0030, docs/flow-control.md); nothing of it waits inside an invocation.

Example:
    >>> from durable_agents import AgentRegistry, agent
    >>> from durable_agents.flow_control import Budget, Concurrency
    >>> registry = AgentRegistry()
    >>> @agent(
    ...     name="researcher",
    ...     version="1",
    ...     registry=registry,
    ...     concurrency=Concurrency(limit=3, key="input.user_id", per_key=1),
    ...     budget=Budget(tokens=50_000, on_exceeded="pause"),
    ... )
    ... def researcher(ctx, request: dict) -> str:
    ...     return "done"
    >>> registry.latest("researcher").concurrency.key_of("acme", {"user_id": "u-7"})
    'u-7'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

from durable_agents.errors import DurableError

__all__ = [
    "Budget",
    "BudgetExceededError",
    "Concurrency",
    "Priority",
    "RateLimit",
    "check_priority",
]

_MAX_KEY_CHARS = 128


class Priority(IntEnum):
    """A run's priority: 1 is served first. Runs start at ``NORMAL`` unless told otherwise."""

    HIGHEST = 1
    HIGH = 2
    NORMAL = 3
    LOW = 4
    LOWEST = 5


def check_priority(value: Any) -> int:
    """Returns ``value`` as a priority (1 highest … 5 lowest).

    Raises:
        ValueError: If it is not an integer from 1 to 5.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
        raise ValueError(f"priority must be an integer from 1 (highest) to 5 (lowest): {value!r}")
    return int(value)


@dataclass(frozen=True, slots=True)
class Concurrency:
    """How many runs of an agent may execute at once, overall and per key.

    A run executes while it is RUNNING: from the slot it was granted until it suspends (a
    timer, an approval, a sub-agent), pauses or ends. Suspended runs hold no slot; when one
    wakes, it takes a slot again or waits its turn, QUEUED, holding no compute. Queued runs
    start by priority, then fairly across keys (round-robin: one key's backlog cannot starve
    another's), then by arrival.

    Attributes:
        limit: Runs of this agent executing at once (None: no overall limit).
        key: What groups runs for fairness and ``per_key``: ``"tenant"`` (the run's tenant) or
            ``"input.<field>"`` (a field of the run's input, dotted for nested objects; a run
            whose input has none counts under the key ``""``).
        per_key: Runs of one key executing at once (None: only ``limit`` applies).
        lease_seconds: How long a slot stays held without its run being heard of (an
            invocation renews it). A slot whose invocation died is free again after it.
    """

    limit: int | None = None
    key: str = "tenant"
    per_key: int | None = None
    lease_seconds: float = 960.0

    def __post_init__(self) -> None:
        if self.limit is None and self.per_key is None:
            raise ValueError("Concurrency needs a limit, a per_key limit, or both")
        for name in ("limit", "per_key"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"Concurrency.{name} must be a positive integer: {value!r}")
        if self.key != "tenant" and not (self.key.startswith("input.") and len(self.key) > 6):
            raise ValueError(f"Concurrency.key is 'tenant' or 'input.<field>': {self.key!r}")
        # Longer than a Lambda invocation can live (15 minutes): a live invocation never
        # loses its slot to the lease.
        if self.lease_seconds < 60:
            raise ValueError("Concurrency.lease_seconds must be at least 60")

    def key_of(self, tenant: str, input_value: Any) -> str:
        """The key a run with this tenant and input counts under."""
        if self.key == "tenant":
            return tenant
        value: Any = input_value
        for part in self.key.removeprefix("input.").split("."):
            value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
        if value is None:
            return ""
        return str(value)[:_MAX_KEY_CHARS]


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A rate shared by every Lambda of the deployment: at most ``requests`` per period.

    Declared on a tool (``@tool(rate_limit=RateLimit(5))``: five calls a second). Model
    configurations declare theirs as ``requests_per_minute`` / ``tokens_per_minute``. An
    operation over the limit waits for the next period on a durable timer, holding no
    compute; higher priorities are woken first.

    Attributes:
        requests: Operations per period.
        per_seconds: The period, in seconds (1: per second, 60: per minute).
        tokens: Model tokens per period (model configurations), or None.
        shards: Partitions the period's count is spread over (None: one per 200 requests a
            second, so no DynamoDB partition takes more than its write limit).
    """

    requests: int
    per_seconds: float = 1.0
    tokens: int | None = None
    shards: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.requests, int) or self.requests < 1:
            raise ValueError(f"RateLimit.requests must be a positive integer: {self.requests!r}")
        if self.per_seconds < 0.1:
            raise ValueError("RateLimit.per_seconds must be at least 0.1")
        if self.tokens is not None and self.tokens < 1:
            raise ValueError("RateLimit.tokens must be positive")
        if self.shards is not None and not 1 <= self.shards <= min(self.requests, 64):
            raise ValueError("RateLimit.shards must be from 1 to min(requests, 64)")

    @property
    def period_ms(self) -> int:
        """The period in milliseconds."""
        return int(self.per_seconds * 1000)

    @property
    def shard_count(self) -> int:
        """Partitions a period's count is spread over (``shards``, or one per 200/s)."""
        if self.shards is not None:
            return self.shards
        per_second = self.requests / self.per_seconds
        return max(1, min(self.requests, 64, math.ceil(per_second / 200)))


@dataclass(frozen=True, slots=True)
class Budget:
    """A budget of model tokens and money for a run and every sub-agent it starts.

    Each model call of the run tree looks at what the whole tree used before it calls; the
    usage of each call is added to the tree's root once, whatever crashes or duplicates. A tree
    over its budget either pauses, ``BUDGET_EXCEEDED``, until a person extends the budget over
    the Api (``POST /runs/{id}/budget``), or fails the call with ``BudgetExceededError``.
    A budget is exceeded by at most the usage of the calls already under way when it ran out.

    Attributes:
        tokens: Input plus output tokens (None: no token limit).
        cost_usd: Money, priced per model configuration (``ModelConfig.input_usd_per_mtok``,
            ``output_usd_per_mtok``); None: no money limit.
        on_exceeded: ``"pause"`` (a person decides) or ``"fail"`` (the call raises).
    """

    tokens: int | None = None
    cost_usd: float | None = None
    on_exceeded: Literal["pause", "fail"] = "pause"

    def __post_init__(self) -> None:
        if self.tokens is None and self.cost_usd is None:
            raise ValueError("Budget needs tokens, cost_usd, or both")
        if self.tokens is not None and (not isinstance(self.tokens, int) or self.tokens < 1):
            raise ValueError(f"Budget.tokens must be a positive integer: {self.tokens!r}")
        if self.cost_usd is not None and not self.cost_usd > 0:
            raise ValueError(f"Budget.cost_usd must be positive: {self.cost_usd!r}")
        if self.on_exceeded not in ("pause", "fail"):
            raise ValueError(f"Budget.on_exceeded is 'pause' or 'fail': {self.on_exceeded!r}")

    def to_dict(self) -> dict[str, Any]:
        """The budget as the run header keeps it (``RunHeader.flow["budget"]``)."""
        out: dict[str, Any] = {"on_exceeded": self.on_exceeded}
        if self.tokens is not None:
            out["tokens"] = self.tokens
        if self.cost_usd is not None:
            out["cost_micros"] = round(self.cost_usd * 1_000_000)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Budget:
        """The budget ``to_dict`` wrote (or a ``POST /runs`` body's ``budget``).

        Raises:
            ValueError: If it is not a valid budget.
        """
        micros = data.get("cost_micros")
        cost = data.get("cost_usd", None if micros is None else micros / 1_000_000)
        unknown = set(data) - {"tokens", "cost_usd", "cost_micros", "on_exceeded"}
        if unknown:
            raise ValueError(f"a budget has no fields {sorted(unknown)}")
        return cls(
            tokens=data.get("tokens"), cost_usd=cost, on_exceeded=data.get("on_exceeded", "pause")
        )


class BudgetExceededError(DurableError):
    """A model call its run tree's budget does not cover, under ``on_exceeded="fail"``.

    Recorded as the call's failure, so every replay raises it again at the same place.

    Attributes:
        root_run_id: The run whose budget it is (the tree's root).
        used_tokens: Tokens the tree had used.
        limit_tokens: Its token limit (None: none).
        used_cost_usd: Money it had spent.
        limit_cost_usd: Its money limit (None: none).
    """

    recorded_fields = (
        "root_run_id",
        "used_tokens",
        "limit_tokens",
        "used_cost_usd",
        "limit_cost_usd",
    )

    def __init__(
        self,
        root_run_id: str,
        used_tokens: int,
        limit_tokens: int | None,
        used_cost_usd: float,
        limit_cost_usd: float | None,
    ):
        self.root_run_id = root_run_id
        self.used_tokens = used_tokens
        self.limit_tokens = limit_tokens
        self.used_cost_usd = used_cost_usd
        self.limit_cost_usd = limit_cost_usd
        super().__init__(
            f"run tree {root_run_id!r} is out of budget: {used_tokens} tokens used"
            f" (limit {limit_tokens}), ${used_cost_usd:.6f} spent (limit {limit_cost_usd})"
        )
