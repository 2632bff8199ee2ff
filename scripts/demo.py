"""The durable-agents demo: kill -9 the worker mid-step and mid-payment; a person approves.

What it does (no AWS account, no Docker; about 80 s):

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

Part 3, the agent layer and a person in the loop:

1. starts the fake providers again and a worker (no crash);
2. starts an ``example-support`` run over HTTP: a ``triage`` sub-agent (its own run), then a
   tool-use loop with a scripted model: lookup-order, then issue-refund and create-ticket in
   parallel; the 65 EUR refund is above the 50 EUR threshold, so the run SUSPENDs until someone
   in ``group:support-leads`` approves that exact refund;
3. reads the pending approval (``GET /approvals?status=pending``), mints a signed link for the
   approver (``POST /approvals/{id}/links``), prints it and the equivalent ``curl``, and decides
   through that link over HTTP, as the curl would;
4. reads the streamed model text as a browser would (server-sent events), reconnecting after a
   cursor with ``Last-Event-ID``;
5. prints the timeline and checks: the run SUCCEEDED, the model was asked once per recorded
   turn, exactly one refund payout and one ticket, and the decision names the link's approver.

Part 4, the whole stack killed (``scripts/demo_durable.py``): ``durable-agents local`` on a
state directory; a checkout pays, a refund waits for an approval; SIGKILL to the worker, the
store and the providers; restarted at once on the same state and ports, the waiting run is
there, the link minted before the crash approves it, the same Idempotency-Key returns the same
run, and each payment is in the ledger exactly once.

Exit status 0 only if every check of every part holds. Run it with ``make demo``.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from demo_durable import part_four

from durable_agents.clock import SystemClock
from durable_agents.local.console import (
    history_table,
    short_op,
    side_effect_timeline,
    streamed_texts,
)
from durable_agents.local.moto_server import MotoProcess, free_port
from durable_agents.local.processes import ServicesProcess, WorkerProcess, http_json
from durable_agents.local.runs import RunsClient
from durable_agents.local.services import ServicesHandle
from durable_agents.local.verify import (
    approved_refund_failures,
    crash_recovery_failures,
    model_once_failures,
    prepared_at_crash_failures,
    recovered_by,
    refund_payouts,
    sandwich_failures,
    step_starts,
    stream_resume_failures,
)
from durable_agents.models import OpKind, RunSnapshot, RunStatus
from durable_agents.views import history as views_history
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
    print("durable-agents demo, part 1 of 4: a worker is killed with SIGKILL in the middle of")
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
    print("Part 2 of 4: a side effect. A tool call is PREPAREd in the journal (request and")
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


SUPPORT_INPUT = {
    "customer": "cus-ada",
    "message": "Hi! My order A-1001 arrived damaged. Could I get a refund, please?",
}
REFUND_ORDER, REFUND_CENTS = "A-1001", 6_500  # what the scripted model asks issue-refund for
APPROVER = "group:support-leads"
APPROVAL_COMMENT = "Photos confirm the damage; refund approved. (Grace, support lead)"
SUPPORT_TIMEOUT = 30.0


def sse_get(url: str, last_event_id: str | None) -> tuple[str, list[dict[str, Any]], str | None]:
    """One request as a browser's ``EventSource`` makes it: raw text, chunks, ``done`` status."""
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    chunks: list[dict[str, Any]] = []
    done = None
    for block in text.split("\n\n"):
        fields = dict(line.partition(": ")[::2] for line in block.splitlines())
        if fields.get("event") == "done":
            done = json.loads(fields["data"])["status"]
        elif "data" in fields:
            chunks.append({**json.loads(fields["data"]), "cursor": fields["id"]})
    return text, chunks, done


def read_stream(base_url: str, run_id: str) -> list[dict[str, Any]]:
    """Every chunk of a finished run's stream from the start (JSON, page after page)."""
    chunks: list[dict[str, Any]] = []
    query = ""
    while True:
        status, page = http_json("GET", f"{base_url}/runs/{run_id}/stream{query}")
        if status != 200:
            raise RuntimeError(f"GET stream answered {status}: {page}")
        chunks += page["chunks"]
        if page["done"] or not page["chunks"]:
            return chunks
        query = f"?after={urllib.parse.quote(page['cursor'])}"


