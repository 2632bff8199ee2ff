"""samconfig.toml's environments and the sample events in events/, checked against the template."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest

from tests.template.template_yaml import API_ROUTES, ROOT, props


# --------------------------------------------------------------------------------- samconfig
def test_samconfig_environments() -> None:
    cfg = tomllib.loads((ROOT / "samconfig.toml").read_text())
    assert cfg["version"] == 0.1
    expected = {
        "default": ("durable-agents", "dev"),
        "dev": ("durable-agents-dev", "dev"),
        "prod": ("durable-agents-prod", "prod"),
    }
    for env, (stack, stage) in expected.items():
        section = cfg[env]
        assert section["global"]["parameters"]["stack_name"] == stack
        deploy = section["deploy"]["parameters"]
        assert deploy["capabilities"] == "CAPABILITY_IAM"
        assert deploy["resolve_s3"] is True
        assert f"Stage={stage}" in deploy["parameter_overrides"].split()
        for command in section.values():
            assert "region" not in command["parameters"], env
    assert cfg["prod"]["deploy"]["parameters"]["confirm_changeset"] is True


# ------------------------------------------------------------------------------------ events
def _event(name: str) -> dict[str, Any]:
    data = json.loads((ROOT / "events" / name).read_text())
    assert isinstance(data, dict)
    return data


def test_step_ready_event_matches_the_rule(resources: dict[str, Any]) -> None:
    pattern = props(resources, "StepRunnerFunction")["Events"]["StepReady"]["Properties"]["Pattern"]
    ev = _event("step_ready.json")
    assert ev["source"] in pattern["source"]
    assert ev["detail-type"] in pattern["detail-type"]
    assert {"version", "id", "account", "time", "region", "resources"} <= set(ev)
    assert ev["detail"]["run_id"]


@pytest.mark.parametrize(
    ("name", "route"), [("api_start_run.json", "StartRun"), ("api_get_run.json", "GetRun")]
)
def test_api_events_match_declared_routes(name: str, route: str) -> None:
    ev = _event(name)
    method, path = API_ROUTES[route]
    assert ev["httpMethod"] == method
    assert ev["resource"] == path
    assert ev["requestContext"]["resourcePath"] == path
    assert ev["requestContext"]["identity"]["userArn"].startswith("arn:")
    assert ev["isBase64Encoded"] is False
    for param in re.findall(r"{(\w+)}", path):
        assert ev["pathParameters"][param]
        assert ev["pathParameters"][param] in ev["path"]


def test_start_run_event_body() -> None:
    body = json.loads(_event("api_start_run.json")["body"])
    assert body == {"agent": "example-research", "input": {"topic": "durable execution"}}


def test_reconciler_event_is_a_scheduled_event() -> None:
    ev = _event("reconciler_schedule.json")
    assert ev["source"] == "aws.events"
    assert ev["detail-type"] == "Scheduled Event"


def test_every_function_has_a_sample_event() -> None:
    names = {p.name for p in (ROOT / "events").glob("*.json")}
    assert {
        "step_ready.json",
        "api_start_run.json",
        "reconciler_schedule.json",
        "reconciler_wait_due.json",
        "relay_stream.json",
    } <= names


def test_relay_sample_event_carries_one_outbox_event() -> None:
    from durable_agents.aws.outbox import events_from_stream

    (event,) = events_from_stream(_event("relay_stream.json")["Records"])
    assert (event.detail_type, event.event_id) == ("Order Placed", "run-demo-1:emit:3")
