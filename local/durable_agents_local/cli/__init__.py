"""The ``durable-agents`` command: local mode, the moto server, runs, approvals and reviews."""
