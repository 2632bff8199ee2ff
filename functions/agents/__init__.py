"""Example agents. Copy one to start your own; list its module in AGENT_MODULES."""
