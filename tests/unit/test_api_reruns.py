"""``POST /runs/{run_id}/rerun`` and ``POST /runs/rerun`` over the Api handler (DynamoDB on moto).

A checkout charges a card and then fails in ``ship``; after the fix a rerun through the Api
succeeds without a second charge. The answers name the new run and its origin, list the side
effects the rerun may reuse (or repeats, with ``repeat_effects``), and a dry run writes nothing.
The same request twice names one rerun; refusals are 409 (not finished), 400 (no such
operation) and 404 (another tenant's run, like none). The bulk route re-runs a filter's runs
page by page, once each however often it is sent, and never re-runs its own reruns.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_agents import NO_RETRY, AgentRegistry, DurableContext, SkipClock, agent
from durable_agents.core.models import RunStatus
from durable_agents.engine.runtime import Runtime
from durable_agents.tools import ToolCall, ToolRegistry, ToolResult, tool
from tests.contract.test_side_effects_contract import Payment, Provider, Receipt
from tests.contract.test_versions_contract import drive
from tests.unit.conftest import Deployment
from tests.unit.test_api_approvals import api, request  # noqa: F401 - the fixture
from tests.unit.test_api_tenancy import TENANT_A, TENANT_B, TENANT_MAP

pytestmark = pytest.mark.usefixtures("api")
PROVIDER = Provider(dedupe=False)


def shop_registry() -> AgentRegistry:
    tools = ToolRegistry()

    @tool(name="charge", registry=tools)
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return PROVIDER.charge(request, call)

    registry = AgentRegistry()
    for version in ("1", "2"):

        def checkout(ctx: DurableContext, order: dict[str, Any], v: str = version) -> str:
            ctx.step(lambda: order["cents"], name="price")
            receipt = ctx.tool(charge, Payment(customer="c-1", cents=order["cents"]))
            ctx.step(lambda: "ok" if v == "2" else 1 / 0, name="ship", retry=NO_RETRY)
            return receipt.payment_id

        agent(name="checkout", version=version, registry=registry)(checkout)
    return registry


@pytest.fixture
def rt(api: Deployment, monkeypatch: pytest.MonkeyPatch) -> Runtime:  # noqa: F811
    return shop_runtime(monkeypatch)


def shop_runtime(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    """The Api's runtime (moto) with the checkout deployed, a skip clock and the tenant map."""
    from api.services import get_runtime

    runtime = get_runtime()
    monkeypatch.setattr(runtime, "registry", shop_registry())
    monkeypatch.setattr(runtime, "clock", SkipClock())
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    PROVIDER.ledger.clear()
    return runtime


def v1_failure(rt: Runtime, monkeypatch: pytest.MonkeyPatch, cents: int = 500) -> str:
    """A run of version 1 (the bug) that charged, then failed."""
    only_v1 = AgentRegistry()
    only_v1.add(rt.registry.pinned("checkout", "1"))
    monkeypatch.setattr(rt, "registry", only_v1)
    run, _ = rt.start_run("checkout", {"cents": cents}, tenant="a")
    assert drive(rt, run.run_id) is RunStatus.FAILED
    monkeypatch.setattr(rt, "registry", shop_registry())  # the fix, deployed
    return run.run_id


def rerun(run_id: str, body: Any = None, caller: str = TENANT_A, **kw: Any) -> Any:
    return request("POST", f"/runs/{run_id}/rerun", body, user_arn=caller, **kw)


