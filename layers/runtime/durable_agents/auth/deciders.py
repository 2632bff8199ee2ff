"""Who is deciding: IAM callers, people with a JWT (any OIDC issuer), and signed links.

Three ways to authenticate a decision, each ending in a ``Principal`` that
``principals.may_decide`` checks against the approval's approver patterns:

* **IAM** (``principal_from_iam``): API Gateway verified the SigV4 signature and put the
  caller's ARN in ``requestContext.identity.userArn``.
* **JWT** (``auth.jwt.JwtVerifier``): an RS256 or ES256 token from an OIDC issuer (a
  Cognito user pool or any other), verified with PyJWT against the issuer's JWKS (signature,
  pinned algorithm, issuer, audience), fetched without following redirects and kept for a
  limited lifespan.
* **Signed link** (``auth.links.LinkSigner``): an HMAC-SHA256 token minted for one approval
  and one approver pattern, expiring, keyed by a secret kept in Secrets Manager.

This module is the IAM one; the other two are ``auth.jwt`` and ``auth.links``.

Nothing here logs or returns a token, a JWT or the link key; error messages say what is wrong
without repeating the credential.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from durable_agents._moved import moved_attribute
from durable_agents.auth.tokens import AuthenticationError
from durable_agents.core.principals import ANYONE, Principal

__all__ = ["principal_from_iam"]


def __getattr__(name: str) -> Any:
    """The JWT and token names this module re-exported resolve, with a warning, for one release.

    They live in ``auth.jwt``, ``auth.jwks`` and ``auth.tokens``; importing them from here
    loaded PyJWT and ``cryptography`` into every handler that needed only the IAM caller.

    Raises:
        AttributeError: For any other unknown name.
    """
    return moved_attribute(__name__, name)


def principal_from_iam(event: Mapping[str, Any]) -> Principal:
    """The SigV4 caller API Gateway authenticated (``requestContext.identity.userArn``).

    Raises:
        AuthenticationError: If the event carries no caller ARN (the route is not IAM-authorised).
    """
    context = event.get("requestContext") or {}
    identity = (context.get("identity") or {}) if isinstance(context, Mapping) else {}
    arn = identity.get("userArn") if isinstance(identity, Mapping) else None
    if not isinstance(arn, str) or not arn.startswith("arn:"):
        raise AuthenticationError(
            "this route needs a request signed with AWS credentials (SigV4)", scheme="IAM"
        )
    return Principal(via="iam", identity=arn, acting_as=_local_acting_as(context))


LOCAL_API_ID = "local"
"""``requestContext.apiId`` of local mode's Api: no API Gateway id is five characters."""

_PATTERN = re.compile(r"(?:user|group|iam):\S+")


def _local_acting_as(context: Mapping[str, Any]) -> frozenset[str]:
    """The patterns ``durable-agents local --act-as`` lets the local caller decide as.

    Read only from an event of local mode's Api (``apiId`` ``local``): API Gateway writes the
    whole ``requestContext`` itself, so no request to a deployed Api can carry this, and a
    deployed Api's id is never ``local``. Anything malformed grants nothing.
    """
    if not isinstance(context, Mapping) or context.get("apiId") != LOCAL_API_ID:
        return frozenset()
    local = context.get("durableAgentsLocal")
    acting = local.get("actingAs") if isinstance(local, Mapping) else None
    if not isinstance(acting, list) or not all(isinstance(p, str) for p in acting):
        return frozenset()
    if not all(p == ANYONE or _PATTERN.fullmatch(p) for p in acting):
        return frozenset()
    return frozenset(acting)
