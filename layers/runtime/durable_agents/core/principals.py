"""Who may decide an approval: principals and approver patterns.

Approver patterns (stored with each approval):

* ``user:<subject or email>`` — a person authenticated by JWT: the claims the issuer is
  trusted for (``JwtVerifier(user_claims=...)``: the verified ``email`` by default, ``sub`` only
  for issuers that assign subjects themselves) end up in ``Principal.user_ids``;
* ``group:<name>`` — any person whose JWT lists the group (``cognito:groups`` or ``groups``);
* ``iam:<ARN>`` or ``iam:<ARN prefix>*`` — a service or operator calling with SigV4.

A signed link is minted for one ``user:`` or ``group:`` approver pattern and carries it (an
``iam:`` approver signs its requests and never gets a bearer link). Minting is a privilege of its
own: only the configured notifier principals (``LINK_MINTERS``, ``iam:`` patterns) may mint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

PREFIXES = ("user:", "group:", "iam:")


def check_approvers(approvers: Iterable[str], *, role: str = "approver") -> tuple[str, ...]:
    """Validates approver patterns (and reviewer patterns: ``role="reviewer"``).

    Raises:
        ValueError: If the list is empty or a pattern is malformed.
    """
    patterns = tuple(approvers) if not isinstance(approvers, str) else (approvers,)
    if not patterns:
        raise ValueError(f"at least one {role} is needed")
    for pattern in patterns:
        if (
            not isinstance(pattern, str)
            or not pattern.startswith(PREFIXES)
            or len(pattern.split(":", 1)[1]) == 0
        ):
            raise ValueError(f"{role} {pattern!r} must be user:<id>, group:<name> or iam:<ARN>[*]")
    return patterns


ANYONE = "*"
"""``acting_as``: every approver and reviewer pattern."""


@dataclass(frozen=True)
class Principal:
    """An authenticated caller.

    Attributes:
        via: ``iam``, ``jwt`` or ``link``.
        identity: The IAM ARN, the JWT subject, or the link's approver pattern.
        email: The JWT ``email`` claim, if verified.
        groups: The JWT groups.
        user_ids: What ``user:`` patterns match for a JWT (the claims its issuer is trusted for).
        tenant: The tenant a JWT names (its ``JWT_TENANT_CLAIM`` claim), if it names one.
        acting_as: Local mode only (``durable-agents local --act-as``): approver and reviewer
            patterns the local IAM caller decides as (``*``: any). Empty on AWS
            (``deciders.principal_from_iam``).
    """

    via: str
    identity: str
    email: str | None = None
    groups: frozenset[str] = field(default_factory=frozenset)
    user_ids: frozenset[str] = field(default_factory=frozenset)
    tenant: str | None = None
    acting_as: frozenset[str] = field(default_factory=frozenset)

    @property
    def display(self) -> str:
        """How the decision records who made it."""
        if self.via == "jwt":
            return f"user:{self.email or self.identity}"
        if self.acting_as:
            acting = (
                "any approver" if ANYONE in self.acting_as else ", ".join(sorted(self.acting_as))
            )
            return f"{self.identity} (local mode, acting as {acting})"
        return self.identity


def may_decide(principal: Principal, approvers: Iterable[str]) -> bool:
    """Whether ``principal`` matches one of the approver patterns."""
    approvers = tuple(approvers)
    # Local mode's dev-only switch: the developer decides as these approvers.
    acting = principal.acting_as if principal.via == "iam" else frozenset()
    if ANYONE in acting or not acting.isdisjoint(approvers):
        return True
    for pattern in approvers:
        kind, _, value = pattern.partition(":")
        # A link never stands in for an iam: approver (that would make SigV4 a bearer token).
        if principal.via == "link" and principal.identity == pattern and kind != "iam":
            return True
        if principal.via == "jwt":
            if kind == "user" and value in principal.user_ids:
                return True
            if kind == "group" and value in principal.groups:
                return True
        if principal.via == "iam" and kind == "iam":
            if value.endswith("*") and principal.identity.startswith(value[:-1]):
                return True
            if principal.identity == value:
                return True
    return False


def iam_patterns(variable: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The ``iam:`` patterns a comma-separated variable lists (``iam:`` may be left out).

    Used for ``LINK_MINTERS`` (who may mint signed links) and ``REVIEW_OPERATORS`` (who may
    decide reviews of tools that declare no reviewers). Unset or empty means nobody.

    Raises:
        ValueError: If an entry is not an IAM ARN (or ARN prefix ending in ``*``).
    """
    patterns = []
    for raw in environ.get(variable, "").split(","):
        entry = raw.strip()
        if not entry:
            continue
        pattern = entry if entry.startswith("iam:") else f"iam:{entry}"
        if not pattern.startswith("iam:arn:") or pattern == "iam:arn:*":
            raise ValueError(f"{variable}: {entry!r} must be an IAM ARN or ARN prefix ending in *")
        patterns.append(pattern)
    return tuple(patterns)
