"""Adapters for AWS services and the Lambda wiring.

EventBridge, EventBridge Scheduler, STS and Secrets Manager, Bedrock, the memory table, the
outbox relay; and what the handlers are built from (settings, telemetry).
"""
