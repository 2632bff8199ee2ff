"""The durable-agents demo: kill -9 the worker mid-step, and mid-payment; nothing is lost.

What it does (no AWS account, no Docker; about 45 s):

Part 1, a step:

1. starts a moto server process (the journal lives there) and a worker process
   (``durable-agents local``), on free loopback ports;
2. starts a run of the example agent ``example-research`` over HTTP;
3. waits until step ``fetch-2`` is running, then kills the worker with SIGKILL;
4. starts a new worker, which picks the run up where the journal says it is;
5. prints the run's timeline and checks, from the journal, that every recorded step ran
   exactly once and only the interrupted step ran again.

Part 2, a side effect (the PREPARE → EXECUTE → COMMIT sandwich):

1. starts the fake payments/email/tickets providers as their own process, and a worker with
   ``--crash-at charge-card:after_execute``;
2. starts an ``example-checkout`` run: price, charge the card, open a ticket, send an email;
3. the worker SIGKILLs itself right after the payment provider charged the card and before
   the journal recorded it: the provider's ledger has the charge, the journal a PREPARED call;
4. starts a new worker; once the dead worker's lease on the call expires, recovery asks the
   provider (lookup by idempotency key), finds the charge and records it, never charging again;
5. prints the timeline (journal and ledgers) and checks exactly one charge, one ticket, one
   email.

Exit status 0 only if every check of both parts holds. Run it with ``make demo``.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
import urllib.error
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from durable_agents.clock import SystemClock
from durable_agents.local.console import history_table, side_effect_timeline
from durable_agents.local.moto_server import MotoProcess, free_port
from durable_agents.local.processes import ServicesProcess, WorkerProcess, http_json
from durable_agents.local.runs import RunsClient
from durable_agents.local.services import ServicesHandle
from durable_agents.local.verify import (
    crash_recovery_failures,
    prepared_at_crash_failures,
    recovered_by,
    sandwich_failures,
    step_starts,
)
from durable_agents.views import iso

ROOT = Path(__file__).resolve().parent.parent
KILLED_STEP = "fetch-2"
WORK_SECONDS = "1"  # each fetch/summarize step sleeps this long: time to kill it mid-step
WORKER_ARGS = [
    "--function-timeout",
    "StepRunnerFunction=4",  # claim lease = 4 s + 5 s margin
    "--stall-after",
    "2",
    "--log-level",
    "ERROR",
]
RUN_INPUT = {"topic": "durable execution", "sections": 3, "pause_seconds": 1}
FINISH_TIMEOUT = 90.0

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


def part_one(moto: MotoProcess, new_worker: NewWorker) -> bool:
    clock = SystemClock()
    print("durable-agents demo, part 1 of 2: a worker is killed with SIGKILL in the middle of")
    print("a step.")
    print("The journal (DynamoDB, here in a moto process) keeps every recorded step; the next")
    print("worker replays them from the journal and runs only what was not finished.")
    banner("1/5", "starting the journal (moto) and a worker")
    moto.start()
    say(f"moto server (DynamoDB, S3, EventBridge, SQS): {moto.endpoint}, pid {moto.pid}")
    first = new_worker("worker 1", WORKER_ARGS)
    say(f"worker 1: {first.base_url}, pid {first.pid}")

    banner("2/5", f"POST /runs: agent example-research, input {RUN_INPUT}")
    status, body = http_json(
        "POST", f"{first.base_url}/runs", {"agent": "example-research", "input": RUN_INPUT}
    )
    if status != 201:
        raise RuntimeError(f"POST /runs answered {status}: {body}")
    run_id = body["run"]["run_id"]
    say(f"run {run_id} started; waiting for step {KILLED_STEP} to be running …")
    wait_for_running_step(first.base_url, run_id, KILLED_STEP, timeout=30)

    banner("3/5", f"kill -9 worker 1 (pid {first.pid}) while {KILLED_STEP} is running")
    first.kill()
    killed_at_ms = clock.now_ms()
    say(f"worker 1 is gone (SIGKILL). The journal in moto still holds run {run_id}:")
    done = RunsClient(moto.endpoint).history(run_id)[0]["events"]
    finished = [e["name"] for e in done if e["event"] == "step_succeeded"]
    say(f"  recorded steps: {', '.join(finished)}; {KILLED_STEP}: started, no result")

    banner("4/5", "starting worker 2 (it finds the run in the journal)")
    second = new_worker("worker 2", WORKER_ARGS)
    say(f"worker 2: {second.base_url}, pid {second.pid}")
    say("recorded steps are replayed from the journal, never run again; the claim on")
    say(f"{KILLED_STEP} expires (4 s timeout + 5 s margin), then it runs as attempt 2 …")
    wait_for_status(second.base_url, run_id, "SUCCEEDED", FINISH_TIMEOUT)
    say(f"run {run_id} SUCCEEDED")

    banner("5/5", "the run's timeline, read from the journal")
    events = RunsClient(moto.endpoint).history(run_id)[0]["events"]
    print(history_table(events))
    failures = crash_recovery_failures(events, killed_step=KILLED_STEP, killed_at_ms=killed_at_ms)
    starts = ", ".join(f"{name} x{count}" for name, count in step_starts(events).items())
    print(f"\nstep_started per step: {starts}")
    return print_checks(
        [
            "the run SUCCEEDED",
            "every operation has exactly one result",
            f"every step started once, except {KILLED_STEP}: attempt 1 interrupted by the "
            "kill, attempt 2 completed",
            "no step recorded before the kill ran again after the restart",
        ],
        failures,
    )


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


def part_two(moto: MotoProcess, new_worker: NewWorker, state_dir: Path) -> bool:
    print("\n" + "─" * 88)
    print("Part 2 of 2: a side effect. A tool call is PREPAREd in the journal (request and")
    print("idempotency key), EXECUTEd at the provider, then COMMITted. Here the worker dies")
    print("between the provider's charge and the COMMIT: the journal only knows it PREPAREd.")
    banner("1/5", f"starting the fake providers and worker 3 with --crash-at {CRASH_AT}")
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
    journal = RunsClient(moto.endpoint).store
    banner("2/5", "POST /runs: agent example-checkout (price → charge-card → create-ticket → …)")
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

    banner("3/5", f"worker 3 killed itself (exit code {code}) after the charge, before COMMIT")
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

    banner("4/5", "starting worker 4 (no --crash-at); it finds the PREPARED call")
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

    banner("5/5", "the timeline: journal and providers' ledgers, in time order")
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
    return print_checks(
        [
            "worker 3 was SIGKILLed by its own hook after the provider charged, before COMMIT",
            "at that moment: 1 charge at the provider, the call PREPARED in the journal",
            "the run SUCCEEDED; every side-effect record is COMMITTED",
            "charge-card was settled by recovery: attempt 2, via found (lookup by key)",
            "exactly one charge (no refund), one ticket, one email; the run's result names them",
        ],
        failures,
    )


def demo() -> int:
    started = time.monotonic()
    moto = MotoProcess(free_port())
    env = {"EXAMPLE_WORK_SECONDS": WORK_SECONDS}
    workers: list[WorkerProcess] = []

    def new_worker(label: str, args: Sequence[str]) -> WorkerProcess:
        worker = WorkerProcess(
            api_port=free_port(),
            moto_endpoint=moto.endpoint,
            args=args,
            cwd=ROOT,
            env=env,
            on_line=worker_line(label),
        )
        workers.append(worker)
        worker.start()
        return worker

    try:
        first_ok = part_one(moto, new_worker)
        part_one_seconds = time.monotonic() - started
        for worker in workers:  # part 2's workers alone take its events
            worker.stop()
        with tempfile.TemporaryDirectory(prefix="durable-agents-demo-") as state_dir:
            second_ok = part_two(moto, new_worker, Path(state_dir))
        elapsed = time.monotonic() - started
        print(
            f"\npart 1 {'passed' if first_ok else 'FAILED'} ({part_one_seconds:.1f} s), "
            f"part 2 {'passed' if second_ok else 'FAILED'} ({elapsed - part_one_seconds:.1f} s)"
        )
        if first_ok and second_ok:
            print(f"demo passed in {elapsed:.1f} s")
            return 0
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the demo reports any failure and exits 1
        print(f"\ndemo FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        for worker in workers:
            worker.stop()
        moto.stop()


if __name__ == "__main__":
    # A plain `kill` also cleans up the child processes (SystemExit runs the finally block).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(demo())
