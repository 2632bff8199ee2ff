"""``POST /runs/{run_id}/migrate`` and ``GET /runs?agent=&version=`` over the Api (moto).

The Api's runtime gets a registry with three versions of ``flow`` (v1, v2 and a v3 that
diverges from v1's journal) and the migrations 1→2, 1→3 and 1→4 (v4's code is not deployed).
A v1 run waits for its approval; the Api moves it, checks it (dry run) or refuses, with every
status code the route documents. Tenancy: another tenant's run is 404 exactly like none.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.core.models import OpKind, RunStatus
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.migrations import MigrationPlan, RecordedRun, migration
from tests.contract.test_migrations_contract import diverging
from tests.contract.test_versions_contract import approve, drive, v1, v2
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api_approvals import OPERATOR, api, request  # noqa: F401 - the fixture
from tests.unit.test_api_tenancy import MISSING_RUN, TENANT_A, TENANT_B, TENANT_MAP

pytestmark = pytest.mark.usefixtures("api")


def flow_registry() -> AgentRegistry:
    registry = AgentRegistry()
    agent_decorator(name="flow", version="3", registry=registry)(diverging)
    agent_decorator(name="flow", version="2", registry=registry)(v2)
    agent_decorator(name="flow", version="1", registry=registry)(v1)  # last: new runs use it
    for target in ("2", "3", "4"):

        def plan(run: RecordedRun) -> MigrationPlan:
            ticket = run.result("create-ticket")  # v2's tickets carry a priority
            return MigrationPlan(
                replays=run.names(),
                results={"create-ticket": {**ticket, "priority": "normal"}},
                note="moved over the Api",
            )

        migration("flow", from_version="1", to_version=target, registry=registry)(plan)
    return registry


@pytest.fixture
def rt(api: Deployment, monkeypatch: pytest.MonkeyPatch) -> Runtime:  # noqa: F811
    """The Api's runtime (moto journal and bus), with the flow registry and a skip clock."""
    from api.services import get_runtime

    runtime = get_runtime()
    monkeypatch.setattr(runtime, "registry", flow_registry())
    monkeypatch.setattr(runtime, "clock", SkipClock())
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    return runtime


def suspended(rt: Runtime, api: Deployment, tenant: str = "a") -> str:  # noqa: F811
    run, _ = rt.start_run("flow", None, tenant=tenant)
    assert drive(rt, run.run_id) is RunStatus.SUSPENDED
    api.published()
    return run.run_id


def _journal() -> DynamoDBJournal:
    return DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)


def _migrations(run_id: str) -> int:
    return sum(e.kind is OpKind.MIGRATION for e in _journal().load(run_id).entries)


def migrate(run_id: str, body: Any, caller: str = TENANT_A, **kw: Any) -> Any:
    return request("POST", f"/runs/{run_id}/migrate", body, user_arn=caller, **kw)


