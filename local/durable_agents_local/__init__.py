"""What runs only on a laptop: local mode, the ``durable-agents`` CLI and the test harness.

A separate package from ``durable_agents`` so that the Lambda layer, which holds
``durable_agents`` only, can never contain any of it (local mode runs the same handlers against
moto, with no AWS account and no Docker).
"""
