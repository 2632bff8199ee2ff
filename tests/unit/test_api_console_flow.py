"""Flow control in the run console (ADR 0030): QUEUED and BUDGET_EXCEEDED runs, a run's flow
card, the "Extend budget" form and the operators' flow overview.

Rendering is checked on hand-made headers; the form goes through the Api handler on moto with
a budgeted agent that really spends its budget, and is refused from another site like every
console form (it changes nothing then).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.console_page import render_flow_overview, render_runs_page
from api.console_timeline import flow_card, render_timeline_page
from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import RunHeader, RunSnapshot, RunStatus
from durable_agents.engine.flow.budgets import Budgets
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import InfrastructureError
from durable_agents.flow_control import Budget, Concurrency
from durable_agents.llm import LlmRequest, Message
from tests.contract.test_flow_budget_contract import CONFIG, CountingProvider
from tests.contract.test_versions_contract import drive
from tests.unit.approvals_harness import request
from tests.unit.conftest import Deployment
from tests.unit.test_api_approvals import api  # noqa: F401 - the fixture
from tests.unit.test_api_console import HOSTILE, _no_raw, form, page

T0 = 1_700_000_000_000


def _header(status: RunStatus, **kw: Any) -> RunHeader:
    return RunHeader(
        run_id="run-1",
        agent="researcher",
        versions={"workflow_version": "1"},
        status=status,
        input="null",
        created_at_ms=T0,
        updated_at_ms=T0,
        **kw,
    )


# ------------------------------------------------------------------------------ rendering
def test_queued_and_budget_exceeded_have_their_own_pills_and_filters() -> None:
    runs = [_header(RunStatus.QUEUED), _header(RunStatus.BUDGET_EXCEEDED)]
    html = render_runs_page(runs, filters={"status": "queued"}, next_cursor=None, root="./")
    assert '<span class="pill s-queued">queued</span>' in html
    assert '<span class="pill s-budget_exceeded">budget_exceeded</span>' in html
    assert '<option value="QUEUED" selected>queued</option>' in html
    assert '<option value="BUDGET_EXCEEDED">budget_exceeded</option>' in html
    assert ".s-queued{" in html and ".s-budget_exceeded{" in html  # styled, not the grey default


def test_a_queued_runs_page_shows_its_key_wait_and_priority_and_may_be_cancelled() -> None:
    header = _header(
        RunStatus.QUEUED,
        waiting_on={"kind": "queue", "key": HOSTILE, "priority": 1, "queued_at_ms": T0},
        flow={"priority": 1},
    )
    flow = {"priority": 1, "queue": {"key": HOSTILE, "waited_ms": 125_000}}
    html = render_timeline_page(RunSnapshot(header, [], []), [], root="../../", flow=flow)
    _no_raw(html)
    assert '<section class="card flow">' in html
    assert "Queued under key" in html and "&lt;script&gt;" in html and "2 min 5 s" in html
    assert "<dt>Priority</dt><dd>1 " in html
    assert "Cancel run" in html  # told when its turn comes
    assert "Extend budget" not in html


def _budget(**over: Any) -> dict[str, Any]:
    budget = {
        "root_run_id": "root-1",
        "limit": {"tokens": 100, "cost_usd": 0.5},
        "used": {"tokens_in": 60, "tokens_out": 60, "tokens": 120, "cost_usd": 0.00108,
                 "calls": 6},
        "on_exceeded": "pause",
        "exceeded": True,
        "extensions": [
            {"by": HOSTILE, "reason": f"worth it {HOSTILE}", "at_ms": T0, "add_tokens": 50,
             "add_cost_usd": 0.25},
        ],
        "run_used": {"tokens_in": 20, "tokens_out": 20, "cost_usd": 0.00036, "calls": 2},
    }  # fmt: skip
    budget.update(over)
    return budget


def test_a_budget_exceeded_runs_page_shows_the_budget_its_share_and_the_extend_form() -> None:
    header = _header(
        RunStatus.BUDGET_EXCEEDED, waiting_on={"kind": "budget", "root": "root-1"},
        flow={"root": "root-1"},
    )  # fmt: skip
    flow = {"priority": 3, "budget": _budget()}
    html = render_timeline_page(RunSnapshot(header, [], []), [], root="../../", flow=flow)
    _no_raw(html)
    assert "120 / 100" in html and "$0.0011 / $0.5000" in html  # used / limit
    assert "20 tokens in, 20 out, $0.0004, 2 call(s)" in html  # this run's share
    assert 'href="../../console/runs/root-1"' in html  # whose budget it is
    assert "worth it &lt;script&gt;" in html and "$0.2500" in html  # the extension, escaped
    assert 'action="../../console/runs/run-1/budget"' in html
    for name in ('name="add_tokens"', 'name="add_cost_usd"', 'name="reason"'):
        assert name in html
    assert "Cancel run" in html and "Terminate run" in html
    stopping = header.replace(cancel_requested={"mode": "cancel", "by": "x", "at_ms": T0})
    assert "Extend budget" not in render_timeline_page(
        RunSnapshot(stopping, [], []), [], root="../../", flow=flow
    )


def test_a_run_flow_control_says_nothing_about_shows_no_card() -> None:
    assert flow_card({"priority": 3}, "run-1", "./") == ""
    assert flow_card(None, "run-1", "./") == ""
    assert "<dt>Priority</dt><dd>5 " in flow_card({"priority": 5}, "run-1", "./")
    no_limit = _budget(limit={"tokens": None, "cost_usd": None}, extensions=[])
    card = flow_card({"priority": 3, "budget": no_limit}, "root-1", "./")
    assert "120 / no limit" in card and "no limit" in card and "Extensions" not in card
    assert "Budget of" not in card  # its own budget


def test_the_flow_overview_lists_queues_per_key_and_rate_limits_escaped() -> None:
    overview = {
        "agents": [
            {"agent": "researcher", "limit": 3, "per_key": 1, "key": "input.user_id",
             "running": 3, "queued": 4, "oldest_wait_ms": 61_000,
             "keys": [{"key": HOSTILE, "running": 1, "queued": 4, "oldest_wait_ms": 61_000}]},
        ],
        "rate_limits": [
            {"limiter": "model#claude", "requests": 50, "tokens": 40_000, "per_seconds": 60.0,
             "used_requests": 12, "used_tokens": 9_000, "waits_today": 7},
        ],
    }  # fmt: skip
    html = render_flow_overview(overview)
    _no_raw(html)
    assert 'data-agent="researcher"' in html and "3 at once, 1 per input.user_id" in html
    assert "1 min 1 s" in html and "&lt;script&gt;" in html
    assert "12 / 50" in html and "9000 / 40000" in html and ">7</td>" in html
    empty = render_flow_overview({"agents": [], "rate_limits": []})
    assert "No agent declares a concurrency limit" in empty and "No rate limit" in empty
    assert "could not be read" in render_flow_overview({"unavailable": True})


# ----------------------------------------------------------------------------- over the Api
def budget_registry() -> AgentRegistry:
    registry = AgentRegistry()

    @agent(name="spender", version="1", registry=registry, budget=Budget(tokens=30))
    def spender(ctx: DurableContext, topic: str) -> str:
        for turn in range(3):
            ctx.llm(f"think-{turn}", LlmRequest(messages=[Message.user(topic)]), config=CONFIG)
        return topic

    @agent(name="limited", version="1", registry=registry, concurrency=Concurrency(limit=1))
    def limited(ctx: DurableContext, value: int) -> int:
        return value

    return registry


@pytest.fixture
def flow_rt(api: Deployment, monkeypatch: pytest.MonkeyPatch) -> Runtime:  # noqa: F811
    """The Api's runtime (moto) with a budgeted agent, a counting model and a skip clock."""
    from api.services import get_runtime

    runtime = get_runtime()
    monkeypatch.setattr(runtime, "registry", budget_registry())
    monkeypatch.setattr(runtime, "clock", SkipClock())
    monkeypatch.setattr(runtime, "providers", {"counting": CountingProvider()})
    return runtime


