"""Flow control over the Api (ADR 0030), through the Api handler on moto.

* ``POST /runs`` takes a ``priority`` (1-5) and a ``budget``; anything else is 400 and starts
  nothing. A run of an agent whose slots are taken answers QUEUED.
* ``GET /runs/{id}`` carries the run's ``flow``: its priority and its tree's budget with its
  own share.
* ``POST /runs/{id}/budget`` extends the budget of the run's tree and wakes what it paused:
  authorized like a cancel (the caller's tenant, another tenant's run 404 like none, an unmapped
  caller 403), 409 for a tree without a budget, 400 for a bad body (nothing extended then).
* ``GET /flow`` shows the queues to the operators (``*``, or everyone without a tenant map);
  a tenant's caller gets 403.
* ``GET /runs?status=QUEUED`` and ``BUDGET_EXCEEDED`` list those runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import RunStatus
from durable_agents.engine.flow.budgets import Budgets
from durable_agents.engine.runtime import Runtime
from durable_agents.flow_control import Budget, Concurrency
from durable_agents.llm import LlmRequest, Message
from tests.contract.test_flow_budget_contract import CONFIG, CountingProvider
from tests.contract.test_versions_contract import drive
from tests.unit.conftest import Deployment
from tests.unit.test_api_approvals import OPERATOR, Reply, api, request  # noqa: F401 - fixture
from tests.unit.test_api_tenancy import MISSING_RUN, TENANT_A, TENANT_B, TENANT_MAP, UNMAPPED

pytestmark = pytest.mark.usefixtures("api")


def flow_registry() -> AgentRegistry:
    registry = AgentRegistry()

    @agent(name="spender", version="1", registry=registry, budget=Budget(tokens=30))
    def spender(ctx: DurableContext, topic: str) -> str:
        for turn in range(3):  # 20 tokens a call: the third call is over a budget of 30
            ctx.llm(f"think-{turn}", LlmRequest(messages=[Message.user(topic)]), config=CONFIG)
        return topic

    @agent(name="limited", version="1", registry=registry, concurrency=Concurrency(limit=1))
    def limited(ctx: DurableContext, value: Any) -> Any:
        return value

    @agent(name="plain", version="1", registry=registry)
    def plain(ctx: DurableContext, value: Any) -> Any:
        return value

    return registry


@pytest.fixture
def rt(api: Deployment, monkeypatch: pytest.MonkeyPatch) -> Runtime:  # noqa: F811
    """The Api's runtime (moto) with the agents above, a counting model and a skip clock."""
    from api.services import get_runtime

    runtime = get_runtime()
    monkeypatch.setattr(runtime, "registry", flow_registry())
    monkeypatch.setattr(runtime, "clock", SkipClock())
    monkeypatch.setattr(runtime, "providers", {"counting": CountingProvider()})
    return runtime


def _over_budget(rt: Runtime, api: Deployment, tenant: str = "default") -> str:  # noqa: F811
    run, _ = rt.start_run("spender", "costs", tenant=tenant)
    assert drive(rt, run.run_id) is RunStatus.BUDGET_EXCEEDED
    api.published()
    return run.run_id


def _extend(run_id: str, body: Any, caller: Any = OPERATOR) -> Reply:
    return request("POST", f"/runs/{run_id}/budget", body, user_arn=caller)


def _untouched(rt: Runtime, run_id: str) -> None:
    state = Budgets(rt.store.flow_items()).state(run_id)
    assert state is not None and state.extensions == [] and state.limit_tokens == 30
    assert state.exceeded


