"""Checks after a crash (demo and tests): nothing recorded ran twice, no side effect twice."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from durable_agents.core.models import EffectStatus, Entry, OpKind, RunSnapshot, RunStatus


def _ms(at: str) -> int:
    return int(datetime.fromisoformat(at).timestamp() * 1000)


def op_events(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The history events that belong to an operation (not ``run_started`` etc.)."""
    return [e for e in events if e.get("op_id")]


def is_result(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is an operation's final result (succeeded or failed)."""
    return event["event"] in (f"{event.get('kind')}_succeeded", f"{event.get('kind')}_failed")


def step_starts(events: Sequence[Mapping[str, Any]]) -> Counter[str]:
    """How many ``step_started`` events each step (by name) has."""
    return Counter(str(e["name"]) for e in events if e["event"] == "step_started")


def crash_recovery_failures(
    events: Sequence[Mapping[str, Any]], *, killed_step: str, killed_at_ms: int
) -> list[str]:
    """What is wrong with a history in which the worker was killed during ``killed_step``.

    Expected: the run succeeded; every operation has exactly one result; every step has one
    ``step_started`` except ``killed_step``, which has two (attempt 1 interrupted before the
    kill, attempt 2 after it and completed); no operation recorded before the kill has any
    event after it.

    Args:
        events: The run's history (``views.history``).
        killed_step: The name of the step that was running when the worker was killed.
        killed_at_ms: When it was killed (epoch ms, the journal's clock).

    Returns:
        Human-readable failures; empty when every check holds.
    """
    failures: list[str] = []
    if not events or events[-1]["event"] != "run_succeeded":
        failures.append(
            f"the run did not succeed (last event: {events[-1]['event'] if events else 'none'})"
        )
    ops = op_events(events)
    results = Counter(str(e["op_id"]) for e in ops if is_result(e))
    for op_id in dict.fromkeys(str(e["op_id"]) for e in ops):
        if results[op_id] != 1:
            failures.append(f"{op_id} has {results[op_id]} results, expected 1")
    for name, count in step_starts(events).items():
        expected = 2 if name == killed_step else 1
        if count != expected:
            failures.append(f"step {name} started {count} times, expected {expected}")
    killed = [e for e in ops if e.get("name") == killed_step]
    starts = [e for e in killed if e["event"] == "step_started"]
    if len(starts) == 2:
        first, second = starts
        if first.get("attempt") != 1 or _ms(first["at"]) > killed_at_ms:
            failures.append(f"{killed_step}: attempt 1 was not started before the kill")
        if second.get("attempt") != 2 or _ms(second["at"]) < killed_at_ms:
            failures.append(f"{killed_step}: attempt 2 was not started after the kill")
        finals = [e for e in killed if is_result(e)]
        if not finals or finals[0].get("attempt") != 2:
            failures.append(f"{killed_step}: the result was not recorded by attempt 2")
    recorded_before = {str(e["op_id"]) for e in ops if is_result(e) and _ms(e["at"]) < killed_at_ms}
    for event in ops:
        if event["op_id"] in recorded_before and _ms(event["at"]) > killed_at_ms:
            failures.append(
                f"{event['op_id']} was recorded before the kill but has {event['event']} after it"
            )
    return failures


# -- the side-effect sandwich: a worker killed between the provider's act and COMMIT ----------


def ledger_events(ledger: Sequence[Mapping[str, Any]], event: str) -> list[Mapping[str, Any]]:
    """The entries of a provider's ledger (``ServicesHandle.ledger``) of one kind."""
    return [e for e in ledger if e.get("event") == event]


def _tool_results(snapshot: RunSnapshot, tool: str) -> list[Entry]:
    return [
        e for e in snapshot.entries if e.kind is OpKind.TOOL and e.name == tool and e.type.is_result
    ]


def prepared_at_crash_failures(
    snapshot: RunSnapshot, payments: Sequence[Mapping[str, Any]], *, tool: str = "charge-card"
) -> list[str]:
    """What is wrong with the state right after a crash at ``<tool>:after_execute``.

    Expected: the provider charged once; the journal holds the call PREPARED (attempt 1)
    and no result for it.

    Args:
        snapshot: The run, loaded from the journal after the kill.
        payments: The payment provider's ledger.
        tool: The tool whose call was interrupted.

    Returns:
        Human-readable failures; empty when every check holds.
    """
    failures: list[str] = []
    charges = ledger_events(payments, "charge.created")
    if len(charges) != 1:
        failures.append(f"the payments ledger has {len(charges)} charges at the crash, expected 1")
    records = [r for r in snapshot.effects if r.tool == tool]
    if len(records) != 1 or records[0].status is not EffectStatus.PREPARED:
        states = [f"{r.status.value} (attempt {r.attempt})" for r in records] or ["none"]
        failures.append(f"{tool} record at the crash: {', '.join(states)}, expected PREPARED")
    if _tool_results(snapshot, tool):
        failures.append(f"{tool} already has a result in the journal at the crash")
    return failures


def sandwich_failures(
    snapshot: RunSnapshot,
    *,
    payments: Sequence[Mapping[str, Any]],
    tickets: Sequence[Mapping[str, Any]],
    email: Sequence[Mapping[str, Any]],
    tool: str = "charge-card",
) -> list[str]:
    """What is wrong after an ``example-checkout`` run recovered from a crash in ``tool``.

    Expected: the run succeeded; every side-effect record is COMMITTED; the interrupted call's
    result was recorded by attempt 2 ``via found`` (the lookup found the charge) with the
    provider's charge id; the providers hold exactly one charge (never refunded), one ticket
    and one email, and the run's result names them.

    Args:
        snapshot: The finished run, loaded from the journal.
        payments: The payment provider's ledger.
        tickets: The ticket system's ledger.
        email: The email provider's ledger.
        tool: The tool whose call was interrupted.

    Returns:
        Human-readable failures; empty when every check holds.
    """
    failures: list[str] = []
    header = snapshot.header
    if header.status is not RunStatus.SUCCEEDED:
        failures.append(f"the run is {header.status.value}, expected SUCCEEDED")
    for record in snapshot.effects:
        if record.status is not EffectStatus.COMMITTED:
            failures.append(f"{record.tool} is {record.status.value}, expected COMMITTED")
    charges = ledger_events(payments, "charge.created")
    counts = {
        "charges": len(charges),
        "refunds": len(ledger_events(payments, "charge.refunded")),
        "tickets": len(ledger_events(tickets, "ticket.created")),
        "emails": len(ledger_events(email, "message.sent")),
    }
    for what, count in counts.items():
        expected = 0 if what == "refunds" else 1
        if count != expected:
            failures.append(f"the providers hold {count} {what}, expected {expected}")
    results = _tool_results(snapshot, tool)
    charge_id = charges[0]["data"]["charge"]["charge_id"] if charges else None
    if len(results) != 1:
        failures.append(f"{tool} has {len(results)} results, expected 1")
    else:
        meta, attempt = results[0].meta, results[0].attempt
        if meta.get("via") != "found" or attempt != 2:
            failures.append(
                f"{tool} was recorded via {meta.get('via')} by attempt {attempt}, expected "
                "via found (the recovery's lookup) by attempt 2"
            )
        if meta.get("external_id") != charge_id:
            failures.append(f"{tool} recorded {meta.get('external_id')}, the provider {charge_id}")
    if header.status is RunStatus.SUCCEEDED and header.result is not None:
        result = json.loads(header.result)
        expected_ids = {
            "charge_id": charge_id,
            "ticket_id": _first_id(tickets, "ticket.created", "ticket", "ticket_id"),
            "message_id": _first_id(email, "message.sent", "message", "message_id"),
        }
        for key, value in expected_ids.items():
            if result.get(key) != value:
                failures.append(f"the run's {key} is {result.get(key)}, the provider's {value}")
    return failures


def _first_id(ledger: Sequence[Mapping[str, Any]], event: str, kind: str, key: str) -> Any:
    found = ledger_events(ledger, event)
    return found[0]["data"][kind][key] if found else None


def recovered_by(lines: Iterable[str], op_id: str) -> str | None:
    """Who settled a PREPARED call, from a worker's log lines (``durable-agents local``).

    Args:
        lines: The worker's stderr lines, oldest first.
        op_id: The call's operation id without its run prefix (``charge-card:1``).

    Returns:
        ``"StepRunner"`` (a ``Step Ready`` invocation claimed the call once its lease expired),
        ``"reconciler"`` (its sweep of stale PREPARED calls), or None if neither is logged.
    """
    for line in lines:
        if "ReconcilerFunction" in line and "effects_" in line:
            return "reconciler"
        # ``<agent> <run> <op>, <op> -> <outcome>`` (``durable_agents_local.invoke``): the
        # operations it executed come last before the arrow, comma-separated.
        if "StepRunnerFunction" in line and (f" {op_id} -> " in line or f" {op_id}, " in line):
            return "StepRunner"
    return None


# -- the agent layer: model turns recorded once, a refund approved through a signed link -----


def model_calls(events: Sequence[Mapping[str, Any]]) -> Counter[str]:
    """How many times each ``llm`` operation (by op id) asked the model (``llm_started``)."""
    return Counter(str(e["op_id"]) for e in events if e["event"] == "llm_started")


def model_once_failures(events: Sequence[Mapping[str, Any]], *, turns: int) -> list[str]:
    """What is wrong if the model was not asked exactly once per recorded turn.

    Expected: ``turns`` ``llm`` operations; each has one ``llm_started`` (attempt 1), no failed
    attempt, and exactly one result.

    Args:
        events: A run's history (``views.history``).
        turns: How many model calls the run should have recorded.

    Returns:
        Human-readable failures; empty when every check holds.
    """
    failures: list[str] = []
    llm = [e for e in events if e.get("kind") == "llm"]
    ops = list(dict.fromkeys(str(e["op_id"]) for e in llm))
    if len(ops) != turns:
        failures.append(f"{len(ops)} model calls recorded, expected {turns}")
    calls = model_calls(llm)
    results = Counter(str(e["op_id"]) for e in llm if is_result(e))
    for op_id in ops:
        if calls[op_id] != 1 or results[op_id] != 1:
            failures.append(
                f"{op_id}: the model was asked {calls[op_id]} times for {results[op_id]} "
                "results, expected once for one"
            )
    for event in llm:
        if event["event"] == "llm_attempt_failed" or event.get("attempt", 1) != 1:
            failures.append(f"{event['op_id']}: {event['event']} attempt {event.get('attempt')}")
    return failures


def refund_payouts(payments: Sequence[Mapping[str, Any]], order_id: str) -> list[dict[str, Any]]:
    """The payouts (charges) the payments ledger holds for refunds of ``order_id``."""
    prefix = f"refund for order {order_id}"
    charges = [dict(e["data"]["charge"]) for e in ledger_events(payments, "charge.created")]
    return [c for c in charges if str(c.get("description") or "").startswith(prefix)]


def approved_refund_failures(
    snapshot: RunSnapshot,
    *,
    order_id: str,
    amount_cents: int,
    payments: Sequence[Mapping[str, Any]],
    tickets: Sequence[Mapping[str, Any]],
    approval: Mapping[str, Any],
    approver: str,
    link_id: str,
    tool: str = "issue-refund",
) -> list[str]:
    """What is wrong after an ``example-support`` run whose refund a signed link approved.

    Expected: the run succeeded; the payments ledger holds exactly one payout for the order's
    refund, of ``amount_cents``, never refunded, and it is the one the tool's result names; the
    tickets ledger holds one ticket; the approval is approved, recorded via the link, by the
    link's approver (``<pattern> (signed link <id>)``).

    Args:
        snapshot: The finished run, loaded from the journal.
        order_id: The refunded order.
        amount_cents: The refund's amount.
        payments: The payment provider's ledger.
        tickets: The ticket system's ledger.
        approval: The approval as ``GET /approvals/{id}`` shows it.
        approver: The approver pattern the link was minted for.
        link_id: The link's id (``POST /approvals/{id}/links`` answers it).
        tool: The refund tool.

    Returns:
        Human-readable failures; empty when every check holds.
    """
    failures: list[str] = []
    if snapshot.header.status is not RunStatus.SUCCEEDED:
        failures.append(f"the run is {snapshot.header.status.value}, expected SUCCEEDED")
    payouts = refund_payouts(payments, order_id)
    if len(payouts) != 1:
        failures.append(f"the payments ledger holds {len(payouts)} refund payouts, expected 1")
    for payout in payouts:
        if payout.get("amount_cents") != amount_cents or payout.get("refunded"):
            failures.append(
                f"payout {payout.get('charge_id')}: {payout.get('amount_cents')} cents, refunded "
                f"{payout.get('refunded')}; expected {amount_cents} cents, not refunded"
            )
    results = _tool_results(snapshot, tool)
    if len(results) != 1:
        failures.append(f"{tool} has {len(results)} results, expected 1")
    elif payouts and results[0].meta.get("external_id") != payouts[0].get("charge_id"):
        failures.append(
            f"{tool} recorded {results[0].meta.get('external_id')}, the provider "
            f"{payouts[0].get('charge_id')}"
        )
    created = ledger_events(tickets, "ticket.created")
    if len(created) != 1:
        failures.append(f"the tickets ledger holds {len(created)} tickets, expected 1")
    decision = approval.get("decision") or {}
    expected_by = f"{approver} (signed link {link_id})"
    if approval.get("status") != "approved" or decision.get("approved") is not True:
        failures.append(f"the approval is {approval.get('status')}, expected approved")
    if decision.get("decided_by") != expected_by or decision.get("via") != "link":
        failures.append(
            f"the decision was recorded by {decision.get('decided_by')!r} via "
            f"{decision.get('via')!r}, expected {expected_by!r} via 'link'"
        )
    return failures


def stream_resume_failures(
    full: Sequence[Mapping[str, Any]],
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
) -> list[str]:
    """What is wrong if a reader that reconnected after a cursor did not continue exactly.

    Args:
        full: Every chunk of the run's stream, read from the start (each with a ``cursor``).
        before: What the first connection received.
        after: What the reconnection (``Last-Event-ID``: the last cursor of ``before``) received.

    Returns:
        Human-readable failures (a gap or a repeated chunk); empty when the two connections
        together received exactly ``full``, in order.
    """
    seen = [str(c["cursor"]) for c in [*before, *after]]
    everything = [str(c["cursor"]) for c in full]
    if seen == everything:
        return []
    repeated = len(seen) - len(set(seen))
    missing = len(set(everything) - set(seen))
    return [
        f"the two connections received {len(seen)} chunks ({repeated} repeated, {missing} "
        f"missing); the stream has {len(everything)}"
    ]