def _over_budget(rt: Runtime, api: Deployment) -> str:  # noqa: F811
    run, _ = rt.start_run("spender", "costs")
    assert drive(rt, run.run_id) is RunStatus.BUDGET_EXCEEDED
    api.published()
    return run.run_id


def test_extend_budget_from_the_console_and_the_run_goes_on(
    flow_rt: Runtime,
    api: Deployment,  # noqa: F811
) -> None:
    run_id = _over_budget(flow_rt, api)
    html = page(f"/console/runs/{run_id}").html
    assert "pill s-budget_exceeded" in html and "Extend budget" in html
    assert "40 / 30" in html  # two calls of 20 tokens spent a budget of 30
    reply = form(
        f"/console/runs/{run_id}/budget",
        {"add_tokens": "100", "add_cost_usd": "", "reason": "  worth <it>  "},
    )
    assert reply.status == 303, reply.text
    assert reply.headers["Location"] == f"../../../console/runs/{run_id}?done=budget-extended"
    state = Budgets(flow_rt.store.flow_items()).state(run_id)
    assert state is not None and state.limit_tokens == 130 and not state.exceeded
    (extension,) = state.extensions
    assert extension["reason"] == "worth <it>" and extension["add_tokens"] == 100
    assert extension["by"].endswith("durable-agents-operator/alice")
    assert [e["detail-type"] for e in api.published()] == ["Step Ready"]  # the run woken
    assert drive(flow_rt, run_id) is RunStatus.SUCCEEDED
    html = page(f"/console/runs/{run_id}", query={"done": "budget-extended"}).html
    assert "Budget extended" in html and "worth &lt;it&gt;" in html
    assert "Extend budget" not in html  # finished


