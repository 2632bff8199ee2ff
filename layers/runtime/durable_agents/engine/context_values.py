"""``DurableContext``'s values: time, randomness, memory, and the run's pinned prompts and configs.

Mixed into ``DurableContext`` (``durable_agents.engine.context``), which is where agents meet them.
Each is the same on every replay: recorded (time, memory reads), derived from the position
(UUIDs, random numbers), or pinned when the run started (prompts, model configurations).
"""

from __future__ import annotations

import random as _random
import uuid as _uuid
from datetime import datetime
from typing import TYPE_CHECKING, cast

from durable_agents.engine.context_scope import OperationScope
from durable_agents.engine.operations.memory import Memory
from durable_agents.engine.operations.now import run_now
from durable_agents.errors import DurableError
from durable_agents.llm.types import ModelConfig
from durable_agents.prompts import Prompt, pinned_for_run

if TYPE_CHECKING:
    from durable_agents.engine.context import DurableContext
    from durable_agents.engine.operations.memory import Memory

__all__ = ["ValueOperations"]

_UUID_NAMESPACE = _uuid.UUID("6f1d7a52-8d1c-4d8e-9a57-1f0f4f6b2c11")


class ValueOperations(OperationScope):
    """The run's values that must be the same on every replay."""

    __slots__ = ()

    def now(self) -> datetime:
        """Returns the current time (UTC), recorded on first execution and replayed after.

        Raises:
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        return run_now(cast("DurableContext", self))  # only DurableContext mixes this in

    @property
    def memory(self) -> Memory:
        """The run's tenant's long-term memory, default scope (``docs/memory.md``).

        ``ctx.memory.scope("user:alice")`` is another scope of the same tenant. Reads are
        recorded (a replay sees what the first execution saw); writes happen once per position.

        Raises:
            ValueError: If the run's tenant is not a valid tenant name.
        """
        return Memory(cast("DurableContext", self))

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

    def uuid(self) -> _uuid.UUID:
        """Returns a UUID that is the same on every replay (derived from the position)."""
        self._n_uuid += 1
        return _uuid.uuid5(_UUID_NAMESPACE, f"{self._id_prefix}uuid:{self._n_uuid}")

    def random(self) -> float:
        """Returns a float in [0, 1) that is the same on every replay (seeded by position)."""
        self._n_random += 1
        return _random.Random(f"{self._id_prefix}random:{self._n_random}").random()