def test_a_migration_over_the_api_moves_the_run_once(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = suspended(rt, api)
    reply = migrate(run_id, {"to_version": "2"})
    assert reply.status == 200, reply.text
    assert reply.json["committed"] is True
    assert reply.json["run"]["versions"]["workflow_version"] == "2"
    assert reply.json["run"]["status"] == "SUSPENDED"  # still waiting for its approval
    record = reply.json["migration"]
    assert record["by"] == TENANT_A and record["note"] == "moved over the Api"
    assert record["from"]["workflow_version"] == "1" and record["replays"]
    assert _migrations(run_id) == 1
    ready = [e for e in api.published() if e["detail-type"] == "Step Ready"]
    assert [e["detail"]["run_id"] for e in ready] == [run_id]
    # Asked again (its answer lost, say): the same answer, nothing written twice.
    again = migrate(run_id, {"to_version": "2"})
    assert again.status == 200 and again.json["migration"] == record
    assert _migrations(run_id) == 1
    approve(rt, run_id)
    assert drive(rt, run_id) is RunStatus.SUCCEEDED
    assert '"version":"2"' in (_journal().get_run(run_id).result or "")


def test_a_dry_run_answers_what_would_change_and_writes_nothing(
    rt: Runtime,
    api: Deployment,  # noqa: F811
) -> None:
    run_id = suspended(rt, api)
    before = _journal().load(run_id)
    reply = migrate(run_id, {"to_version": "2", "dry_run": True})
    assert reply.status == 200, reply.text
    assert reply.json["committed"] is False
    assert "stops at" in reply.json["migration"]["frontier"]
    assert reply.json["run"]["versions"]["workflow_version"] == "1"
    assert _journal().load(run_id) == before
    assert api.published() == []


def test_refusals_are_409_with_the_reason_or_what_is_missing(
    rt: Runtime,
    api: Deployment,  # noqa: F811
) -> None:
    run_id = suspended(rt, api)
    before = _journal().load(run_id)
    diverges = migrate(run_id, {"to_version": "3"})
    assert diverges.status == 409, diverges.text
    error = diverges.json["error"]
    assert error["type"] == "MigrationRefusedError" and "diverges" in error["reason"]
    unknown = migrate(run_id, {"to_version": "9"})
    assert unknown.status == 409, unknown.text
    assert unknown.json["error"]["type"] == "MigrationNotFoundError"
    assert unknown.json["error"]["missing"] == {"migration": {"from": "1", "to": "9"}}
    assert unknown.json["error"]["deployed"] == ["2", "3", "4"]
    undeployed = migrate(run_id, {"to_version": "4"})  # a migration to code not deployed
    assert undeployed.status == 409, undeployed.text
    assert undeployed.json["error"]["missing"] == {"workflow_version": "4"}
    assert undeployed.json["error"]["deployed"] == ["1", "2", "3"]
    assert "'4'" in undeployed.json["error"]["message"]
    assert _journal().load(run_id) == before


def test_a_running_run_is_refused(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run, _ = rt.start_run("flow", None, tenant="a")
    reply = migrate(run.run_id, {"to_version": "2"})
    assert reply.status == 409 and "RUNNING" in reply.json["error"]["reason"]


def test_unknown_and_other_tenants_runs_are_404_alike(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = suspended(rt, api)
    before = _journal().load(run_id)
    theirs = migrate(run_id, {"to_version": "2"}, caller=TENANT_B)
    missing = migrate(MISSING_RUN, {"to_version": "2"}, caller=TENANT_B)
    assert theirs.status == missing.status == 404, theirs.text
    assert theirs.text.replace(run_id, "ID") == missing.text.replace(MISSING_RUN, "ID")
    # Even a dry run reveals nothing of another tenant's run.
    assert migrate(run_id, {"to_version": "2", "dry_run": True}, caller=TENANT_B).status == 404
    assert _journal().load(run_id) == before
    # The operators' tenant (*) may move any tenant's run.
    assert migrate(run_id, {"to_version": "2"}, caller=OPERATOR).status == 200


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (None, 400),
        ({}, 422),
        ({"to_version": ""}, 422),
        ({"to_version": "9" * 81}, 422),
        ({"to_version": 2}, 422),
        ({"to_version": "2", "dry_run": "yes"}, 422),
        ({"to_version": "2", "extra": 1}, 422),
        ([], 422),
    ],
    ids=["none", "empty", "blank", "long", "number", "dry-run-text", "extra", "list"],
)
def test_a_bad_body_is_refused_before_anything_is_read(
    rt: Runtime,
    api: Deployment,  # noqa: F811
    body: Any,
    status: int,
) -> None:
    run_id = suspended(rt, api)
    before = _journal().load(run_id)
    reply = migrate(run_id, body)
    assert reply.status == status, reply.text
    assert _journal().load(run_id) == before


def test_a_bad_run_id_and_a_body_that_is_not_json_are_400(rt: Runtime) -> None:
    assert migrate("bad id!", {"to_version": "2"}).status == 400
    assert migrate("run-1", None, raw_body="{not json").status == 400


def test_runs_are_listed_by_agent_and_version(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    moved = suspended(rt, api)
    staying = suspended(rt, api)
    assert migrate(moved, {"to_version": "2"}).status == 200

    def listed(**query: str) -> set[str]:
        reply = request("GET", "/runs", user_arn=TENANT_A, query=query)
        assert reply.status == 200, reply.text
        return {r["run_id"] for r in reply.json["runs"]}

    assert listed(agent="flow", version="1") == {staying}
    assert listed(agent="flow", version="2", status="SUSPENDED") == {moved}
    assert listed(agent="flow") == {moved, staying}
    assert listed(agent="other") == set()
    assert listed(status="VERSION_UNAVAILABLE") == set()  # a valid status to list by
    for query in ({"agent": "no spaces"}, {"version": "v" * 81}, {"version": "a\x00"}):
        assert request("GET", "/runs", user_arn=TENANT_A, query=query).status == 400


def test_a_version_unavailable_run_is_listed_and_can_be_migrated(
    rt: Runtime,
    api: Deployment,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = suspended(rt, api)
    approve(rt, run_id)
    only_v2 = AgentRegistry()
    agent_decorator(name="flow", version="2", registry=only_v2)(v2)
    full = rt.registry
    monkeypatch.setattr(rt, "registry", only_v2)
    assert rt.execute(run_id).kind.value == "version_unavailable"
    reply = request("GET", "/runs", user_arn=TENANT_A, query={"status": "VERSION_UNAVAILABLE"})
    (shown,) = reply.json["runs"]
    assert shown["run_id"] == run_id and shown["waiting_on"]["version"] == "1"
    monkeypatch.setattr(rt, "registry", full)  # the deployment that carries the migration
    moved = migrate(run_id, {"to_version": "2"})
    assert moved.status == 200, moved.text
    assert moved.json["run"]["status"] == "RUNNING" and moved.json["run"]["error"] is None


def test_filtered_pages_are_followed_to_the_end_by_their_cursors(
    rt: Runtime,
    api: Deployment,  # noqa: F811
) -> None:
    """A filtered page may be short, and its cursor (built from its last run) is accepted."""
    other = AgentRegistry()
    agent_decorator(name="other", version="1", registry=other)(v1)
    flow = rt.registry
    ours: set[str] = set()
    for i in range(6):
        # Newest first: other, flow, flow, other, flow, flow — pages of 3 read 3 index items
        # a query, so the second query of the first page overfills it: cut at its last run.
        rt.clock.advance(10)  # type: ignore[attr-defined]
        rt.registry = other if i % 3 == 2 else flow
        run, _ = rt.start_run(rt.registry.names()[0], None, tenant="a")
        if rt.registry is flow:
            ours.add(run.run_id)
    rt.registry = flow
    for scope in (TENANT_A, OPERATOR):  # the tenant's index, and every tenant's
        seen: list[str] = []
        cursor = None
        pages = 0
        for _ in range(10):
            pages += 1
            query = {"status": "RUNNING", "agent": "flow", "version": "1", "limit": "3"}
            reply = request(
                "GET",
                "/runs",
                user_arn=scope,
                query={**query, **({"cursor": cursor} if cursor else {})},
            )
            assert reply.status == 200, reply.text
            seen += [r["run_id"] for r in reply.json["runs"]]
            cursor = reply.json["cursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(ours) and len(seen) == len(ours) == 4
        assert pages == 2
