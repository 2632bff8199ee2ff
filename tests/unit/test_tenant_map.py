"""``TENANT_MAP`` parsing and matching, and the module's own examples."""

from __future__ import annotations

import doctest

import pytest

from durable_agents.core import tenancy
from durable_agents.core.tenancy import TenantMap, check_tenant, visible

ROLE = "arn:aws:sts::123456789012:assumed-role"


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(tenancy).failed == 0


def test_json_and_comma_lists_are_the_same_map() -> None:
    as_json = TenantMap.parse(f'{{"{ROLE}/a/*": "a", "iam:{ROLE}/ops/x": "*"}}')
    as_list = TenantMap.parse(f" {ROLE}/a/*=a , iam:{ROLE}/ops/x=* ,")
    assert as_json == as_list
    assert as_json.entries == ((f"iam:{ROLE}/a/*", "a"), (f"iam:{ROLE}/ops/x", "*"))


def test_the_most_specific_pattern_wins_whatever_the_order() -> None:
    for text in (
        f"{ROLE}/*=wide,{ROLE}/a/*=a,{ROLE}/a/x=x",
        f"{ROLE}/a/x=x,{ROLE}/a/*=a,{ROLE}/*=wide",
    ):
        tenants = TenantMap.parse(text)
        assert tenants.tenant_of(f"{ROLE}/a/x") == "x"
        assert tenants.tenant_of(f"{ROLE}/a/y") == "a"
        assert tenants.tenant_of(f"{ROLE}/b/y") == "wide"
        assert tenants.tenant_of("arn:aws:iam::1:user/u") is None


@pytest.mark.parametrize(
    "text",
    [
        "arn:*=a",  # everyone
        "user:ada=a",  # not an IAM ARN
        f"{ROLE}/a/*",  # no tenant
        f"{ROLE}/a/*=a#b",  # not a tenant name
        f"{ROLE}/a/*=",
        f"{ROLE}/a/*=a,{ROLE}/a/*=b",  # twice
        '{"arn:aws:iam::1:role/a": 1}',
        "{not json",
    ],
)
def test_a_malformed_map_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"TENANT_MAP|tenant"):
        TenantMap.parse(text)


def test_an_empty_map_means_no_tenants() -> None:
    assert not TenantMap.from_env({}).configured
    assert not TenantMap.parse("  ").configured


def test_tenant_names_and_visibility() -> None:
    assert check_tenant("acme-eu_1.prod") == "acme-eu_1.prod"
    for bad in ("", "*", "-a", "a b", "a#b", "a@b", "x" * 65):
        with pytest.raises(ValueError):
            check_tenant(bad)
    assert visible("*", "a") and visible("a", "a") and not visible("a", "b")


def test_the_jwt_tenant_claim_is_configurable() -> None:
    from durable_agents.auth.jwt import JwtVerifier, jwt_verifier_from_env
    from durable_agents.core.clock import SkipClock
    from tests.unit.test_auth import AUDIENCE, ISSUER, Keys, claims

    env = {"JWT_ISSUER": ISSUER, "JWT_AUDIENCE": AUDIENCE}
    assert jwt_verifier_from_env(env).tenant_claim == "tenant"
    cognito = jwt_verifier_from_env({**env, "JWT_TENANT_CLAIM": "custom:tenant"})
    assert cognito.tenant_claim == "custom:tenant"
    keys, clock = Keys("k"), SkipClock()
    verifier = JwtVerifier(
        ISSUER, AUDIENCE, jwks={"keys": [keys.jwk]}, clock=clock, tenant_claim="custom:tenant"
    )
    token = keys.sign(claims(clock, **{"custom:tenant": "acme", "tenant": "other"}))
    assert verifier.verify(token).tenant == "acme"
    assert verifier.verify(keys.sign(claims(clock, **{"custom:tenant": 7}))).tenant is None
