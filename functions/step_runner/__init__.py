"""The step runner Lambda function."""
