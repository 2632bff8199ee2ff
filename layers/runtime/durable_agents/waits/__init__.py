"""Waiting on the outside world: human approvals and external callbacks."""
