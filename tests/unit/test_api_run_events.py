"""``POST /runs/{run_id}/events/{name}`` and ``GET /runs/{run_id}/status-value`` (moto).

A run of ``listener`` waits for ``message`` events and publishes how many it heard; the Api
records each event once (202, then 200 for the same ``Idempotency-Key``) and wakes the run.
Tenancy: another tenant's run is 404 exactly like none, and nothing is recorded for it.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, SkipClock, agent
from durable_agents.core.models import RunStatus
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from tests.contract.test_versions_contract import drive
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api_approvals import api, request  # noqa: F401 - the fixture
from tests.unit.test_api_tenancy import MISSING_RUN, TENANT_A, TENANT_B, TENANT_MAP

pytestmark = pytest.mark.usefixtures("api")


def listener_registry() -> AgentRegistry:
    registry = AgentRegistry()

    @agent(name="listener", version="1", registry=registry)
    def listener(ctx: DurableContext, _: Any) -> list[Any]:
        heard: list[Any] = []
        while not heard or heard[-1] != "bye":
            heard.append(ctx.wait_for_event("message", timeout=3600).payload)
            ctx.set_status({"turns": len(heard)})
        return heard

    return registry


@pytest.fixture
def rt(api: Deployment, monkeypatch: pytest.MonkeyPatch) -> Runtime:  # noqa: F811
    """The Api's runtime (moto journal and bus), with the listener and a skip clock."""
    from api.services import get_runtime

    runtime = get_runtime()
    monkeypatch.setattr(runtime, "registry", listener_registry())
    monkeypatch.setattr(runtime, "clock", SkipClock())
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    return runtime


def _suspended(rt: Runtime, api: Deployment) -> str:  # noqa: F811
    run, _ = rt.start_run("listener", None, tenant="a")
    assert drive(rt, run.run_id) is RunStatus.SUSPENDED
    api.published()
    return run.run_id


def send(run_id: str, body: Any, key: str | None = None, caller: str = TENANT_A, **kw: Any) -> Any:
    headers = {"Idempotency-Key": key} if key else None
    return request(
        "POST", f"/runs/{run_id}/events/message", body, headers=headers, user_arn=caller, **kw
    )


def status_value(run_id: str, caller: str = TENANT_A) -> Any:
    return request("GET", f"/runs/{run_id}/status-value", user_arn=caller)


def test_an_event_is_recorded_once_and_wakes_the_run(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = _suspended(rt, api)
    never = status_value(run_id)
    assert never.status == 200, never.text
    assert never.json == {
        "run_id": run_id,
        "status": "SUSPENDED",
        "value": None,
        "set_at": None,
        "op_id": None,
    }
    first = send(run_id, {"text": "hi"}, key="m-1")
    assert first.status == 202, first.text
    assert first.json["seq"] == 1 and first.json["event_id"] == "m-1"
    assert first.json["duplicate"] is False
    ready = [e for e in api.published() if e["detail-type"] == "Step Ready"]
    assert [e["detail"]["run_id"] for e in ready] == [run_id]
    again = send(run_id, {"text": "hi"}, key="m-1")  # its answer lost, say
    assert again.status == 200, again.text
    assert {**again.json, "duplicate": False} == first.json
    assert api.published() == []  # nothing new to wake
    clash = send(run_id, {"text": "other"}, key="m-1")
    assert clash.status == 409 and clash.json["error"]["type"] == "EventIdConflictError"
    assert drive(rt, run_id) is RunStatus.SUSPENDED
    published = status_value(run_id).json
    assert published["value"] == {"turns": 1} and published["set_at"] and published["op_id"]
    assert send(run_id, "bye").status == 202  # no key: a new event
    assert drive(rt, run_id) is RunStatus.SUCCEEDED
    assert rt.store.get_run(run_id).result == json.dumps([{"text": "hi"}, "bye"]).replace(" ", "")
    assert status_value(run_id).json["value"] == {"turns": 2}
    finished = send(run_id, "late")
    assert finished.status == 409, finished.text
    assert finished.json["error"]["type"] == "RunNotAcceptingEventsError"


def test_bad_requests_are_refused_before_anything_is_recorded(
    rt: Runtime,
    api: Deployment,  # noqa: F811
) -> None:
    run_id = _suspended(rt, api)
    before = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE).load(run_id)
    assert send(run_id, None, raw_body="{not json").status == 400
    assert send(run_id, None, raw_body=json.dumps("x" * (300 * 1024))).status == 413
    bad_name = request("POST", f"/runs/{run_id}/events/no%20spaces", "x", user_arn=TENANT_A)
    assert bad_name.status in (400, 404), bad_name.text
    assert send(run_id, "x", key="\u0000").status == 400
    after = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE).load(run_id)
    assert after == before


def test_unknown_and_other_tenants_runs_are_404_alike(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = _suspended(rt, api)
    before = rt.store.load(run_id)
    for call in (lambda r: send(r, "hi", caller=TENANT_B), lambda r: status_value(r, TENANT_B)):
        theirs, missing = call(run_id), call(MISSING_RUN)
        assert theirs.status == missing.status == 404, theirs.text
        assert theirs.text.replace(run_id, "ID") == missing.text.replace(MISSING_RUN, "ID")
    assert rt.store.load(run_id) == before
    assert api.published() == []


def test_an_event_of_one_name_too_many_is_409(
    rt: Runtime,
    api: Deployment,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from durable_agents.engine import inbox as run_inbox

    monkeypatch.setattr(run_inbox, "MAX_EVENT_NAMES", 1)  # the rule, without 64 names
    run_id = _suspended(rt, api)
    assert send(run_id, "hi").status == 202  # "message": its one name
    other = request("POST", f"/runs/{run_id}/events/other", "x", user_arn=TENANT_A)
    assert other.status == 409, other.text
    assert other.json["error"]["type"] == "TooManyEventNamesError"
    assert send(run_id, "again").status == 202  # a name it has: still taken
    assert rt.store.get_run(run_id).event_names == frozenset({"message"})