# ----------------------------------------------------------------------------- POST /runs
def test_a_start_takes_a_priority_and_a_budget(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    body = {
        "agent": "plain",
        "input": 1,
        "priority": 1,
        "budget": {"tokens": 500, "cost_usd": 0.25, "on_exceeded": "fail"},
    }
    reply = request("POST", "/runs", body)
    assert reply.status == 201, reply.text
    assert set(reply.json) == {"created", "run"}  # the answer keeps its shape
    run_id = reply.json["run"]["run_id"]
    header = rt.store.get_run(run_id)
    assert header.flow is not None and header.flow["priority"] == 1
    state = Budgets(rt.store.flow_items()).state(run_id)
    assert state is not None
    assert (state.limit_tokens, state.limit_cost_micros, state.on_exceeded) == (
        500,
        250_000,
        "fail",
    )
    shown = request("GET", f"/runs/{run_id}").json["flow"]
    assert shown["priority"] == 1 and shown["budget"]["limit"] == {"tokens": 500, "cost_usd": 0.25}


def test_a_start_of_an_agent_whose_slots_are_taken_answers_queued(rt: Runtime) -> None:
    first = request("POST", "/runs", {"agent": "limited", "input": 1})
    second = request("POST", "/runs", {"agent": "limited", "input": 2, "priority": 2})
    assert (first.status, second.status) == (201, 201), second.text
    # Every run of a limited agent starts QUEUED; the free slot is granted right after.
    assert first.json["run"]["status"] == second.json["run"]["status"] == "QUEUED"
    assert set(second.json) == {"created", "run"}
    now = [request("GET", f"/runs/{r.json['run']['run_id']}").json for r in (first, second)]
    assert [r["status"] for r in now] == ["RUNNING", "QUEUED"]
    assert "queue" not in now[0]["flow"]
    assert now[1]["flow"]["priority"] == 2 and now[1]["flow"]["queue"]["key"] == "default"
    assert now[1]["flow"]["queue"]["waited_ms"] >= 0


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"priority": 0}, "priority"),
        ({"priority": 6}, "priority"),
        ({"priority": "1"}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": 2.5}, "priority"),
        ({"budget": {}}, "budget"),
        ({"budget": {"tokens": 0}}, "budget.tokens"),
        ({"budget": {"tokens": -5}}, "budget.tokens"),
        ({"budget": {"tokens": True}}, "budget.tokens"),
        ({"budget": {"tokens": 1.5}}, "budget.tokens"),
        ({"budget": {"cost_usd": 0}}, "budget.cost_usd"),
        ({"budget": {"cost_usd": "1"}}, "budget.cost_usd"),
        ({"budget": {"cost_usd": 1e400}}, "budget.cost_usd"),  # inf once parsed
        ({"budget": {"tokens": 10, "on_exceeded": "stop"}}, "budget.on_exceeded"),
        ({"budget": {"tokens": 10, "cost_micros": 5}}, "budget has no fields"),
        ({"budget": [10]}, "budget must be an object"),
        ({"budget": "10 tokens"}, "budget must be an object"),
    ],
)
def test_a_bad_priority_or_budget_is_400_and_starts_nothing(
    rt: Runtime,
    api: Deployment,  # noqa: F811
    extra: dict[str, Any],
    named: str,
) -> None:
    raw = json.dumps({"agent": "plain", "input": 1, **extra}).replace("Infinity", "1e400")
    reply = request("POST", "/runs", raw_body=raw)
    assert reply.status == 400, reply.text
    assert reply.json["error"]["type"] == "BadRequest"
    assert named in reply.json["error"]["message"]
    assert rt.store.list_runs(limit=10).runs == []
    assert api.published() == []


# ------------------------------------------------------------------------ GET /runs/{id}
def test_a_budgeted_runs_flow_shows_its_trees_budget_and_its_share(
    rt: Runtime,
    api: Deployment,  # noqa: F811
) -> None:
    run_id = _over_budget(rt, api)
    reply = request("GET", f"/runs/{run_id}")
    assert reply.status == 200 and reply.json["status"] == "BUDGET_EXCEEDED"
    flow = reply.json["flow"]
    assert flow["priority"] == 3 and "queue" not in flow
    budget = flow["budget"]
    assert budget["root_run_id"] == run_id and budget["exceeded"] is True
    assert budget["limit"]["tokens"] == 30 and budget["used"]["tokens"] == 40
    assert budget["run_used"] == {"tokens_in": 20, "tokens_out": 20, "cost_usd": 0.00036,
                                  "calls": 2}  # fmt: skip
    plain = rt.start_run("plain", 1)[0].run_id
    assert request("GET", f"/runs/{plain}").json["flow"] == {"priority": 3}