@pytest.mark.parametrize(
    "fields",
    [
        {"add_tokens": "-5", "reason": "r"},
        {"add_tokens": "many", "reason": "r"},
        {"add_cost_usd": "-0.1", "reason": "r"},
        {"add_tokens": "5", "reason": "   "},
        {"add_tokens": "5"},
        {"add_tokens": "5", "reason": "r", "by": "someone-else"},
        {"add_tokens": "5", "reason": "x" * 501},
        {"add_cost_usd": "inf", "reason": "r"},
    ],
)
def test_a_bad_budget_form_is_refused_and_extends_nothing(
    flow_rt: Runtime,
    api: Deployment,  # noqa: F811
    fields: dict[str, str],
) -> None:
    run_id = _over_budget(flow_rt, api)
    reply = form(f"/console/runs/{run_id}/budget", fields)
    assert reply.status == 422, reply.text
    state = Budgets(flow_rt.store.flow_items()).state(run_id)
    assert state is not None and state.extensions == [] and state.exceeded
    assert api.published() == []


@pytest.mark.parametrize(
    "headers",
    [{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}, {}],
)
def test_a_budget_form_from_another_site_is_refused_and_changes_nothing(
    flow_rt: Runtime,
    api: Deployment,  # noqa: F811
    headers: dict[str, str],
) -> None:
    run_id = _over_budget(flow_rt, api)
    base = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/html", **headers}
    reply = form(f"/console/runs/{run_id}/budget", {"add_tokens": "999", "reason": "csrf"}, base)
    assert reply.status == 403, reply.text
    state = Budgets(flow_rt.store.flow_items()).state(run_id)
    assert state is not None and state.extensions == [] and state.limit_tokens == 30
    assert api.published() == []
    # JSON is not a console form: refused as such, before anything is read or written.
    as_json = request("POST", f"/console/runs/{run_id}/budget", {"add_tokens": 1, "reason": "r"},
                      headers={"Sec-Fetch-Site": "same-origin"})  # fmt: skip
    assert as_json.status in (400, 415) and api.published() == []


def test_the_budget_route_needs_an_iam_caller_and_the_callers_tenant(
    flow_rt: Runtime,
    api: Deployment,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.unit.test_api_tenancy import TENANT_B, TENANT_MAP

    run_id = _over_budget(flow_rt, api)
    fields = {"add_tokens": "1", "reason": "r"}
    assert form(f"/console/runs/{run_id}/budget", fields, user_arn=None).status == 401
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    other = form(f"/console/runs/{run_id}/budget", fields, user_arn=TENANT_B)
    assert other.status == 404  # the default tenant's run: another tenant's, like none
    state = Budgets(flow_rt.store.flow_items()).state(run_id)
    assert state is not None and state.extensions == []


def test_operators_see_the_flow_overview_on_the_runs_page(
    flow_rt: Runtime,
    api: Deployment,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.unit.test_api_tenancy import TENANT_A, TENANT_MAP

    first, _ = flow_rt.start_run("limited", 1)  # takes the one slot
    second, _ = flow_rt.start_run("limited", 2)  # waits for it
    assert flow_rt.store.get_run(second.run_id).status is RunStatus.QUEUED
    html = page("/console").html  # no tenant map: every caller sees everything
    assert "pill s-queued" in html and '<section class="card flow">' in html
    overview = html[html.index('data-agent="limited"') :]
    assert '<td class="num">1</td><td>1 at once</td><td class="num">1</td>' in overview
    queued = page("/console", query={"status": "queued"}).html
    assert second.run_id in queued and first.run_id not in queued
    run_page = page(f"/console/runs/{second.run_id}").html
    assert "Queued under key" in run_page and "<code>default</code>" in run_page
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    assert "Flow control" in page("/console").html  # the operators' tenant (*)
    assert "Flow control" not in page("/console", user_arn=TENANT_A).html  # a tenant's caller


@pytest.mark.parametrize(
    "error",
    [RuntimeError("flow items unreadable"), InfrastructureError("Query", "Throttling", "slow")],
)
def test_an_unreadable_flow_overview_never_fails_the_runs_page(
    flow_rt: Runtime,
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
) -> None:
    import api.routes.console as console

    def broken(*args: Any) -> Any:
        raise error

    monkeypatch.setattr(console, "flow_overview", broken)
    html = page("/console").html
    assert "could not be read" in html and "<h1>Runs</h1>" in html
