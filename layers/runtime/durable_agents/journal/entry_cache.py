"""Journal entries a process decoded already, handed out again instead of decoded anew.

A journal entry item is written once and never changed (``attribute_not_exists`` on its key,
docs/adr/0001-journal-layout.md), so the entry decoded from it the first time is the entry for
as long as the run exists. Keeping it saves decoding (and, for a spilled value, the S3 read) on
every later load of the run, and it hands replay the *same* ``Entry`` objects, which is what lets
``durable_agents.engine.replay_index.WarmRecords`` fold only the entries that are new.

A run is identified by its id *and* its creation time: a run id can be used again once the old
run expired (retention), and the new run's entries must never be mistaken for the old one's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from durable_agents.core.models import Entry

DEFAULT_MAX_ENTRIES = 100_000
"""How many entries a process keeps in all (runs least recently loaded are dropped first)."""


class DecodedEntries:
    """Decoded entries by (run id, creation time) and sort key; bounded and thread-safe.

    Args:
        max_entries: The bound on entries kept over all runs.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES):
        self._max = max_entries
        self._runs: OrderedDict[tuple[str, int], dict[str, Entry]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def run(self, run_id: str, created_at_ms: int) -> dict[str, Entry]:
        """The entries kept of one run (sort key → entry), marked as used most recently.

        The dict is shared: add to it with ``keep``, never remove from it.
        """
        key = (run_id, created_at_ms)
        with self._lock:
            known = self._runs.get(key)
            if known is None:
                known = self._runs[key] = {}
            self._runs.move_to_end(key)
            return known

    def keep(self, known: dict[str, Entry], sort_key: str, entry: Entry) -> None:
        """Adds one decoded entry of a run (``known`` from ``run``), then enforces the bound."""
        with self._lock:
            if sort_key in known:
                return
            known[sort_key] = entry
            self._count += 1
            # The run being loaded is the most recent (``run`` moved it last): the oldest go
            # first. A dropped run's dict may still be in a caller's hands; it is just no longer
            # found next time.
            while self._count > self._max and len(self._runs) > 1:
                _, dropped = self._runs.popitem(last=False)
                self._count -= len(dropped)