def wait_for_approval_wait(base_url: str, run_id: str, timeout: float) -> dict[str, Any]:
    """Waits until the run is SUSPENDED with a pending approval and its create-ticket done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = history(base_url, run_id)
        ticket = any(
            e["event"] == "tool_succeeded" and e["name"] == "create-ticket" for e in events
        )
        _, pending = http_json("GET", f"{base_url}/approvals?status=pending")
        asked = any(a["run_id"] == run_id for a in pending["approvals"])
        _, run = http_json("GET", f"{base_url}/runs/{run_id}")
        if run["status"] in ("FAILED", "SUCCEEDED", "PAUSED"):
            raise RuntimeError(f"the run is {run['status']} before any approval: {run['error']}")
        if ticket and asked and run["status"] == "SUSPENDED":
            return dict(run)
        time.sleep(0.1)
    raise RuntimeError(f"the run did not wait for an approval within {timeout} s")


def show_texts(chunks: Sequence[Mapping[str, Any]], run_id: str) -> None:
    for op, text in streamed_texts(chunks):
        say(f"  {short_op(op, run_id)}: {text}")


def part_three(moto: MotoProcess, new_worker: NewWorker, state_dir: Path) -> bool:
    print("\n" + "─" * 88)
    print("Part 3 of 4: an agent. A triage sub-agent, then model turns and tool calls, each")
    print("recorded once; a refund above 50 EUR waits for a person, who approves it through a")
    print("signed link over HTTP. The model is scripted (agents/scripts/support.json): offline.")
    banner("1/5", "starting the fake providers again and worker 5 (no crash this time)")
    services = ServicesProcess(state_dir / "support-ledgers.json")
    try:
        handle = services.start()
        say(f"payments, email, tickets: {services.url}, pid {services.pid}")
        worker = new_worker("worker 5", ["--log-level", "ERROR", "--services-url", services.url])
        say(f"worker 5: {worker.base_url}, pid {worker.pid}")
        return _support(moto, handle, worker.base_url)
    finally:
        services.stop()


def _support(moto: MotoProcess, handle: ServicesHandle, api: str) -> bool:
    banner("2/5", "POST /runs: agent example-support (triage → model turns → tools)")
    say(f"input {json.dumps(SUPPORT_INPUT)}")
    status, body = http_json(
        "POST", f"{api}/runs", {"agent": "example-support", "input": SUPPORT_INPUT}
    )
    if status != 201:
        raise RuntimeError(f"POST /runs answered {status}: {body}")
    run_id = body["run"]["run_id"]
    say(f"run {run_id} started …")
    waiting = wait_for_approval_wait(api, run_id, SUPPORT_TIMEOUT)
    _, listed = http_json("GET", f"{api}/runs?limit=20")
    children = [r for r in listed["runs"] if r.get("parent_run_id") == run_id]
    for child in children:
        say(f"sub-agent {child['agent']}: its own run {child['run_id']}")
        say(
            f"  parent_run_id {child['parent_run_id']}, {child['status']}, answered "
            f"{json.dumps(child['result'])}"
        )
    for event in history(api, run_id):
        if event["event"] == "llm_succeeded":
            uses = [b for b in event["result"]["content"] if b["type"] == "tool_use"]
            if len(uses) == 1:
                asked = f"{uses[0]['name']} {json.dumps(uses[0]['input'])}"
                say(f"{event['name']}: the model asks for {asked}")
                continue
            say(f"{event['name']}: the model asks for {len(uses)} tools at once (run in parallel):")
            for use in uses:
                say(f"  {use['name']} {json.dumps(use['input'])}")
        elif event["event"] == "tool_succeeded" and event["name"] == "create-ticket":
            say(
                f"create-ticket ran in parallel: {event['result']['ticket_id']}; issue-refund "
                f"({REFUND_CENTS} cents > 5000) needs an approval"
            )
    say(f"run {run_id} is {waiting['status']} until someone decides: no worker holds it")
    stream_url = f"{api}/runs/{run_id}/stream"
    _, before, _ = sse_get(stream_url, None)
    if not before:
        raise RuntimeError("nothing was streamed before the approval")
    say("a browser watching GET /runs/{id}/stream (server-sent events) has received:")
    show_texts(before, run_id)
    say(f"… then its tab is closed. Last event id: {before[-1]['cursor']}")

    banner("3/5", f"a person in {APPROVER} approves the exact refund, over HTTP")
    status, listing = http_json("GET", f"{api}/approvals?status=pending")
    approval = next(a for a in listing["approvals"] if a["run_id"] == run_id)
    approval_id = approval["approval_id"]
    say(f"GET /approvals?status=pending → {approval_id}")
    say(f"  operation: {short_op(approval['operation_id'], run_id)}")
    say(f"  summary:   {approval['summary']}")
    say(f"  request:   {json.dumps(approval['request'])}")
    say(f"  approvers: {', '.join(approval['approvers'])}; deadline {approval['deadline']}")
    status, link = http_json(
        "POST", f"{api}/approvals/{approval_id}/links", {"approver": APPROVER, "ttl_seconds": 3600}
    )
    if status != 201:
        raise RuntimeError(f"POST /approvals/{approval_id}/links answered {status}: {link}")
    say(
        f'POST /approvals/{approval_id}/links {{"approver": "{APPROVER}"}} → {status}, '
        f"link {link['link_id']}, expires {link['expires_at']}"
    )
    page_status, _ = http_json("GET", link["url"])
    say(
        f"the approval link (a credential: send it only to a support lead; opening it → "
        f"{page_status}, a page with the request and Approve/Reject):"
    )
    print(f"\n  {link['url']}\n")
    decision_body = json.dumps({"decision": "approve", "comment": APPROVAL_COMMENT})
    say("or, from a terminal:")
    print(
        f"\n  curl -sS -X POST {shlex.quote(link['url'])} \\\n"
        "    -H 'Content-Type: application/json' \\\n"
        f"    -d {shlex.quote(decision_body)}\n"
    )
    say("deciding now exactly as that curl would (the same POST, with urllib):")
    status, decided = http_json("POST", link["url"], raw=decision_body.encode())
    if status != 200:
        raise RuntimeError(f"POST {link['url']} answered {status}: {decided}")
    decision = decided["decision"]
    say(
        f"→ {status} {decided['status']} by {decision['decided_by']}, via {decision['via']}, "
        f"at {decision['decided_at']}"
    )
    reused, answer = http_json("POST", link["url"], raw=decision_body.encode())
    say(
        f"the same curl again → {reused}: {answer['error']['message'] if reused != 200 else answer}"
    )

    banner("4/5", "the run resumes: the refund is paid, the model answers, the stream continues")
    run = wait_for_status(api, run_id, "SUCCEEDED", SUPPORT_TIMEOUT)
    say(
        f"run {run_id} SUCCEEDED; result: category {run['result']['category']!r}, "
        f"{run['result']['turns']} model turns, the answer (below)"
    )
    say(f"the browser tab reopens; EventSource sends Last-Event-ID: {before[-1]['cursor']}")
    raw, after, done = sse_get(stream_url, before[-1]["cursor"])
    say("and receives (the first events, as sent):")
    for line in raw.splitlines()[2:9]:
        say(f"  │ {line}")
    for _ in range(20):  # an EventSource reconnects after each response, from its last id
        if done is not None:
            break
        _, chunks, done = sse_get(stream_url, (after or before)[-1]["cursor"])
        after += chunks
    say(f"… {len(after)} events, then `event: done` ({done}). The text it shows:")
    show_texts(after, run_id)
    full = read_stream(api, run_id)
    say(
        f"the stream read from the start: {len(full)} events = {len(before)} before the tab "
        f"closed + {len(after)} after it reopened"
    )

    banner("5/5", "the timeline (journal of the run and its sub-agent, ledgers) and checks")
    journal = RunsClient(moto.endpoint).store
    final = journal.load(run_id)
    children_ids = [c["run_id"] for c in children]
    triage = journal.load(children_ids[0]) if children_ids else None
    _, shown = http_json("GET", f"{api}/approvals/{approval_id}")
    print(history_table(support_timeline(final, triage, shown, handle)))
    print()
    failures = [
        *triage_failures(final, triage, len(children)),
        *model_once_failures(views_history(final), turns=run["result"]["turns"]),
        *(model_once_failures(views_history(triage), turns=1) if triage else []),
        *approved_refund_failures(
            final,
            order_id=REFUND_ORDER,
            amount_cents=REFUND_CENTS,
            payments=handle.ledger("payments"),
            tickets=handle.ledger("tickets"),
            approval=shown,
            approver=APPROVER,
            link_id=link["link_id"],
        ),
        *stream_resume_failures(full, before, after),
    ]
    if reused != 409:
        failures.append(f"the link's second use answered {reused}, expected 409")
    texts = streamed_texts(full)
    if not texts or texts[-1][1] != run["result"]["answer"]:
        failures.append("the last streamed text is not the run's answer")
    payout = refund_payouts(handle.ledger("payments"), REFUND_ORDER)
    return print_checks(
        [
            "the triage sub-agent ran once, as its own run linked to its parent",
            f"the run SUCCEEDED; the model was asked once per recorded turn "
            f"({run['result']['turns']} turns + 1 triage call), no retries",
            f"exactly one refund payout ({payout[0]['charge_id'] if payout else '?'}, "
            f"{REFUND_CENTS} cents) and one ticket",
            f"the decision is recorded via the signed link, by {APPROVER} (signed link "
            f"{link['link_id']}); the link's second use got 409",
            "the browser's reconnection continued exactly after its last event id (no gap, "
            "no repeat); the last streamed text is the run's answer",
        ],
        failures,
    )


def triage_failures(parent: RunSnapshot, triage: RunSnapshot | None, runs: int) -> list[str]:
    """The triage sub-agent: one child run, linked to its parent, whose result it returned."""
    if triage is None or runs != 1:
        return [f"{runs} sub-agent runs, expected 1 (triage)"]
    failures = []
    header = triage.header
    if header.parent_run_id != parent.header.run_id or header.status is not RunStatus.SUCCEEDED:
        failures.append(f"the triage run is {header.status.value}, parent {header.parent_run_id}")
    invoked = [e for e in parent.entries if e.kind is OpKind.INVOKE and e.type.is_result]
    if len(invoked) != 1 or invoked[0].value != header.result:
        failures.append("the parent's invoke result is not the triage run's result")
    return failures


def support_timeline(
    final: RunSnapshot,
    triage: RunSnapshot | None,
    approval: Mapping[str, Any],
    handle: ServicesHandle,
) -> list[dict[str, Any]]:
    """The run's journal with its tool calls' PREPARE/COMMIT, the sub-agent's journal, the
    decision and the providers' ledgers, in time order."""
    marks: list[dict[str, Any]] = ledger_marks(handle)
    if triage is not None:
        for event in views_history(triage):
            marks.append(
                {
                    **event,
                    "event": f"  triage run: {event['event']}",
                    "op_id": short_op(event.get("op_id"), triage.header.run_id),
                    "comment": triage.header.run_id if event["event"] == "run_started" else None,
                }
            )
    decision = approval.get("decision") or {}
    events = side_effect_timeline(final, marks)
    for event in events:
        if event.get("kind") == "approval" and event["event"] == "approval_succeeded":
            state = "approved" if decision.get("approved") else "rejected"
            event["comment"] = f"{state} by {decision.get('decided_by')}"
        elif event["event"].endswith("_succeeded") and isinstance(event.get("result"), dict):
            event["comment"] = event.get("comment") or result_note(event["result"])
    return events


