"""Event-pattern matching for Lambda event filters (``FilterCriteria``), as local mode needs it.

Supports what event filters use most: exact values (a list of allowed values), nested objects,
and the ``exists``, ``prefix`` and ``anything-but`` operators. Any other operator never
matches (docs/local-mode.md says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _one(rule: Any, actual: Any, present: bool) -> bool:
    if isinstance(rule, Mapping):
        if "exists" in rule:
            return bool(rule["exists"]) == present
        if not present:
            return False
        if "prefix" in rule:
            return isinstance(actual, str) and actual.startswith(str(rule["prefix"]))
        if "anything-but" in rule:
            banned = rule["anything-but"]
            banned = banned if isinstance(banned, list) else [banned]
            return actual not in banned
        return False
    if not present:
        return False
    if isinstance(actual, list):
        return rule in actual
    return bool(actual == rule)


def matches(pattern: Mapping[str, Any], value: Any) -> bool:
    """Whether ``value`` (a decoded event or record) matches ``pattern``.

    Args:
        pattern: The filter pattern: keys map to nested patterns or lists of allowed values.
        value: The record.

    Returns:
        True if every key of the pattern matches.
    """
    for key, rule in pattern.items():
        present = isinstance(value, Mapping) and key in value
        actual = value[key] if present else None
        if isinstance(rule, Mapping):
            if not present or not matches(rule, actual):
                return False
        elif isinstance(rule, list):
            if not any(_one(r, actual, present) for r in rule):
                return False
        else:
            return False
    return True


def matches_any(patterns: Sequence[Mapping[str, Any]], value: Any) -> bool:
    """Whether ``value`` matches one of ``patterns`` (no patterns: everything matches)."""
    return not patterns or any(matches(p, value) for p in patterns)
