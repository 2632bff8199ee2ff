"""Part 4 of the demo: SIGKILL to the whole local stack, restart, nothing lost, nothing twice.

``durable-agents local`` keeps its journal in the embedded store of a state directory (a
temporary one here; by default ``.durable-agents/``), in its own process. A checkout run
charges a card and finishes; a support run waits for a person to approve a refund, and a
signed link is minted for her. Then local mode and the fake providers all get SIGKILL — a
laptop losing power. ``durable-agents local`` is started again at once, on the same state
directory and the same ports: the waiting run is still there, the link minted before the
crash still approves it, the refund is paid once, and re-posting the checkout with its
Idempotency-Key returns the same run without charging again.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from durable_agents_local.moto_server import free_port
from durable_agents_local.processes import ServicesProcess, WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--function-timeout", "StepRunnerFunction=2", "--stall-after", "2", "--log-level", "ERROR"]
TIMEOUT = 60.0
KEY = "demo-checkout-A-1001"


def _say(text: str) -> None:
    print(f"      {text}", flush=True)


def _post_run(api: str, agent: str, value: Any, key: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{api}/runs",
        data=json.dumps({"agent": agent, "input": value}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


def _until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {TIMEOUT} s waiting for {what}")


def _status(api: str, run_id: str) -> str:
    status, run = http_json("GET", f"{api}/runs/{run_id}")
    return str(run["status"]) if status == 200 else f"HTTP {status}"


def _pending(api: str, run_id: str) -> str | None:
    _, listed = http_json("GET", f"{api}/approvals?status=pending")
    return next((a["approval_id"] for a in listed["approvals"] if a["run_id"] == run_id), None)


def _payments(url: str) -> Counter[tuple[str, int]]:
    """Each payment in the provider's own ledger: (description, amount) → times made."""
    return Counter(
        (str(e["data"]["charge"]["description"])[:32], int(e["data"]["charge"]["amount_cents"]))
        for e in ServicesHandle(url).ledger("payments")
        if e["event"] == "charge.created"
    )


class _Stack:
    """``durable-agents local`` (its own store) and the fake providers, on fixed ports."""

    def __init__(self, state: Path, on_line: Callable[[str], None]):
        self.state = state
        self.api_port, self.moto_port, self.services_port = free_port(), free_port(), 0
        self.on_line = on_line
        self.worker: WorkerProcess | None = None
        self.services: ServicesProcess | None = None

    def start(self) -> str:
        ledgers = self.state.with_name("restart-ledgers.json")
        self.services = ServicesProcess(ledgers, self.services_port)
        handle = self.services.start()
        self.services_port = urlsplit(handle.url).port or 0
        args = [
            "--moto-port", str(self.moto_port), "--state-dir", str(self.state),
            "--services-url", handle.url, *ARGS,
        ]  # fmt: skip
        self.worker = WorkerProcess(
            api_port=self.api_port, moto_endpoint=None, args=args, cwd=ROOT, on_line=self.on_line
        )
        self.worker.start()
        return handle.url

    def kill(self) -> list[int]:
        assert self.worker is not None and self.services is not None
        pids = [self.worker.pid, self.services.pid]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        self.worker.wait(10)
        self.services.stop()
        return pids

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.services is not None:
            self.services.stop()


def part_four(
    state_dir: Path,
    *,
    banner: Callable[[str, str], None],
    on_line: Callable[[str], None],
    checkout_input: Mapping[str, Any],
    support_input: Mapping[str, Any],
    approver: str,
) -> bool:
    """Runs part 4 and prints its checks; True if they all hold."""
    print("\n" + "─" * 88)
    print("Part 4 of 5: the whole local stack dies (SIGKILL to local mode, which holds the")
    print("journal, and to the providers: a laptop losing power). Local mode keeps its state in")
    print("a state directory (default .durable-agents/): every write is on disk before it is")
    print("acknowledged.")
    stack = _Stack(state_dir / "state", on_line)
    try:
        banner("1/4", "durable-agents local --state-dir … (the journal: local.sqlite3 there)")
        services = stack.start()
        api = stack.worker.base_url if stack.worker else ""
        _say(f"api {api}, store 127.0.0.1:{stack.moto_port}, state in {stack.state}")
        banner("2/4", "a checkout pays and finishes; a refund waits for a person")
        _, body = _post_run(api, "example-checkout", dict(checkout_input), KEY)
        checkout = body["run"]["run_id"]
        _until(lambda: _status(api, checkout) == "SUCCEEDED", "the checkout")
        _say(f"POST /runs (Idempotency-Key: {KEY}) → {checkout}: SUCCEEDED")
        _, body = _post_run(api, "example-support", dict(support_input))
        support = body["run"]["run_id"]
        approval = _until(lambda: _pending(api, support), "the refund's approval")
        _until(lambda: _status(api, support) == "SUSPENDED", "the run to suspend")
        _, link = http_json("POST", f"{api}/approvals/{approval}/links", {"approver": approver})
        _say(f"{support} waits for approval {approval}; a signed link is minted for {approver}")
        before = _payments(services)
        _say(f"payments so far: {dict(before)}")

        banner("3/4", "SIGKILL to everything, then durable-agents local again, at once")
        pids = stack.kill()
        _say(f"killed pids {pids} (local mode, which holds the journal; the providers)")
        started = time.monotonic()
        services = stack.start()
        _say(f"restarted on the same state and ports in {time.monotonic() - started:.1f} s")
        waiting = _status(api, support)
        still_pending = _pending(api, support)
        _say(f"GET /runs/{support} → {waiting}; its approval pending: {still_pending}")
        again_status, again = _post_run(api, "example-checkout", dict(checkout_input), KEY)
        same = again["run"]["run_id"]
        _say(f"POST /runs (Idempotency-Key: {KEY}) again → {again_status}, run {same}")

        banner("4/4", "the link minted before the crash approves the refund")
        status, _ = http_json("POST", link["url"], {"decision": "approve"})
        _say(f"POST {link['url'][:60]}… → {status}")
        _until(lambda: _status(api, support) == "SUCCEEDED", "the support run")
        after = _payments(services)
        _say(f"payments now: {dict(after)}")
        checks = {
            "the waiting run and its approval survived (no 404)": not waiting.startswith("HTTP")
            and still_pending == approval,
            "the same Idempotency-Key returned the same run": (again_status, same)
            == (200, checkout),
            "the link minted before the crash still approved": status == 200,
            "each payment is in the provider's ledger exactly once": bool(before)
            and all(times == 1 for times in after.values()),
            "the refund was paid after the approval, the checkout never again": len(after)
            == len(before) + 1
            and before.keys() <= after.keys(),
        }
        for text, ok in checks.items():
            print(f"  {'✓' if ok else '✗'} {text}")
        return all(checks.values())
    finally:
        stack.stop()
