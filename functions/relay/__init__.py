"""The outbox relay Lambda function."""
