"""The engine: one invocation of a run, replay, outcomes, the run lifecycle and every operation.

It imports ``core`` and the ``journal`` port, never ``admin``, ``aws``, ``auth`` or local tooling.
"""
