"""What the demo's parts share: printing, polling the Api, the checks' verdict, the ledgers."""

from __future__ import annotations

import sys
import time
import urllib.error
from collections.abc import Callable, Sequence
from typing import Any

from durable_agents_local.processes import WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle

BOLD, PLAIN = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")


def banner(step: str, text: str) -> None:
    print(f"\n{BOLD}[{step}] {text}{PLAIN}", flush=True)


def say(text: str) -> None:
    print(f"      {text}", flush=True)


def worker_line(prefix: str) -> Any:
    def show(line: str) -> None:
        # The demo's own polling (GET requests) would drown the interesting lines.
        if "ApiFunction" in line and " GET " in line:
            return
        print(f"      {prefix} │ {line}", flush=True)

    return show


def history(base_url: str, run_id: str) -> list[dict[str, Any]]:
    status, body = http_json("GET", f"{base_url}/runs/{run_id}/history")
    if status != 200:
        raise RuntimeError(f"GET history answered {status}: {body}")
    return list(body["events"])


def wait_for_running_step(base_url: str, run_id: str, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = history(base_url, run_id)
        started = any(e["event"] == "step_started" and e.get("name") == name for e in events)
        finished = any(e.get("name") == name and e["event"] == "step_succeeded" for e in events)
        if finished:
            raise RuntimeError(f"{name} finished before it could be interrupted")
        if started:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not start within {timeout} s")


def wait_for_status(base_url: str, run_id: str, wanted: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    run: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            status, run = http_json("GET", f"{base_url}/runs/{run_id}")
        except (urllib.error.URLError, ConnectionError):
            status = 0
        if status == 200 and run["status"] == wanted:
            return run
        if status == 200 and run["status"] in ("FAILED", "PAUSED"):
            raise RuntimeError(f"the run ended {run['status']}: {run.get('error')}")
        time.sleep(0.2)
    raise RuntimeError(f"the run is not {wanted} after {timeout} s (last: {run.get('status')})")


def print_checks(checks: Sequence[str], failures: Sequence[str]) -> bool:
    if failures:
        print("\nFAILED checks:")
        for failure in failures:
            print(f"  ✗ {failure}")
        return False
    for check in checks:
        print(f"  ✓ {check}")
    return True


NewWorker = Callable[[str, Sequence[str]], WorkerProcess]


def ledger_line(handle: ServicesHandle) -> str:
    payments = handle.ledger("payments")
    charges = [e for e in payments if e["event"] == "charge.created"]
    refunds = [e for e in payments if e["event"] == "charge.refunded"]
    tickets = [e for e in handle.ledger("tickets") if e["event"] == "ticket.created"]
    emails = [e for e in handle.ledger("email") if e["event"] == "message.sent"]
    return (
        f"payments: {len(charges)} charge(s), {len(refunds)} refund(s); "
        f"tickets: {len(tickets)}; email outbox: {len(emails)}"
    )


def ledger_marks(handle: ServicesHandle) -> list[dict[str, Any]]:
    """The providers' ledger entries as timeline events."""
    marks = []
    for service in ("payments", "tickets", "email"):
        for entry in handle.ledger(service):
            data = entry["data"]
            thing = data.get("charge") or data.get("ticket") or data.get("message") or data
            ident = next(
                (thing[k] for k in ("charge_id", "ticket_id", "message_id") if k in thing), ""
            )
            marks.append(
                {"event": f"{service}: {entry['event']}", "at": entry["at"], "comment": ident}
            )
    return marks
