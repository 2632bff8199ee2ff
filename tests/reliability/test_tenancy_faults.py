"""Another tenant's requests, interleaved with a faulty schedule, never succeed nor change state.

The reference run belongs to tenant ``a``. On every tick, before the run's own people act, a
caller of tenant ``b`` sends the Api (the real handler, over the simulator's faulty journal)
every request that names the run or what it waits on: the run, its history, a redrive, a
migration, each pending approval (shown and decided over IAM, and by a person with a JWT who
*is* one of its approvers but of tenant ``b``), each call in review, a budget extension, and
the listings. Every answer must be 404 (or 503 when an injected fault struck the request),
every listing empty of the run, the operators' flow overview 403, and the journal unchanged by
the requests; the schedule must then keep every invariant.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.routes.tenant_listing import ListingQuery
from durable_agents.auth.jwt import JwtVerifier
from durable_agents.core.models import WaitStatus
from durable_agents.engine.events import EventPublishError
from durable_agents.errors import InfrastructureError
from tests.reliability import tally
from tests.reliability.faults import FaultPlan
from tests.reliability.invariants import check, explain
from tests.reliability.sim import ORDER, RUN_ID, Simulator
from tests.unit.test_api_approvals import KEYS, request
from tests.unit.test_auth import AUDIENCE, ISSUER, claims

pytestmark = pytest.mark.reliability

ROLE = "arn:aws:sts::123456789012:assumed-role"
INTRUDER = f"{ROLE}/tenant-b/app"
TENANT_MAP = {f"{ROLE}/tenant-a/*": "a", f"{ROLE}/tenant-b/*": "b"}
SURVIVED = ("stale_index", "concurrent", "dup2", "reorder", "delay")


class IntrudedSimulator(Simulator):
    """The simulator, with tenant ``b`` probing tenant ``a``'s run through the Api."""

    def __init__(self, plan: FaultPlan):
        super().__init__(plan)
        self.breaches: list[str] = []
        self.requests = 0
        self.stolen_cursors = 0

    def _start(self) -> None:
        for _ in range(self.plan.max_faults + 10):
            try:
                self.runtime.start_run(
                    "reference", {"order": ORDER}, run_id=RUN_ID, idempotency_key="k-1", tenant="a"
                )
                return
            except (InfrastructureError, EventPublishError):
                self.clock.advance(1_000)
        raise AssertionError("the run could not be started after the faults stopped")

    def _people(self) -> None:
        self._intrude()
        super()._people()

    def _state(self) -> Any:
        snapshot = self.inner.load(RUN_ID)
        waits = [(w.wait_id, w.status, w.updated_at_ms) for k in ("approval", "callback")
                 for s in WaitStatus for w in self.inner.list_waits(k, s)]  # fmt: skip
        effects = [(e.operation_id, e.status, e.updated_at_ms) for e in snapshot.effects]
        return snapshot.header, len(snapshot.entries), sorted(waits), effects

    def _expect(self, what: str, reply: Any, allowed: set[int]) -> None:
        self.requests += 1
        if reply.status not in allowed:
            self.breaches.append(f"{what}: {reply.status} {reply.text[:200]}")

    def _intrude(self) -> None:
        before = self._state()
        person = {"Authorization": f"Bearer {KEYS.sign(self._person())}"}
        named = [("GET", f"/runs/{RUN_ID}", None), ("GET", f"/runs/{RUN_ID}/history", None),
                 ("POST", f"/runs/{RUN_ID}/redrive", None),
                 ("POST", f"/runs/{RUN_ID}/migrate", {"to_version": "2"}),
                 ("POST", f"/runs/{RUN_ID}/rerun", {"from": "start"}),
                 ("POST", f"/runs/{RUN_ID}/rerun", {"from": "start", "dry_run": True}),
                 ("POST", f"/runs/{RUN_ID}/budget", {"add_tokens": 9, "reason": "b"})]  # fmt: skip
        for record in self.inner.list_waits("approval", WaitStatus.PENDING):
            approval = f"/approvals/{record.wait_id}"
            named += [("GET", approval, None), ("POST", approval, {"decision": "approve"})]
            for method, body in (("GET", None), ("POST", {"decision": "reject"})):
                path = f"/people/approvals/{record.wait_id}"
                reply = request(method, path, body, headers=person, user_arn=None)
                self._expect(f"{method} {path} (JWT)", reply, {404, 503})
        for effect in self.inner.effects_in_review():
            named.append(("POST", f"/reviews/{effect.operation_id}", {"decision": "retry"}))
        for method, path, body in named:
            self._expect(f"{method} {path}", request(method, path, body, user_arn=INTRUDER),
                         {404, 503})  # fmt: skip
        for path, key in (("/runs", "runs"), ("/approvals", "approvals"), ("/reviews", "reviews")):
            reply = request("GET", path, user_arn=INTRUDER)
            self._expect(f"GET {path}", reply, {200, 503})
            if reply.status == 200 and reply.json[key]:
                self.breaches.append(f"GET {path} lists tenant a's: {reply.text[:200]}")
        for path, key in (("/approvals", "approvals"), ("/reviews", "reviews")):
            self._page_through(path, key)
        # Every agent's queues are the operators' (*) alone: a tenant's caller is refused.
        self._expect("GET /flow", request("GET", "/flow", user_arn=INTRUDER), {403})
        # A bulk rerun by the intruder matches none of tenant a's runs, finished or not.
        for status in ("FAILED", "SUCCEEDED", "CANCELLED", "TERMINATED", "TIMED_OUT"):
            body = {"agent": "reference", "status": status, "from": "start", "limit": 25}
            reply = request("POST", "/runs/rerun", body, user_arn=INTRUDER)
            self._expect(f"POST /runs/rerun {status}", reply, {200, 503})
            if reply.status == 200 and reply.json["results"]:
                self.breaches.append(f"POST /runs/rerun re-ran tenant a's: {reply.text[:200]}")
        if self._state() != before:
            self.breaches.append("tenant b's requests changed tenant a's run")

    def _page_through(self, path: str, key: str) -> None:
        """Tenant b follows every cursor, one record a page, and replays tenant a's cursor."""
        cursor: str | None = None
        for _ in range(20):
            query = {"limit": "1", **({"cursor": cursor} if cursor else {})}
            reply = request("GET", path, user_arn=INTRUDER, query=query)
            self._expect(f"GET {path} (paged)", reply, {200, 503})
            if reply.status != 200:
                return
            if reply.json[key]:
                self.breaches.append(f"GET {path} pages tenant a's: {reply.text[:200]}")
            cursor = reply.json["cursor"]
            if cursor is None:
                break
        # A cursor tenant a's listing hands out (bound to tenant a, at a real position) is
        # refused to tenant b.
        index = (
            self.inner.waits_page("approval", WaitStatus.PENDING, limit=1)
            if key == "approvals"
            else self.inner.reviews_page(limit=1)
        )
        if index.positions:
            filters = {"status": "pending"} if key == "approvals" else {}
            stolen = ListingQuery(key, "a", filters).seal(index.positions[0])
            reply = request("GET", path, user_arn=INTRUDER, query={"cursor": stolen})
            self._expect(f"GET {path} with tenant a's cursor", reply, {400})
            self.stolen_cursors += 1

    def _person(self) -> dict[str, Any]:
        # The run's approver (user:alice), signed in, but of tenant b.
        return claims(self.clock, email="alice", tenant="b")


