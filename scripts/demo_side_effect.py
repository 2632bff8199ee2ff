"""Part 2 of the demo (``scripts/demo.py``): a worker killed between a charge and its COMMIT."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path

from demo_common import (
    NewWorker,
    banner,
    ledger_line,
    ledger_marks,
    print_checks,
    say,
    wait_for_status,
)

from durable_agents.core.clock import SystemClock, iso
from durable_agents.journal.store import JournalStore
from durable_agents_local.console import (
    history_table,
    side_effect_timeline,
)
from durable_agents_local.moto_server import MotoProcess
from durable_agents_local.processes import ServicesProcess, WorkerProcess, http_json
from durable_agents_local.runs import RunsClient
from durable_agents_local.services import ServicesHandle
from durable_agents_local.verify import (
    prepared_at_crash_failures,
    recovered_by,
    sandwich_failures,
)

CRASH_AT = "charge-card:after_execute"
CHECKOUT_INPUT = {
    "order_id": "A-1001",
    "customer": "cus_ada",
    "email": "ada@example.com",
    "items": {"tea": 2, "scone": 1},
}
CHECKOUT_ARGS = [
    "--function-timeout",
    "StepRunnerFunction=2",  # a tool call's lease = 2 s + 5 s margin
    "--stall-after",
    "2",
    "--log-level",
    "ERROR",
]
CHECKOUT_TIMEOUT = 60.0


def part_two(moto: MotoProcess, new_worker: NewWorker, state_dir: Path) -> bool:
    print("\n" + "─" * 88)
    print("Part 2 of 5: a side effect. A tool call is PREPAREd in the journal (request and")
    print("idempotency key), EXECUTEd at the provider, then COMMITted. Here the worker dies")
    print("between the provider's charge and the COMMIT: the journal only knows it PREPAREd.")
    banner("1/6", f"starting the fake providers and worker 3 with --crash-at {CRASH_AT}")
    services = ServicesProcess(state_dir / "ledgers.json")
    try:
        handle = services.start()
        say(f"payments, email, tickets: {services.url}, pid {services.pid} (their own process)")
        args = [*CHECKOUT_ARGS, "--services-url", services.url]
        doomed = new_worker("worker 3", [*args, "--crash-at", CRASH_AT])
        say(f"worker 3: {doomed.base_url}, pid {doomed.pid}")
        return _checkout(moto, new_worker, handle, doomed, args)
    finally:
        services.stop()


def _checkout(
    moto: MotoProcess,
    new_worker: NewWorker,
    handle: ServicesHandle,
    doomed: WorkerProcess,
    args: Sequence[str],
) -> bool:
    journal = RunsClient(moto.endpoint, store_key=moto.store_key).store
    banner("2/6", "POST /runs: agent example-checkout (price → charge-card → create-ticket → …)")
    say(f"input {CHECKOUT_INPUT}")
    status, body = http_json(
        "POST",
        f"{doomed.base_url}/runs",
        {"agent": "example-checkout", "input": CHECKOUT_INPUT},
    )
    if status != 201:
        raise RuntimeError(f"POST /runs answered {status}: {body}")
    run_id = body["run"]["run_id"]
    say(f"run {run_id} started; charge-card will be PREPAREd, executed, and then …")
    code = doomed.wait(30)
    killed_at = iso(SystemClock().now_ms())

    banner("3/6", f"worker 3 killed itself (exit code {code}) after the charge, before COMMIT")
    at_crash = journal.load(run_id)
    payments = handle.ledger("payments")
    charges = [e["data"]["charge"] for e in payments if e["event"] == "charge.created"]
    for charge in charges:
        say(
            f"payments ledger: charge {charge['charge_id']}, {charge['amount_cents']} cents, "
            f"Idempotency-Key {charge['idempotency_key']}"
        )
    for record in at_crash.effects:
        say(
            f"journal: {record.tool} is {record.status.value} (attempt {record.attempt}), "
            "no result: did it happen? The journal cannot tell."
        )
    say(ledger_line(handle))
    crash_failures = prepared_at_crash_failures(at_crash, payments)
    if code != -signal.SIGKILL:
        crash_failures.append(f"worker 3 exited with {code}, expected -9 (SIGKILL)")

    banner("4/6", "starting worker 4 (no --crash-at); it finds the PREPARED call")
    second = new_worker("worker 4", args)
    say(f"worker 4: {second.base_url}, pid {second.pid}")
    say("worker 3's lease on the call expires (2 s timeout + 5 s margin); then whoever")
    say("claims it runs the tool's lookup: GET /payments/charges?idempotency_key=…")
    wait_for_status(second.base_url, run_id, "SUCCEEDED", CHECKOUT_TIMEOUT)
    final = journal.load(run_id)
    result = next(e for e in final.entries if e.name == "charge-card" and e.type.is_result)
    op = result.op_id.removeprefix(f"{run_id}:")
    who = recovered_by(second.lines, op) or "unknown (not in worker 4's log)"
    say(
        f"{op} recovered by the {who}: via {result.meta.get('via')} (attempt {result.attempt})"
        f" — the lookup found {result.meta.get('external_id')}; nothing charged again"
    )
    say(f"run {run_id} SUCCEEDED; {ledger_line(handle)}")

    banner("5/6", "the timeline: journal and providers' ledgers, in time order")
    marks = [
        *ledger_marks(handle),
        {
            "event": "── worker 3 gone (SIGKILL)",
            "at": killed_at,
            "comment": f"--crash-at {CRASH_AT}",
        },
    ]
    print(history_table(side_effect_timeline(final, marks)))
    print()
    failures = crash_failures + sandwich_failures(
        final,
        payments=handle.ledger("payments"),
        tickets=handle.ledger("tickets"),
        email=handle.ledger("email"),
    )
    failures += _rerun(journal, second, handle, run_id)
    return print_checks(
        [
            "worker 3 was SIGKILLed by its own hook after the provider charged, before COMMIT",
            "at that moment: 1 charge at the provider, the call PREPARED in the journal",
            "the run SUCCEEDED; every side-effect record is COMMITTED",
            "charge-card was settled by recovery: attempt 2, via found (lookup by key)",
            "exactly one charge (no refund), one ticket, one email; the run's result names them",
            "re-run from its start, the charge, the ticket and the email were reused, not made",
        ],
        failures,
    )


def _rerun(
    journal: JournalStore, worker: WorkerProcess, handle: ServicesHandle, run_id: str
) -> list[str]:
    """Re-runs the finished checkout from its start: every side effect comes from the ledger."""
    banner("6/6", f'POST /runs/{run_id}/rerun {{"from": "start"}}: re-run it, pay nothing twice')
    before = ledger_line(handle)
    status, body = http_json("POST", f"{worker.base_url}/runs/{run_id}/rerun", {"from": "start"})
    if status != 201:
        return [f"POST /runs/{run_id}/rerun answered {status}: {body}"]
    rerun_id = body["run"]["run_id"]
    say(f"rerun {rerun_id} of {run_id}; the calls it may reuse (same tool, same request):")
    for effect in body["reusable_effects"]:
        say(f"  {effect['tool']} ({effect['operation_id'].removeprefix(run_id + ':')})")
    wait_for_status(worker.base_url, rerun_id, "SUCCEEDED", CHECKOUT_TIMEOUT)
    reused = [
        r.tool
        for r in journal.load(rerun_id).effects
        if (r.note or {}).get("reused_from", {}).get("run_id") == run_id
    ]
    say(f"rerun {rerun_id} SUCCEEDED; reused from the ledger: {', '.join(reused)}")
    say(f"before: {before}")
    say(f"after:  {ledger_line(handle)}")
    failures = []
    if sorted(reused) != ["charge-card", "create-ticket", "send-email"]:
        failures.append(f"the rerun reused {reused}, not the three calls")
    if ledger_line(handle) != before:
        failures.append("the rerun changed a provider's ledger")
    return failures
