"""Long-term memory, apart from run state: ``ctx.memory`` and the stores behind it.

See ``docs/memory.md``. The store protocol and the in-memory store are in
``durable_agents.memory.store``, the DynamoDB store in ``durable_agents.memory.dynamodb``, and
the recorded operations ``ctx.memory`` offers in ``durable_agents.memory.ops``.
"""

from durable_agents.memory.store import (
    InMemoryMemoryStore,
    MemoryItem,
    MemoryPage,
    MemoryStore,
    namespace_for,
)

__all__ = ["InMemoryMemoryStore", "MemoryItem", "MemoryPage", "MemoryStore", "namespace_for"]
