"""The reconciler Lambda function."""
