"""Flow control: concurrency slots and queues, rate limits, run-tree budgets (ADR 0030).

What an agent declares (``durable_agents.flow_control``) is enforced here, over the journal's
flow items (``durable_agents.journal.flow_items``): ``slots`` and ``admission`` (who may
execute), ``rates`` (how often an operation may go), ``budgets`` (what a run tree may spend).
"""