def test_a_rerun_through_the_api_succeeds_without_charging_twice(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = v1_failure(rt, monkeypatch)
    reply = rerun(run_id, {"from": "start"})
    assert reply.status == 201, reply.text
    body = reply.json
    new = body["run"]
    assert new["rerun_of"] == run_id and new["rerun_from"] == "start"
    assert new["versions"]["workflow_version"] == "2"
    assert reply.headers["Location"] == f"/runs/{new['run_id']}"
    assert [e["tool"] for e in body["reusable_effects"]] == ["charge"]
    assert drive(rt, new["run_id"]) is RunStatus.SUCCEEDED
    assert len(PROVIDER.ledger) == 1
    # The same request again names the same rerun (200), and a GET shows where it came from.
    again = rerun(run_id, {"from": "start"})
    assert again.status == 200 and again.json["run"]["run_id"] == new["run_id"]
    shown = request("GET", f"/runs/{new['run_id']}", user_arn=TENANT_A).json
    assert shown["rerun_of"] == run_id


def test_a_dry_run_lists_the_effects_it_would_repeat_and_writes_nothing(
    rt: Runtime,
    monkeypatch: pytest.MonkeyPatch,
    api: Deployment,  # noqa: F811
) -> None:
    run_id = v1_failure(rt, monkeypatch)
    before = rt.store.list_runs(limit=100).runs
    reply = rerun(run_id, {"from": "start", "repeat_effects": True, "dry_run": True})
    assert reply.status == 200, reply.text
    body = reply.json
    assert body["dry_run"] is True and "run" not in body
    (effect,) = body["repeated_effects"]
    assert effect["request"] == {"customer": "c-1", "cents": 500}
    assert rt.store.list_runs(limit=100).runs == before


def test_refusals(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = v1_failure(rt, monkeypatch)
    unknown = rerun(run_id, {"from": "pay"})
    assert unknown.status == 400 and "no operation 'pay'" in unknown.json["error"]["message"]
    assert rerun(run_id, {"version": "9"}).status == 409  # not deployed
    assert rerun(run_id, {"from": "start"}, caller=TENANT_B).status == 404  # like none
    assert rerun(run_id, {"form": "start"}).status == 422  # no such field
    started = rerun(run_id).json["run"]
    refused = rerun(started["run_id"])  # still RUNNING
    assert refused.status == 409
    assert "only a finished run" in refused.json["error"]["message"]


def test_a_replacement_input_is_validated_and_used(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = v1_failure(rt, monkeypatch)
    reply = rerun(run_id, {"from": "start", "input": {"cents": 700}})
    assert reply.status == 201, reply.text
    new = reply.json["run"]
    assert new["input"] == {"cents": 700}
    # Another amount at the charge's position: a person decides, nothing is charged before.
    assert drive(rt, new["run_id"]) is RunStatus.PAUSED
    assert len(PROVIDER.ledger) == 1


def test_bulk_reruns_each_match_once_and_never_its_own_reruns(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = v1_failure(rt, monkeypatch)
    second = v1_failure(rt, monkeypatch, cents=300)
    body = {"agent": "checkout", "status": "FAILED", "from": "failed", "limit": 1}
    pages: list[dict[str, Any]] = []
    cursor = None
    while True:
        reply = request("POST", "/runs/rerun", {**body, "cursor": cursor}, user_arn=TENANT_A)
        assert reply.status == 200, reply.text
        pages.append(reply.json)
        cursor = reply.json["cursor"]
        if cursor is None:
            break
    started = [r for p in pages for r in p["results"] if r["outcome"] == "started"]
    assert sorted(r["run_id"] for r in started) == sorted([first, second])
    for r in started:
        assert drive(rt, r["rerun_run_id"]) is RunStatus.SUCCEEDED
    assert len(PROVIDER.ledger) == 2  # one charge per original, none by the reruns
    # The same request again: the same reruns ("existing"), none of them re-run in turn.
    again = request("POST", "/runs/rerun", {**body, "limit": 25}, user_arn=TENANT_A).json
    assert sorted(r["outcome"] for r in again["results"]) == ["existing", "existing"]
    # The same run and options name the same rerun whether asked alone or in bulk.
    alone = request("POST", f"/runs/{first}/rerun", {"from": "failed"}, user_arn=TENANT_A)
    assert alone.json["run"]["run_id"] == next(
        r["rerun_run_id"] for p in pages for r in p["results"] if r["run_id"] == first
    )
    # Another tenant's caller matches none of tenant a's runs.
    theirs = request("POST", "/runs/rerun", {**body, "limit": 25}, user_arn=TENANT_B).json
    assert theirs["results"] == []
    # Only operators name a tenant.
    named = request("POST", "/runs/rerun", {**body, "tenant": "a"}, user_arn=TENANT_A)
    assert named.status == 400


def test_bulk_finds_its_reruns_again_with_any_time_range_and_never_re_runs_them(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = v1_failure(rt, monkeypatch)
    only_v1 = AgentRegistry()
    only_v1.add(shop_registry().pinned("checkout", "1"))
    monkeypatch.setattr(rt, "registry", only_v1)  # the fix rolled back: its rerun fails too
    body = {"agent": "checkout", "status": "FAILED", "from": "failed", "version": "1"}
    first = request("POST", "/runs/rerun", {**body, "since": "2000-01-01T00:00:00Z"},
                    user_arn=TENANT_A).json  # fmt: skip
    (made,) = first["results"]
    assert made["run_id"] == original and made["outcome"] == "started"
    assert drive(rt, made["rerun_run_id"]) is RunStatus.FAILED
    # Sent again, its time range another instant (as a CLI's --since 1d is at every call):
    # the original's rerun is found again, and the failed rerun is not re-run beside it.
    again = request("POST", "/runs/rerun", {**body, "since": "2001-01-01T00:00:00Z"},
                    user_arn=TENANT_A).json  # fmt: skip
    outcomes = {r["run_id"]: r["outcome"] for r in again["results"]}
    assert outcomes == {original: "existing", made["rerun_run_id"]: "skipped"}
    reruns_of = [r for r in rt.store.list_runs(limit=100).runs if r.rerun]
    assert [r.run_id for r in reruns_of] == [made["rerun_run_id"]]
