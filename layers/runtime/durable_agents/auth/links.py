"""Single-use signed links for people deciding from email or chat.

A token is ``base64url(payload).base64url(HMAC-SHA256(key, payload))``, the payload binding the
approval id, the approver pattern, an expiry and a nonce. The key comes from Secrets Manager and
is cached briefly; it is never logged or returned. "Single use" holds because a decision is
recorded once: a second use finds the approval decided (409).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from durable_agents.auth.tokens import (
    AuthenticationError,
    AuthUnavailableError,
    _b64decode,
    _json_segment,
    b64encode,
)
from durable_agents.core.principals import Principal

MAX_LINK_CHARS = 2_048
MIN_LINK_KEY_BYTES = 32
LINK_TTL_RANGE = (60, 604_800)
"""A signed link lives between one minute and seven days."""
_LINK_CONTEXT = b"durable-agents/approval-link/v1\n"


class SecretsManagerKey:
    """The link key, read from Secrets Manager and cached (never logged, never returned).

    Args:
        client: A ``secretsmanager`` boto3 client.
        secret_arn: The secret's ARN (or name).
        ttl_seconds: How long the key is cached before it is read again (rotation).
        monotonic: The cache's time source (seconds).
    """

    def __init__(
        self,
        client: Any,
        secret_arn: str,
        ttl_seconds: float = 300,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self._client = client
        self.secret_arn = secret_arn
        self.ttl_seconds = ttl_seconds
        self._monotonic = monotonic
        self._key: bytes | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SecretsManagerKey({self.secret_arn!r})"

    def __call__(self) -> bytes:
        """Returns the key.

        Raises:
            AuthUnavailableError: If the secret cannot be read or is too short.
        """
        with self._lock:
            now = self._monotonic()
            if self._key is None or now - self._read_at >= self.ttl_seconds:
                self._key = self._read()
                self._read_at = now
            return self._key

    def _read(self) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

        try:
            got = self._client.get_secret_value(SecretId=self.secret_arn)
        except (ClientError, BotoCoreError) as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)
            raise AuthUnavailableError(f"cannot read the approval link key ({code})") from exc
        value = got.get("SecretBinary") or str(got.get("SecretString") or "").encode()
        if len(value) < MIN_LINK_KEY_BYTES:
            raise AuthUnavailableError(
                f"the approval link key must be at least {MIN_LINK_KEY_BYTES} bytes long"
            )
        return bytes(value)


@dataclass(frozen=True, slots=True)
class LinkClaims:
    """What a signed link grants.

    Attributes:
        approval_id: The one approval it is for.
        approver: The approver pattern it acts as (one of the approval's approvers).
        expires_at_s: Epoch seconds after which it is refused.
        nonce: Random; its prefix names the link in the decision record and in logs.
        minted_by: The IAM principal that minted it (recorded with a decision it makes);
            empty for links minted before links named their minter.
    """

    approval_id: str
    approver: str
    expires_at_s: int
    nonce: str
    minted_by: str = ""

    @property
    def link_id(self) -> str:
        """A short, non-secret name for the link (the nonce's prefix)."""
        return self.nonce[:8]

    @property
    def principal(self) -> Principal:
        """The principal a decision through this link is made as."""
        return Principal(via="link", identity=self.approver)

    @property
    def decided_by(self) -> str:
        """How a decision through this link records who made it."""
        return f"{self.approver} (signed link {self.link_id})"


class LinkSigner:
    """Mints and verifies signed approval links.

    Token: ``base64url(JSON {aid, approver, exp, nonce, by}) + "." + base64url(HMAC-SHA256)``, the
    HMAC taken over a fixed context string and the payload segment, compared in constant time.

    Args:
        key_provider: Returns the HMAC key (e.g. ``SecretsManagerKey``).
    """

    def __init__(self, key_provider: Callable[[], bytes]):
        self._key_provider = key_provider

    def __repr__(self) -> str:
        return "LinkSigner(<key hidden>)"

    def _mac(self, payload_segment: str) -> bytes:
        return hmac.new(
            self._key_provider(), _LINK_CONTEXT + payload_segment.encode("ascii"), hashlib.sha256
        ).digest()

    def mint(
        self,
        approval_id: str,
        approver: str,
        ttl_seconds: int,
        *,
        now_ms: int,
        minted_by: str = "",
    ) -> tuple[str, LinkClaims]:
        """Mints a link token for one approval and one approver pattern.

        ``minted_by`` (the minting principal) is signed into the token, so a decision made
        through it records who handed it out.

        Returns:
            The token (a credential: hand it only to that approver) and what it grants.

        Raises:
            ValueError: If ``ttl_seconds`` is outside 60..604800.
            AuthUnavailableError: If the key cannot be read.
        """
        low, high = LINK_TTL_RANGE
        if not low <= ttl_seconds <= high:
            raise ValueError(f"ttl_seconds must be between {low} and {high}")
        claims = LinkClaims(
            approval_id=approval_id,
            approver=approver,
            expires_at_s=now_ms // 1000 + ttl_seconds,
            nonce=secrets.token_urlsafe(12),
            minted_by=minted_by,
        )
        payload = {
            "aid": claims.approval_id,
            "approver": claims.approver,
            "exp": claims.expires_at_s,
            "nonce": claims.nonce,
            **({"by": claims.minted_by} if claims.minted_by else {}),
        }
        segment = b64encode(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
        return f"{segment}.{b64encode(self._mac(segment))}", claims

    def verify(self, token: str, approval_id: str, *, now_ms: int) -> LinkClaims:
        """Verifies a link token for ``approval_id``.

        Raises:
            AuthenticationError: If the token is malformed, tampered with, expired or for
                another approval.
            AuthUnavailableError: If the key cannot be read.
        """
        if not isinstance(token, str) or not token or len(token) > MAX_LINK_CHARS:
            raise AuthenticationError("the link token is missing or too long", scheme="Link")
        segment, dot, signature = token.partition(".")
        if not dot or "." in signature:
            raise AuthenticationError("the link token is malformed", scheme="Link")
        try:
            given = _b64decode(signature)
            expected = self._mac(segment)
        except (ValueError, UnicodeEncodeError) as exc:
            raise AuthenticationError("the link token is malformed", scheme="Link") from exc
        if not hmac.compare_digest(given, expected):
            raise AuthenticationError(
                "the link's signature does not match (it was altered or is not ours)",
                scheme="Link",
            )
        payload = _json_segment(segment, "link token", "Link")
        aid, approver = payload.get("aid"), payload.get("approver")
        exp, nonce = payload.get("exp"), payload.get("nonce")
        minted_by = payload.get("by", "")
        if not (
            isinstance(aid, str)
            and isinstance(approver, str)
            and isinstance(exp, int)
            and isinstance(nonce, str)
            and isinstance(minted_by, str)
        ):
            raise AuthenticationError("the link token is malformed", scheme="Link")
        if aid != approval_id:
            raise AuthenticationError("this link is for another approval", scheme="Link")
        if now_ms // 1000 >= exp:
            raise AuthenticationError("this link has expired; ask for a new one", scheme="Link")
        return LinkClaims(
            approval_id=aid, approver=approver, expires_at_s=exp, nonce=nonce, minted_by=minted_by
        )
