"""Local mode crash recovery: SIGKILL to a worker process, then a restart.

The crash tests kill the worker with SIGKILL in the middle of a step (or let it kill itself with
``--crash-at`` between a provider's charge and the COMMIT) and check from the journal and the
providers' ledgers that nothing recorded ran again and nothing was charged twice.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from durable_agents.core.clock import SystemClock
from durable_agents_local.cli.main import main as cli_main
from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.processes import WorkerProcess
from durable_agents_local.runs import RunsClient
from durable_agents_local.services import ServicesHandle
from durable_agents_local.verify import (
    crash_recovery_failures,
    prepared_at_crash_failures,
    recovered_by,
    sandwich_failures,
    step_starts,
)
from tests.integration.local_workers import (
    history,
    start_run,
    start_worker,
    wait_for_status,
    wait_for_step_running,
)

pytestmark = pytest.mark.slow


# -- crash recovery ----------------------------------------------------------------------------


def test_sigkill_mid_step_then_restart_runs_each_recorded_step_once() -> None:
    moto = MotoProcess(free_port())
    workers: list[WorkerProcess] = []
    try:
        moto.start()
        workers.append(start_worker(moto))
        first = workers[0]
        run_id = start_run(first, {"topic": "crash", "sections": 3, "pause_seconds": 0})
        wait_for_step_running(first, run_id, "fetch-2", 30)
        first.kill()
        killed_at_ms = SystemClock().now_ms()

        workers.append(start_worker(moto))
        second = workers[1]
        wait_for_status(second, run_id, "SUCCEEDED", timeout=45)
        events = history(second, run_id)
        assert (
            crash_recovery_failures(events, killed_step="fetch-2", killed_at_ms=killed_at_ms) == []
        )
        assert step_starts(events) == {
            "plan": 1,
            "fetch-1": 1,
            "fetch-2": 2,
            "fetch-3": 1,
            "summarize": 1,
        }
        assert second.stop() == 0  # SIGTERM: a clean stop
    except BaseException:
        for index, process in enumerate(workers, start=1):
            print(f"--- worker {index} log ---", *process.lines, sep="\n")
        raise
    finally:
        for process in workers:
            process.stop()
        moto.stop()


def test_crash_at_after_the_charge_then_restart_charges_exactly_once(tmp_path: Path) -> None:
    moto = MotoProcess(free_port())
    services = ServicesHandle.start_in_thread(state_file=tmp_path / "ledgers.json")
    workers: list[WorkerProcess] = []
    env = services.env()  # PAYMENTS_URL, ...: the worker passes them on to the handlers
    try:
        moto.start()
        workers.append(start_worker(moto, ["--crash-at", "charge-card:after_execute"], env))
        doomed = workers[0]
        run_id = start_run(
            doomed,
            {
                "order_id": "T-1",
                "customer": "cus_test",
                "email": "test@example.com",
                "items": {"tea": 2, "scone": 1},
            },
            agent="example-checkout",
        )

        # The hook kills the worker after the provider charged, before the COMMIT.
        assert doomed.wait(30) == -signal.SIGKILL
        assert any("--crash-at charge-card:after_execute: SIGKILL" in x for x in doomed.lines)
        journal = RunsClient(moto.endpoint, store_key=moto.store_key).store
        at_crash = journal.load(run_id)
        assert prepared_at_crash_failures(at_crash, services.ledger("payments")) == []
        assert services.ledger("tickets") == services.ledger("email") == []

        workers.append(start_worker(moto, env=env))
        second = workers[1]
        wait_for_status(second, run_id, "SUCCEEDED", timeout=45)
        final = journal.load(run_id)
        assert (
            sandwich_failures(
                final,
                payments=services.ledger("payments"),
                tickets=services.ledger("tickets"),
                email=services.ledger("email"),
            )
            == []
        )
        [charge] = [e for e in final.entries if e.name == "charge-card" and e.type.is_result]
        # The tool's stale time (60 s) is far off: the StepRunner recovered it, not the sweep.
        assert recovered_by(second.lines, charge.op_id.removeprefix(f"{run_id}:")) == "StepRunner"
        assert second.stop() == 0
    except BaseException:
        for index, process in enumerate(workers, start=1):
            print(f"--- worker {index} log ---", *process.lines, sep="\n")
        raise
    finally:
        for process in workers:
            process.stop()
        services.stop()
        moto.stop()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("charge-card", "expected OPERATION:POINT (e.g. charge-card:after_execute)"),
        (":after_execute", "expected OPERATION:POINT"),
        ("charge-card:during", "unknown crash point 'during': use one of before_claim, "),
    ],
)
def test_crash_at_with_a_bad_spec_is_a_usage_error(
    spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["local", "--crash-at", spec])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "durable-agents local: error: argument --crash-at:" in err
    assert message in err


# -- the pieces, without processes -------------------------------------------------------------