# ------------------------------------------------------------------ POST /runs/{id}/budget
def test_an_extension_raises_the_budget_and_the_run_goes_on(
    rt: Runtime,
    api: Deployment,  # noqa: F811
) -> None:
    run_id = _over_budget(rt, api)
    reply = _extend(run_id, {"add_tokens": 100, "add_cost_usd": 0.5, "reason": "worth it"})
    assert reply.status == 200, reply.text
    assert set(reply.json) == {"run_id", "budget"} and reply.json["run_id"] == run_id
    budget = reply.json["budget"]
    assert budget["limit"] == {"tokens": 130, "cost_usd": 0.5} and budget["exceeded"] is False
    (extension,) = budget["extensions"]
    assert extension["by"] == f"iam:{OPERATOR}" or extension["by"].endswith(OPERATOR)
    assert extension["reason"] == "worth it" and extension["add_tokens"] == 100
    assert [e["detail-type"] for e in api.published()] == ["Step Ready"]  # the run woken
    assert drive(rt, run_id) is RunStatus.SUCCEEDED


def test_an_extension_of_nothing_only_wakes_the_paused(
    rt: Runtime,
    api: Deployment,  # noqa: F811
) -> None:
    run_id = _over_budget(rt, api)
    reply = _extend(run_id, {"reason": "re-wake"})
    assert reply.status == 200, reply.text
    assert reply.json["budget"]["limit"]["tokens"] == 30  # nothing added: still exceeded
    assert reply.json["budget"]["exceeded"] is True


def test_another_tenants_run_is_404_like_none_and_extends_nothing(
    rt: Runtime,
    api: Deployment,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    run_id = _over_budget(rt, api, tenant="a")
    body = {"add_tokens": 1000, "reason": "not mine"}
    theirs, missing = _extend(run_id, body, TENANT_B), _extend(MISSING_RUN, body, TENANT_B)
    assert theirs.status == missing.status == 404, theirs.text
    assert theirs.text.replace(run_id, "ID") == missing.text.replace(MISSING_RUN, "ID")
    _untouched(rt, run_id)
    assert api.published() == []
    # The run's own tenant may, as it may cancel it.
    assert _extend(run_id, body, TENANT_A).status == 200


def test_a_caller_who_may_not_cancel_may_not_extend(
    rt: Runtime,
    api: Deployment,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    run_id = _over_budget(rt, api, tenant="a")
    cancel = request("POST", f"/runs/{run_id}/cancel", {"reason": "x"}, user_arn=UNMAPPED)
    extend = _extend(run_id, {"add_tokens": 1000, "reason": "x"}, UNMAPPED)
    assert cancel.status == extend.status == 403, extend.text
    assert extend.json["error"]["type"] == cancel.json["error"]["type"] == "TenantNotMappedError"
    assert _extend(run_id, {"add_tokens": 1, "reason": "x"}, caller=None).status == 401
    _untouched(rt, run_id)
    assert api.published() == []


def test_a_tree_without_a_budget_is_409(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = rt.start_run("plain", 1)[0].run_id
    reply = _extend(run_id, {"add_tokens": 10, "reason": "more"})
    assert reply.status == 409, reply.text
    assert reply.json["error"]["type"] == "NoBudgetError"
    assert "has no budget" in reply.json["error"]["message"]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"add_tokens": -5, "reason": "r"}, "add_tokens"),
        ({"add_tokens": "5", "reason": "r"}, "add_tokens"),
        ({"add_tokens": True, "reason": "r"}, "add_tokens"),
        ({"add_tokens": 1.5, "reason": "r"}, "add_tokens"),
        ({"add_cost_usd": -0.1, "reason": "r"}, "add_cost_usd"),
        ({"add_cost_usd": "0.1", "reason": "r"}, "add_cost_usd"),
        ({"add_tokens": 5}, "reason"),
        ({"add_tokens": 5, "reason": ""}, "reason"),
        ({"add_tokens": 5, "reason": "   "}, "reason"),
        ({"add_tokens": 5, "reason": "x" * 501}, "reason"),
        ({"add_tokens": 5, "reason": 7}, "reason"),
        ({"add_tokens": 5, "reason": "r", "by": "someone-else"}, "by"),
        ([5], "body"),
    ],
)
def test_a_bad_extension_body_is_400_and_extends_nothing(
    rt: Runtime,
    api: Deployment,  # noqa: F811
    body: Any,
    named: str,
) -> None:
    run_id = _over_budget(rt, api)
    reply = _extend(run_id, body)
    assert reply.status == 400, reply.text
    assert reply.json["error"]["type"] == "BadRequest"
    assert named in reply.json["error"]["message"]
    _untouched(rt, run_id)
    assert api.published() == []