@pytest.fixture
def api_over_the_simulator(monkeypatch: pytest.MonkeyPatch) -> Any:
    from api import services as api_services
    from api.routes import approvals

    monkeypatch.setenv("TENANT_MAP", json.dumps(TENANT_MAP))
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")

    def bind(sim: Simulator) -> None:
        monkeypatch.setattr(api_services, "_runtime", sim.runtime)
        verifier = JwtVerifier(ISSUER, AUDIENCE, jwks={"keys": [KEYS.jwk]}, clock=sim.clock)
        monkeypatch.setattr(approvals, "_jwt_verifier", verifier)

    return bind


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_cross_tenant_requests_never_succeed(api_over_the_simulator: Any, seed: int) -> None:
    rates = {} if seed == 0 else dict.fromkeys(SURVIVED, 0.2)
    plan = FaultPlan(seed=seed, rates=rates, max_faults=8)
    sim = IntrudedSimulator(plan)
    api_over_the_simulator(sim)
    result = sim.run()
    tally.schedules["tenancy"] += 1
    tally.injected.update(result.faults)
    problems = check(result)
    if problems or sim.breaches:
        tally.violations["tenancy"] += 1
    assert not sim.breaches, sim.breaches[:5]
    assert not problems, explain(result, problems)
    assert sim.requests > 10, "tenant b never probed the run: the case tests nothing"
    assert sim.stolen_cursors > 0, "tenant b never replayed tenant a's cursor"
    assert result.status == "SUCCEEDED"
