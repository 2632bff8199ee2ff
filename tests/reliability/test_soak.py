"""The local-mode SIGKILL soak: runs pay through the fake payments service while the worker
keeps dying.

One moto server (the journal) and one fake-services process (the payment provider's ledger)
live for the whole soak; ``durable-agents local`` workers come and go. Each of ``RUNS``
cycles starts a worker, starts one ``soak-checkout`` run over HTTP (price → pack → pay →
ship), waits a seeded random moment and SIGKILLs the worker's whole process group. In one
cycle, chosen by the seed, the run's payment is aimed at three times in a row with
``--crash-at pay-<order>:POINT`` (the worker kills itself once per process): before the
provider is called, again before it is called on recovery, then after it charged and before
the COMMIT. A last worker lets every run finish.

Then: every run SUCCEEDED, the provider's ledger holds exactly one charge per order (by
idempotency key and by order) and nothing refunded, each run's result names its ledger
charge, and the kills meet the thresholds (``RANDOM_KILLS`` at seeded moments, three inside
one operation). Heavy: only ``make reliability`` runs it (``RELIABILITY_FULL=1``).

``SOAK_SEED=<n>`` replays another schedule.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.processes import http_json
from durable_agents_local.runs import RunsClient
from durable_agents_local.services import ServicesHandle
from durable_agents_local.verify import is_result, step_starts
from tests.integration.local_stack import moto, services, services_process, wait_until
from tests.reliability import soak_stack
from tests.reliability.soak_agent import AGENT, SoakOrder, pay_operation
from tests.reliability.soak_stack import GroupWorker, crash_lines, soak_template

__all__ = ["moto", "services", "services_process"]  # the fixtures this module uses

pytestmark = [
    pytest.mark.slow,
    pytest.mark.reliability,
    pytest.mark.reliability_full,
    pytest.mark.timeout(600),
]

SEED = int(os.environ.get("SOAK_SEED", "20261201"))
RUNS = 30
RANDOM_KILLS = RUNS  # one per cycle
# The three self-kills inside one payment operation, in order (see the module docstring).
SAME_OPERATION_POINTS = ("before_execute", "before_execute", "after_execute")
# A 1 s StepRunner timeout gives a 6 s claim lease; the reconciler re-drives a stalled run
# after 1 s (it sweeps every second in local mode): a killed operation is retried ~6 s after
# its claim, so the soak stays within a few minutes.
WORKER_ARGS = ["--function-timeout", "StepRunnerFunction=1", "--stall-after", "1"]
SELF_KILL_TIMEOUT = 60.0
FINISH_TIMEOUT = 120.0
FINAL = ("SUCCEEDED", "FAILED", "PAUSED", "CANCELLED")


def make_order(index: int, rng: random.Random) -> SoakOrder:
    items = {name: rng.randint(1, 3) for name in rng.sample(["tea", "jam", "scone"], 2)}
    return SoakOrder(
        order_id=f"soak-{SEED}-{index:02d}",
        customer=f"cus_{index:02d}",
        items=items,
        work_seconds=round(rng.uniform(0.1, 0.8), 2),
    )


class Soak:
    """The workers of one soak (each on a fresh Api port) and what happened to them."""

    def __init__(self, moto: MotoProcess, services: ServicesHandle, template: Path):
        self._moto = moto
        self._services = services
        self._template = template
        self.workers: list[GroupWorker] = []
        self.random_kills = 0
        self.self_kills: list[tuple[str, str, str]] = []

    @property
    def current(self) -> GroupWorker:
        return self.workers[-1]

    def start_worker(self, *extra: str) -> GroupWorker:
        # A fresh Api port each time: the killed worker's port is held by TIME_WAIT sockets,
        # and ``durable-agents local`` refuses a port it cannot bind without SO_REUSEADDR.
        # The journal (moto) and the ledgers (services) keep their ports and live on.
        worker = GroupWorker(
            api_port=free_port(),
            moto_endpoint=self._moto.endpoint,
            store_key=self._moto.store_key,
            args=[
                "--template",
                str(self._template),
                "--services-url",
                self._services.url,
                "--log-level",
                "ERROR",
                *WORKER_ARGS,
                *extra,
            ],
            cwd=soak_stack.ROOT,
        )
        self.workers.append(worker)
        worker.start()
        return worker

    def start_run(self, order: SoakOrder) -> str:
        status, body = http_json(
            "POST",
            f"{self.current.base_url}/runs",
            {"agent": AGENT, "input": order.model_dump(), "idempotency_key": order.order_id},
        )
        assert status == 201, body
        return str(body["run"]["run_id"])

    def kill(self) -> None:
        """SIGKILLs the current worker's process group (a kill at a random moment)."""
        code = self.current.kill_group()
        assert code == -9, f"the worker had already exited with {code}"
        self.random_kills += 1

    def crash_at(self, spec: str, order: SoakOrder | None = None) -> str | None:
        """Starts a worker with ``--crash-at spec`` (and the run of ``order`` on it, if
        given) and waits until it has killed itself.

        Returns:
            The id of the run it started (None without an order).
        """
        worker = self.start_worker("--crash-at", spec)
        run_id = None if order is None else self.start_run(order)
        try:
            code = worker.wait(SELF_KILL_TIMEOUT)
        except RuntimeError as exc:
            worker.kill_group()
            raise AssertionError(
                f"--crash-at {spec} did not fire within {SELF_KILL_TIMEOUT} s"
            ) from exc
        assert code == -9, f"the --crash-at {spec} worker exited with {code}"
        [fired] = crash_lines(worker.lines)
        self.self_kills.append(fired)
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        status, run = http_json("GET", f"{self.current.base_url}/runs/{run_id}")
        assert status == 200, run
        return dict(run)

    def history(self, run_id: str) -> list[dict[str, Any]]:
        status, body = http_json("GET", f"{self.current.base_url}/runs/{run_id}/history")
        assert status == 200, body
        return list(body["events"])

    def logs(self) -> Iterator[str]:
        for index, worker in enumerate(self.workers, start=1):
            if worker.lines:
                yield f"--- worker {index} (exit {worker.returncode}) ---"
                yield from worker.lines


