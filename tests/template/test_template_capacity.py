"""Capacity (docs/security.md): per-route throttling, and the StepRunner's reserved concurrency."""

from __future__ import annotations

from typing import Any

from tests.template.template_yaml import API_ROUTES, FUNCTIONS, props

# The public routes are throttled below the stage default, and the engine keeps reserved
# concurrency the Api cannot take.
THROTTLED_ROUTES = {
    ("GET", "/links/approvals/{approval_id}"): (20, 10),
    ("POST", "/links/approvals/{approval_id}"): (20, 10),
    ("GET", "/people/approvals/{approval_id}"): (20, 10),
    ("POST", "/people/approvals/{approval_id}"): (20, 10),
    ("POST", "/callbacks/{callback_id}/success"): (50, 25),
    ("POST", "/callbacks/{callback_id}/failure"): (50, 25),
    ("POST", "/callbacks/{callback_id}/heartbeat"): (50, 25),
    ("GET", "/runs/{run_id}/stream"): (20, 10),
}


def test_public_routes_have_their_own_throttling(resources: dict[str, Any]) -> None:
    settings = props(resources, "DurableApi")["MethodSettings"]
    default = next(s for s in settings if s["ResourcePath"] == "/*")
    assert (default["ThrottlingBurstLimit"], default["ThrottlingRateLimit"]) == (100, 50)
    per_route = {
        (s["HttpMethod"], s["ResourcePath"].replace("~1", "/")): (
            s["ThrottlingBurstLimit"],
            s["ThrottlingRateLimit"],
        )
        for s in settings
        if s["ResourcePath"] != "/*"
    }
    assert per_route == {(m, "/" + p): limits for (m, p), limits in THROTTLED_ROUTES.items()}
    declared = set(API_ROUTES.values())
    for method, path in THROTTLED_ROUTES:
        assert (method, path) in declared  # a setting for a route that exists
        assert path.startswith(("/links/", "/people/", "/callbacks/", "/runs/"))


def test_step_runner_reserves_concurrency_by_parameter(template: dict[str, Any]) -> None:
    parameter = template["Parameters"]["StepRunnerReservedConcurrency"]
    assert parameter["Type"] == "Number" and parameter["Default"] == 100
    assert parameter["MinValue"] == 0
    reserved = props(template["Resources"], "StepRunnerFunction")["ReservedConcurrentExecutions"]
    assert reserved == {
        "Fn::If": [
            "ReservesStepRunnerConcurrency",
            {"Ref": "StepRunnerReservedConcurrency"},
            {"Ref": "AWS::NoValue"},
        ]
    }
    assert template["Conditions"]["ReservesStepRunnerConcurrency"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "StepRunnerReservedConcurrency"}, 0]}]
    }
    # The Api (and the other functions) reserve nothing: they share what is left.
    for logical_id in set(FUNCTIONS) - {"StepRunnerFunction"}:
        assert "ReservedConcurrentExecutions" not in props(template["Resources"], logical_id)
