"""Journal backends: one interface, a DynamoDB backend and an in-memory backend."""

from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore

__all__ = ["InMemoryJournal", "JournalStore"]