def test_an_infinite_amount_is_400(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = _over_budget(rt, api)
    reply = request(
        "POST", f"/runs/{run_id}/budget", raw_body='{"add_cost_usd": 1e400, "reason": "r"}'
    )
    assert reply.status == 400 and "add_cost_usd" in reply.json["error"]["message"]
    _untouched(rt, run_id)


# ------------------------------------------------------------------------------- GET /flow
def test_operators_see_each_limited_agents_queue(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt.start_run("limited", 1)  # takes the one slot
    second, _ = rt.start_run("limited", 2)  # waits for it
    assert rt.store.get_run(second.run_id).status is RunStatus.QUEUED
    rt.clock.advance(1_500)  # type: ignore[attr-defined] - the skip clock

    def shown(caller: str) -> dict[str, Any]:
        reply = request("GET", "/flow", user_arn=caller)
        assert reply.status == 200, reply.text
        body: dict[str, Any] = reply.json
        return body

    overview = shown(TENANT_A)  # no tenant map: one tenant, everyone's
    (limited,) = overview["agents"]
    assert limited["agent"] == "limited" and limited["limit"] == 1
    assert (limited["running"], limited["queued"]) == (1, 1)
    assert limited["keys"] == [
        {"key": "default", "running": 1, "queued": 1, "oldest_wait_ms": 1_500}
    ]
    assert overview["rate_limits"] == []
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    assert shown(OPERATOR)["agents"] == overview["agents"]  # the operators' tenant (*)


def test_a_tenants_caller_may_not_read_the_flow(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt.start_run("limited", 1, tenant="a")
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    for caller, refused in ((TENANT_A, "NotAnOperatorError"), (UNMAPPED, "TenantNotMappedError")):
        reply = request("GET", "/flow", user_arn=caller)
        assert reply.status == 403, reply.text
        assert reply.json["error"]["type"] == refused
        assert "limited" not in reply.text
    assert request("GET", "/flow", user_arn=None).status == 401


# ---------------------------------------------------------------------------- GET /runs
def test_runs_are_listed_by_the_flow_statuses(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    over = _over_budget(rt, api)
    rt.start_run("limited", 1)
    queued, _ = rt.start_run("limited", 2)

    def listed(status: str) -> list[str]:
        reply = request("GET", "/runs", query={"status": status})
        assert reply.status == 200, reply.text
        return [r["run_id"] for r in reply.json["runs"]]

    assert listed("QUEUED") == [queued.run_id]
    assert listed("queued") == [queued.run_id]
    assert listed("BUDGET_EXCEEDED") == [over]