def finished(soak: Soak, run_ids: list[str]) -> Callable[[], dict[str, dict[str, Any]] | None]:
    def check() -> dict[str, dict[str, Any]] | None:
        runs = {run_id: soak.run(run_id) for run_id in run_ids}
        broken = {r: v for r, v in runs.items() if v["status"] in ("FAILED", "PAUSED")}
        assert not broken, f"runs that will not succeed: {broken}"
        return runs if all(v["status"] in FINAL for v in runs.values()) else None

    return check


def test_soak_every_run_succeeds_and_pays_once_while_the_worker_is_killed(
    moto: MotoProcess, services: ServicesHandle, tmp_path: Path
) -> None:
    began = time.monotonic()
    rng = random.Random(SEED)
    orders = [make_order(index, rng) for index in range(RUNS)]
    # The run whose payment takes the three kills in a row: in the middle, so that runs
    # started before and after it are in flight around those kills too.
    target = orders[rng.randrange(RUNS // 3, 2 * RUNS // 3)]
    target_op = pay_operation(target.order_id)
    soak = Soak(moto, services, soak_template(tmp_path))
    run_ids: dict[str, str] = {}
    try:
        for order in orders:
            if order is target:
                # The first --crash-at worker starts the run; the next ones recover it.
                first, *again = SAME_OPERATION_POINTS
                run_ids[order.order_id] = str(soak.crash_at(f"{target_op}:{first}", order))
                for point in again:
                    soak.crash_at(f"{target_op}:{point}")
            soak.start_worker()
            if order.order_id not in run_ids:
                run_ids[order.order_id] = soak.start_run(order)
            time.sleep(rng.uniform(0.2, 3.0))
            soak.kill()
        soak.start_worker()
        runs = wait_until(finished(soak, list(run_ids.values())), FINISH_TIMEOUT, "every run")
        journal = RunsClient(moto.endpoint, store_key=moto.store_key).store
        snapshots = {run_id: journal.load(run_id) for run_id in run_ids.values()}
        histories = {run_id: soak.history(run_id) for run_id in run_ids.values()}
        ledger = services.ledger("payments")
    except BaseException:
        print(*soak.logs(), sep="\n")
        raise
    finally:
        for worker in soak.workers:
            worker.stop()
    seconds = time.monotonic() - began

    assert {r: v["status"] for r, v in runs.items()} == dict.fromkeys(runs, "SUCCEEDED")
    # One result per operation, and how many attempts the kills interrupted: a step started
    # again, or a payment claimed again, after a worker died holding it.
    interrupted = 0
    for order in orders:
        run_id = run_ids[order.order_id]
        events = histories[run_id]
        names = [e["name"] for e in events if is_result(e)]
        assert names == ["price", "pack", pay_operation(order.order_id), "ship"], events
        interrupted += sum(n - 1 for n in step_starts(events).values())
        interrupted += sum(e.attempt - 1 for e in snapshots[run_id].effects)

    # The provider's own ledger: one charge per order, none refunded, each the run's result.
    created = [e["data"]["charge"] for e in ledger if e["event"] == "charge.created"]
    refunded = [e for e in ledger if e["event"] == "charge.refunded"]
    assert refunded == []
    per_order = Counter(c["description"] for c in created)
    assert per_order == Counter(f"order {o.order_id}" for o in orders), per_order
    assert len({c["idempotency_key"] for c in created}) == len(created) == RUNS
    charge_of = {c["description"].removeprefix("order "): c["charge_id"] for c in created}
    for order in orders:
        result = runs[run_ids[order.order_id]]["result"]
        assert result["charge_id"] == charge_of[order.order_id], (order, result)

    # The kills: the random ones, and three in a row inside the target's payment operation.
    op_id = soak.self_kills[0][2]
    assert op_id.startswith(f"{run_ids[target.order_id]}:{target_op}:"), op_id
    assert soak.self_kills == [
        (f"{target_op}:{point}", point, op_id) for point in SAME_OPERATION_POINTS
    ]
    [effect] = [e for e in snapshots[run_ids[target.order_id]].effects if e.operation_id == op_id]
    # Claimed once by each worker that died inside it, once more by the one that settled it
    # (random kills may have added more claims).
    assert effect.attempt >= len(SAME_OPERATION_POINTS) + 1, effect
    kills = soak.random_kills + len(soak.self_kills)
    assert soak.random_kills >= 30
    assert kills >= 30

    line = (
        f"soak (seed {SEED}): {len(runs)} runs SUCCEEDED; {kills} SIGKILLs "
        f"({soak.random_kills} at seeded moments, {len(soak.self_kills)} inside one operation, "
        f"{op_id}, attempt {effect.attempt}); {interrupted} interrupted attempts in all; "
        f"{len(created)} payments in the ledger, "
        f"1 per run; {len(soak.workers)} workers; {seconds:.0f} s"
    )
    soak_stack.SUMMARY.append(line)
    print(line)
