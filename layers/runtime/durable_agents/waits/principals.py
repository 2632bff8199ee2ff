"""Who may decide an approval: principals and approver patterns.

Approver patterns (stored with each approval):

* ``user:<subject or email>`` — a person authenticated by JWT: the claims the issuer is
  trusted for (``JwtVerifier(user_claims=...)``: the verified ``email`` by default, ``sub`` only
  for issuers that assign subjects themselves) end up in ``Principal.user_ids``;
* ``group:<name>`` — any person whose JWT lists the group (``cognito:groups`` or ``groups``);
* ``iam:<ARN>`` or ``iam:<ARN prefix>*`` — a service or operator calling with SigV4.

A signed link is minted for one approver pattern and carries it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

PREFIXES = ("user:", "group:", "iam:")


def check_approvers(approvers: Iterable[str]) -> tuple[str, ...]:
    """Validates approver patterns.

    Raises:
        ValueError: If the list is empty or a pattern is malformed.
    """
    patterns = tuple(approvers) if not isinstance(approvers, str) else (approvers,)
    if not patterns:
        raise ValueError("an approval needs at least one approver")
    for pattern in patterns:
        if (
            not isinstance(pattern, str)
            or not pattern.startswith(PREFIXES)
            or len(pattern.split(":", 1)[1]) == 0
        ):
            raise ValueError(
                f"approver {pattern!r} must be user:<id>, group:<name> or iam:<ARN>[*]"
            )
    return patterns


@dataclass(frozen=True)
class Principal:
    """An authenticated caller.

    Attributes:
        via: ``iam``, ``jwt`` or ``link``.
        identity: The IAM ARN, the JWT subject, or the link's approver pattern.
        email: The JWT ``email`` claim, if verified.
        groups: The JWT groups.
        user_ids: What ``user:`` patterns match for a JWT (the claims its issuer is trusted for).
    """

    via: str
    identity: str
    email: str | None = None
    groups: frozenset[str] = field(default_factory=frozenset)
    user_ids: frozenset[str] = field(default_factory=frozenset)

    @property
    def display(self) -> str:
        """How the decision records who made it."""
        if self.via == "jwt":
            return f"user:{self.email or self.identity}"
        return self.identity


def may_decide(principal: Principal, approvers: Iterable[str]) -> bool:
    """Whether ``principal`` matches one of the approver patterns."""
    for pattern in approvers:
        kind, _, value = pattern.partition(":")
        if principal.via == "link" and principal.identity == pattern:
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
