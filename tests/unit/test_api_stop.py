"""``POST /runs/{run_id}/cancel`` and ``/terminate`` over the Api (moto).

A run of ``refunder`` waits for an approval; the Api records the stop request and wakes the
run; the runtime (the StepRunner's part, driven here) ends it. Tenancy: another tenant's run
is 404 exactly like none. An approval of a stopped run can no longer be decided (410).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, SkipClock, agent
from durable_agents.core.models import RunStatus, WaitStatus
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import RunCancelledError
from durable_agents.journal.dynamodb import DynamoDBJournal
from tests.contract.test_versions_contract import drive
from tests.unit.approvals_harness import APPROVERS
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api_approvals import OPERATOR, api, request  # noqa: F401 - the fixture
from tests.unit.test_api_tenancy import MISSING_RUN, TENANT_A, TENANT_B, TENANT_MAP

pytestmark = pytest.mark.usefixtures("api")
CALLS: Counter[str] = Counter()


def stop_registry() -> AgentRegistry:
    registry = AgentRegistry()

    @agent(name="refunder", version="1", registry=registry)
    def refunder(ctx: DurableContext, _: Any) -> str:
        try:
            ctx.wait_for_approval(
                "approve", request={"cents": 5}, approvers=APPROVERS, timeout=7 * 86400
            )
        except RunCancelledError:
            ctx.step(lambda: CALLS.update(["cleanup"]), name="cleanup")
            raise
        return "approved"

    return registry


@pytest.fixture
def rt(api: Deployment, monkeypatch: pytest.MonkeyPatch) -> Runtime:  # noqa: F811
    """The Api's runtime (moto journal and bus), with the refunder and a skip clock."""
    from api.services import get_runtime

    CALLS.clear()
    runtime = get_runtime()
    monkeypatch.setattr(runtime, "registry", stop_registry())
    monkeypatch.setattr(runtime, "clock", SkipClock())
    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    return runtime


def suspended(rt: Runtime, api: Deployment, tenant: str = "a", **start: Any) -> str:  # noqa: F811
    run, _ = rt.start_run("refunder", None, tenant=tenant, **start)
    assert drive(rt, run.run_id) is RunStatus.SUSPENDED
    api.published()
    return run.run_id


def _journal() -> DynamoDBJournal:
    return DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)


def stop(run_id: str, action: str, body: Any = None, caller: str = TENANT_A, **kw: Any) -> Any:
    return request("POST", f"/runs/{run_id}/{action}", body, user_arn=caller, **kw)


def test_a_cancel_is_recorded_and_the_run_woken(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = suspended(rt, api)
    (approval,) = rt.store.list_waits("approval", WaitStatus.PENDING)
    reply = stop(run_id, "cancel", {"reason": "customer withdrew"})
    assert reply.status == 202, reply.text
    requested = reply.json["cancel_requested"]
    assert requested["mode"] == "cancel" and requested["reason"] == "customer withdrew"
    assert requested["by"] == TENANT_A and requested["at"]
    assert reply.json["status"] == "SUSPENDED"  # the runtime decides, on its next read
    ready = [e for e in api.published() if e["detail-type"] == "Step Ready"]
    assert [e["detail"]["run_id"] for e in ready] == [run_id]
    # Asked again (its answer lost, say): the same request, woken again.
    assert stop(run_id, "cancel", {"reason": "again"}).json["cancel_requested"] == requested
    assert drive(rt, run_id) is RunStatus.CANCELLED
    assert CALLS["cleanup"] == 1
    finished = request("GET", f"/runs/{run_id}", user_arn=TENANT_A).json
    assert finished["status"] == "CANCELLED" and finished["error"]["type"] == "RunCancelledError"
    # The approval was closed with the run: deciding it now is refused, 410 with the reason.
    late = request(
        "POST", f"/approvals/{approval.wait_id}", {"decision": "approve"}, user_arn=OPERATOR
    )
    assert late.status == 410, late.text
    assert "closed" in late.json["error"]["message"]
    # A finished run cannot be stopped again.
    assert stop(run_id, "cancel").status == 409
    assert stop(run_id, "terminate").status == 409


def test_terminate_runs_no_agent_code(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = suspended(rt, api)
    reply = stop(run_id, "terminate")  # the body is optional
    assert reply.status == 202, reply.text
    assert reply.json["cancel_requested"]["mode"] == "terminate"
    assert drive(rt, run_id) is RunStatus.TERMINATED
    assert CALLS["cleanup"] == 0
    events = {e["detail-type"] for e in api.published()}
    assert {"Run Cancelled", "Run Finished"} <= events


def test_a_paused_run_is_409_for_cancel(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    from durable_agents.core.models import RunChange

    run_id = suspended(rt, api)
    rt.store.commit(
        run_id,
        [],
        RunChange(expected=frozenset({RunStatus.SUSPENDED}), status=RunStatus.PAUSED,
                  updated_at_ms=rt.clock.now_ms()),
    )  # fmt: skip
    refused = stop(run_id, "cancel")
    assert refused.status == 409, refused.text
    assert refused.json["error"]["type"] == "RunNotCancellableError"
    assert stop(run_id, "terminate").status == 202


def test_unknown_and_other_tenants_runs_are_404_alike(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    run_id = suspended(rt, api)
    before = _journal().load(run_id)
    for action in ("cancel", "terminate"):
        theirs = stop(run_id, action, caller=TENANT_B)
        missing = stop(MISSING_RUN, action, caller=TENANT_B)
        assert theirs.status == missing.status == 404, theirs.text
        assert theirs.text.replace(run_id, "ID") == missing.text.replace(MISSING_RUN, "ID")
    assert _journal().load(run_id) == before
    assert api.published() == []
    # The operators' tenant (*) may stop any tenant's run.
    assert stop(run_id, "cancel", caller=OPERATOR).status == 202


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"reason": 1}, 422),
        ({"reason": "x" * 1001}, 422),
        ({"extra": 1}, 422),
        ([], 422),
    ],
    ids=["number", "long", "extra", "list"],
)
def test_a_bad_body_is_refused_before_anything_is_written(
    rt: Runtime,
    api: Deployment,  # noqa: F811
    body: Any,
    status: int,
) -> None:
    run_id = suspended(rt, api)
    before = _journal().load(run_id)
    reply = stop(run_id, "cancel", body)
    assert reply.status == status, reply.text
    assert _journal().load(run_id) == before
    assert stop("bad id!", "cancel").status == 400
    assert stop(run_id, "cancel", raw_body="{not json").status == 400


def test_a_run_started_with_its_own_time_limit(rt: Runtime, api: Deployment) -> None:  # noqa: F811
    reply = request(
        "POST", "/runs", {"agent": "refunder", "execution_timeout": 60}, user_arn=TENANT_A
    )
    assert reply.status == 201, reply.text
    assert reply.json["run"]["execution_timeout_ms"] == 60_000
    assert reply.json["run"]["execution_deadline"] is not None
    bad = request("POST", "/runs", {"agent": "refunder", "execution_timeout": 0}, user_arn=TENANT_A)
    assert bad.status == 422
    run_id = reply.json["run"]["run_id"]
    assert drive(rt, run_id) is RunStatus.SUSPENDED
    rt.clock.advance(60_000)  # type: ignore[attr-defined]
    assert drive(rt, run_id) is RunStatus.TIMED_OUT
