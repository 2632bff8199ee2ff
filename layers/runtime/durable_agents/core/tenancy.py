"""Tenants: whose runs a caller may see (docs/adr/0008-tenancy.md).

Every run belongs to one tenant, set when it starts (``RunHeader.tenant``) and never changed;
sub-agent runs inherit their parent's. Approvals, callbacks, reviews and streams belong to the
tenant of their run. Headers written before tenants existed read as ``DEFAULT_TENANT``.

The Api decides the caller's tenant:

* an IAM caller by ``TENANT_MAP`` (``TenantMap``): ``iam:`` ARN patterns, exact or prefix
  ``…*``, to a tenant name, or to ``*`` — the operators' tenant, which sees every tenant;
* a person with a JWT by the claim ``JWT_TENANT_CLAIM`` names (``tenant`` by default).

Without a map every caller is in ``DEFAULT_TENANT`` (one tenant: what deployments without
tenants always had). With one, a caller the map does not name is refused (403): an unmapped
caller falling back to the default tenant would see every run written before the map existed.

>>> tenants = TenantMap.parse("arn:aws:iam::1:role/a-*=a, iam:arn:aws:iam::1:role/ops=*")
>>> tenants.tenant_of("arn:aws:iam::1:role/a-app"), tenants.tenant_of("arn:aws:iam::1:role/ops")
('a', '*')
>>> tenants.tenant_of("arn:aws:iam::1:role/b-app") is None
True
>>> visible("*", "a"), visible("a", "a"), visible("b", "a")
(True, True, False)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_TENANT = "default"
"""The tenant of every run when no ``TENANT_MAP`` is configured (and of headers from before)."""
ALL_TENANTS = "*"
"""The operators' tenant: sees and acts on every tenant's runs (never a run's own tenant)."""
DEFAULT_JWT_TENANT_CLAIM = "tenant"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_tenant(name: str) -> str:
    """Validates a run's tenant name: 1-64 of ``A-Z a-z 0-9 . _ -``, starting alphanumeric.

    No ``#``, ``@`` or ``*``: tenant names become part of index and idempotency keys.

    Raises:
        ValueError: If the name is not one.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"tenant {name!r} must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return name


def visible(caller: str, owner: str) -> bool:
    """Whether a caller of tenant ``caller`` may see a run of tenant ``owner``."""
    return caller in (ALL_TENANTS, owner)


@dataclass(frozen=True)
class TenantMap:
    """IAM ARN patterns and the tenant each maps to (``TENANT_MAP``).

    Attributes:
        entries: ``(pattern, tenant)`` pairs; a pattern is an ``iam:`` ARN, or ARN prefix
            ending in ``*``.
    """

    entries: tuple[tuple[str, str], ...] = ()

    @property
    def configured(self) -> bool:
        """Whether tenants are in use (a map names at least one caller)."""
        return bool(self.entries)

    @classmethod
    def parse(cls, text: str) -> TenantMap:
        """Reads a JSON object ``{"<ARN pattern>": "<tenant>"}`` or ``pattern=tenant,…``.

        ``iam:`` may be left out of a pattern. Empty text is an empty map.

        Raises:
            ValueError: If an entry is malformed: not an ARN (prefix), ``arn:*`` (everyone),
                a tenant name ``check_tenant`` refuses, or a pattern given twice.
        """
        text = text.strip()
        if not text:
            return cls()
        pairs: list[tuple[str, str]] = []
        if text.startswith("{"):
            try:
                loaded = json.loads(text)
            except ValueError as exc:
                raise ValueError("TENANT_MAP is not valid JSON") from exc
            if not isinstance(loaded, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()
            ):
                raise ValueError("TENANT_MAP must map ARN patterns to tenant names (strings)")
            pairs = list(loaded.items())
        else:
            for raw in text.split(","):
                if not raw.strip():
                    continue
                pattern, sep, tenant = raw.strip().rpartition("=")
                if not sep:
                    raise ValueError(f"TENANT_MAP: {raw.strip()!r} is not <ARN pattern>=<tenant>")
                pairs.append((pattern, tenant))
        entries: dict[str, str] = {}
        for raw_pattern, raw_tenant in pairs:
            pattern = raw_pattern.strip()
            pattern = pattern if pattern.startswith("iam:") else f"iam:{pattern}"
            if not pattern.startswith("iam:arn:") or pattern == "iam:arn:*":
                raise ValueError(f"TENANT_MAP: {raw_pattern!r} must be an IAM ARN or ARN prefix*")
            tenant = raw_tenant.strip()
            if tenant != ALL_TENANTS:
                check_tenant(tenant)
            if pattern in entries:
                raise ValueError(f"TENANT_MAP: {raw_pattern!r} is given twice")
            entries[pattern] = tenant
        return cls(tuple(entries.items()))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TenantMap:
        """The map ``TENANT_MAP`` holds (empty when unset).

        Raises:
            ValueError: If it is malformed (see ``parse``).
        """
        return cls.parse(environ.get("TENANT_MAP", ""))

    def tenant_of(self, arn: str) -> str | None:
        """The tenant of the caller with this ARN, or None if no pattern names it.

        An exact ARN wins over prefixes, and a longer prefix over a shorter one, so the map's
        order never matters.
        """
        best: tuple[int, str] | None = None
        for pattern, tenant in self.entries:
            value = pattern.removeprefix("iam:")
            if value.endswith("*"):
                rank = len(value) - 1 if arn.startswith(value[:-1]) else -1
            else:
                rank = 1 << 20 if arn == value else -1
            if rank >= 0 and (best is None or rank > best[0]):
                best = (rank, tenant)
        return None if best is None else best[1]
