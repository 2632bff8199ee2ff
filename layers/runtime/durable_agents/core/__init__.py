"""The vocabulary every layer shares: records, serialization, ids, time, secrets and tenants.

Nothing here imports another package of the library (only ``durable_agents.errors``).
"""
