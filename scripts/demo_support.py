"""Part 3 of the demo (``scripts/demo.py``): an agent, a sub-agent and a person approving."""

from __future__ import annotations

import json
import shlex
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from demo_common import (
    NewWorker,
    banner,
    history,
    ledger_marks,
    print_checks,
    say,
    wait_for_status,
)

from durable_agents.admin.views import history as views_history
from durable_agents.core.models import OpKind, RunSnapshot, RunStatus
from durable_agents_local.console import (
    history_table,
    short_op,
    side_effect_timeline,
    streamed_texts,
)
from durable_agents_local.moto_server import MotoProcess
from durable_agents_local.processes import ServicesProcess, http_json
from durable_agents_local.runs import RunsClient
from durable_agents_local.services import ServicesHandle
from durable_agents_local.verify import (
    approved_refund_failures,
    model_once_failures,
    refund_payouts,
    stream_resume_failures,
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
    print("Part 3 of 5: an agent. A triage sub-agent, then model turns and tool calls, each")
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
    # Sub-agent runs are hidden from a plain listing (each names its parent): ask for this
    # run's own.
    _, listed = http_json("GET", f"{api}/runs?parent={run_id}&limit=20")
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
    journal = RunsClient(moto.endpoint, store_key=moto.store_key).store
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
