"""Local mode's dev-only identity switch: ``durable-agents local --act-as PATTERN``.

Every example's approvals wait for people (``group:finance``, ``group:support-leads``), and
locally nobody signs in: the local IAM caller is not among them, and the console's Approve
and ``approvals decide`` answered 403 with no way forward. With ``--act-as`` the local caller
decides as those approvers and reviewers. The switch travels in a part of the event only
local mode's server writes (``requestContext.durableAgentsLocal``) and is honoured only in an
event of local mode's Api (``apiId`` ``local``, which no API Gateway id can be), so a
deployed Api never acts on it, whatever a request carries.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents.auth.deciders import principal_from_iam
from durable_agents.core.principals import may_decide

ARN = "arn:aws:iam::000000000000:user/local-developer"


def _event(api_id: str, acting: Any) -> dict[str, Any]:
    return {
        "requestContext": {
            "apiId": api_id,
            "identity": {"userArn": ARN},
            "durableAgentsLocal": {"actingAs": acting},
        }
    }


def test_local_mode_acts_as_the_patterns_it_was_started_with() -> None:
    principal = principal_from_iam(_event("local", ["group:finance"]))
    assert principal.acting_as == frozenset({"group:finance"})
    assert may_decide(principal, ["group:finance", "user:ada@example.com"])
    assert not may_decide(principal, ["group:legal"])
    assert principal.display == f"{ARN} (local mode, acting as group:finance)"


def test_acting_as_anyone_decides_every_approval_and_review() -> None:
    anyone = principal_from_iam(_event("local", ["*"]))
    for approvers in (["group:legal"], ["user:bo@example.com"], ["iam:arn:aws:iam::1:role/x"]):
        assert may_decide(anyone, approvers)
    assert anyone.display == f"{ARN} (local mode, acting as any approver)"


@pytest.mark.parametrize("api_id", ["a1b2c3d4e5", "", None])
def test_a_deployed_api_ignores_the_switch(api_id: Any) -> None:
    principal = principal_from_iam(_event(api_id, ["*"]))
    assert principal.acting_as == frozenset()
    assert not may_decide(principal, ["group:finance"])
    assert principal.display == ARN


@pytest.mark.parametrize("acting", ["group:finance", [1], ["group:"], ["nobody"], {"a": 1}])
def test_a_malformed_switch_grants_nothing(acting: Any) -> None:
    principal = principal_from_iam(_event("local", acting))
    assert principal.acting_as == frozenset()
