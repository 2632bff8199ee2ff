"""Journal backends: one interface, a DynamoDB backend and an in-memory backend.

The exports are imported on first read (``durable_agents._lazy``): every handler reaches this
package through ``durable_agents.journal.retention`` (``@agent(retention=...)``), and none of
the deployed ones uses the in-memory journal, the users' fast test backend.
"""

from typing import TYPE_CHECKING

from durable_agents._lazy import lazy_exports

if TYPE_CHECKING:
    from durable_agents.journal.memory import InMemoryJournal
    from durable_agents.journal.store import JournalStore

# Where each export lives (tests/unit/test_exports.py keeps it, the imports above and __all__
# in step).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "durable_agents.journal.memory": ("InMemoryJournal",),
    "durable_agents.journal.store": ("JournalStore",),
}

__all__ = ["InMemoryJournal", "JournalStore"]

__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
