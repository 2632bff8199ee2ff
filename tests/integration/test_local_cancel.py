"""Cancel and terminate in local mode over real HTTP, through the CLI as a person would.

Two support runs wait for their refund approval; ``durable-agents runs cancel`` stops one and
``runs terminate`` the other, through the Api local mode serves; local mode's worker ends them
(CANCELLED, TERMINATED) and their approvals are closed.
"""

from __future__ import annotations

import pytest

from durable_agents_local.cli.main import main
from durable_agents_local.moto_server import MotoProcess
from durable_agents_local.processes import http_json
from durable_agents_local.services import ServicesHandle
from tests.integration.local_stack import wait_until, workers
from tests.integration.test_local_approvals import suspended_on_approval

pytestmark = pytest.mark.slow


def test_runs_cancel_and_terminate_stop_waiting_runs(
    moto: MotoProcess, services: ServicesHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    with workers(moto, services) as start_worker:
        worker = start_worker()
        for action, status in (("cancel", "CANCELLED"), ("terminate", "TERMINATED")):
            run_id, approval_id = suspended_on_approval(worker)
            code = main(
                ["runs", action, run_id, "--reason", "customer withdrew", "--api", worker.base_url]
            )
            assert code == 0, capsys.readouterr().err
            assert f"{action} requested" in capsys.readouterr().out

            def ended(run_id: str = run_id, status: str = status) -> dict[str, object] | None:
                code, run = http_json("GET", f"{worker.base_url}/runs/{run_id}")
                assert code == 200, run
                return dict(run) if run["status"] == status else None

            run = wait_until(ended, 30, f"run {run_id} to be {status}")
            assert run["cancel_requested"]["reason"] == "customer withdrew"  # type: ignore[index]
            code, approval = http_json("GET", f"{worker.base_url}/approvals/{approval_id}")
            assert code == 200, approval
            assert approval["status"] == "expired", approval
            # A finished run cannot be stopped again: the CLI says why and exits 1.
            assert main(["runs", "cancel", run_id, "--api", worker.base_url]) == 1
            assert "answered 409" in capsys.readouterr().err
