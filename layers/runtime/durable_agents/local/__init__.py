"""Local mode: the same handlers against moto, with no AWS account and no Docker."""