def result_note(result: Mapping[str, Any]) -> str | None:
    """A short note for a model turn's, a tool branch's or a parallel block's result."""
    if "content" in result and "stop_reason" in result:  # a model turn
        blocks = result["content"]
        uses = [b["name"] for b in blocks if b["type"] == "tool_use"]
        text = " ".join(b["text"] for b in blocks if b["type"] == "text")
        return f"→ {' + '.join(uses)}" if uses else json.dumps(text)
    if result.get("type") == "tool_result":  # a branch of the parallel tool calls
        return f"{result.get('tool_use_id')}: {result.get('status')}"
    if "items" in result:  # the parallel block
        states = [str(item.get("status")) for item in result["items"]]
        return f"{len(states)} branches: {', '.join(states)}"
    return None


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
            part_two_seconds = time.monotonic() - started - part_one_seconds
            for worker in workers:  # part 2's worker points at part 2's providers
                worker.stop()
            third_ok = part_three(moto, new_worker, Path(state_dir))
            part_three_seconds = time.monotonic() - started - part_one_seconds - part_two_seconds
            for worker in workers:
                worker.stop()
            fourth_ok = part_four(
                Path(state_dir),
                banner=banner,
                on_line=worker_line("worker 6"),
                checkout_input=CHECKOUT_INPUT,
                support_input=SUPPORT_INPUT,
                approver=APPROVER,
            )
        elapsed = time.monotonic() - started
        part_four_seconds = elapsed - part_one_seconds - part_two_seconds - part_three_seconds
        verdicts = [
            f"part {n} {'passed' if ok else 'FAILED'} ({seconds:.1f} s)"
            for n, ok, seconds in (
                (1, first_ok, part_one_seconds),
                (2, second_ok, part_two_seconds),
                (3, third_ok, part_three_seconds),
                (4, fourth_ok, part_four_seconds),
            )
        ]
        print("\n" + ", ".join(verdicts))
        if first_ok and second_ok and third_ok and fourth_ok:
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
