"""HTML of one run in the console: its state, then each operation in program order.

For every operation (``durable_agents.engine.invocation.group_entries`` over the journal): kind,
name,
attempts, when it started and ended and how long it took, what it waits for (a timer's fire
time, the next attempt's time, the lease of the running attempt) as full ISO dates, the tool
call's side-effect status, idempotency key and external id, the child run an ``invoke`` started
(a link), the text the operation streamed (from the stream cache, as a reader sees it), and
how many branches of a ``map``/``parallel`` failed, even when its policy tolerated them. A
failed operation's (and the run's) error shows its recorded traceback, collapsed.

What a journal entry's ``value`` holds is shown only for results: a callback's SCHEDULED entry
carries its secret, so of scheduled values only the child run id and the approval id are read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from api.console_page import (
    collapsed_traceback,
    compact,
    dollars,
    e,
    effect_notes,
    facts,
    notice,
    page,
    pill,
    run_link,
    used_of,
    waited,
    when,
)
from durable_agents.core.models import ErrorInfo, OpKind, RunHeader, RunSnapshot, RunStatus
from durable_agents.engine import reruns
from durable_agents.engine.operations.batch_result import branch_counts
from durable_agents.engine.replay_index import OpRecord, group_entries
from durable_agents.engine.time_limits import deadline_ms
from durable_agents.journal.generation_keys import id_prefix, pos_prefix

MAX_TEXT_CHARS = 20_000
STOPPABLE = {"RUNNING", "SUSPENDED", "QUEUED", "BUDGET_EXCEEDED"}
"""States a cancel can stop (PAUSED / VERSION_UNAVAILABLE: terminate; see run_stops).

A QUEUED run is told when its turn comes, a BUDGET_EXCEEDED one when it is woken
(``engine.stop_requests``)."""


def _scheduled_field(record: OpRecord, key: str) -> str | None:
    if record.scheduled is None or not record.scheduled.value:
        return None
    try:
        value = json.loads(record.scheduled.value)
    except ValueError:
        return None
    found = value.get(key) if isinstance(value, dict) else None
    return str(found) if found else None


def child_run_ids(snapshot: RunSnapshot) -> list[str]:
    """The runs this run's ``invoke`` operations started, in program order."""
    records = group_entries(snapshot.entries, snapshot.effects)
    found = (
        _scheduled_field(records[p], "child_run_id")
        for p in sorted(records)
        if records[p].kind is OpKind.INVOKE
    )
    return [c for c in found if c]


def _state(record: OpRecord) -> str:
    if record.result is not None:
        return record.result.type.value
    if record.effect is not None:
        return record.effect.status.value
    if record.last_failed is not None and (
        record.last_started is None or record.last_started.attempt <= record.last_failed.attempt
    ):
        return "retrying"
    if record.scheduled is not None:
        return "waiting"
    return "running"


def _started_ms(record: OpRecord) -> int | None:
    """When the operation began: its first entry, or its tool call's PREPARE if earlier."""
    times = [x.recorded_at_ms for x in record.entries]
    if record.effect is not None:
        times.append(record.effect.prepared_at_ms)
    return min(times, default=None)


def _duration(record: OpRecord) -> str:
    start = _started_ms(record)
    end = record.result.recorded_at_ms if record.result else None
    if start is None or end is None:
        return "—"
    seconds = (end - start) / 1000
    return f"{seconds:.3f} s"


def _waits(record: OpRecord) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if record.scheduled is not None and record.scheduled.due_at_ms is not None:
        rows.append(
            (
                "fires at" if record.kind is OpKind.WAIT else "deadline",
                when(record.scheduled.due_at_ms),
            )
        )
    if record.result is None and record.last_failed is not None and record.last_failed.due_at_ms:
        rows.append(("next attempt at", when(record.last_failed.due_at_ms)))
    started = record.last_started
    if record.result is None and started is not None and started.lease_expires_at_ms is not None:
        rows.append(("lease until", when(started.lease_expires_at_ms)))
    return rows


def _branch_failures(record: OpRecord) -> str:
    """A batch's failed branches (ADR 0024): counted from its record, no value shown."""
    result = record.result
    if record.kind not in (OpKind.MAP, OpKind.PARALLEL) or result is None or not result.value:
        return ""
    try:
        counts = branch_counts(json.loads(result.value))
    except ValueError:
        return ""
    if counts is None or not counts[0]:
        return ""
    return f'<p class="err">{counts[0]} of {counts[1]} branch(es) failed</p>'


def _effect(record: OpRecord, root: str) -> str:
    effect = record.effect
    if effect is None:
        return ""
    rows = [
        ("side effect", pill(effect.status.value)),
        ("external id", f"<code>{e(effect.external_id or '—')}</code>"),
        ("idempotency key", f"<code>{e(effect.idempotency_key)}</code>"),
    ]
    rows += effect_notes(effect, root)
    return facts(rows)


def _traceback(error: ErrorInfo) -> str:
    """The error's recorded traceback, collapsed (none if not recorded)."""
    return collapsed_traceback(error.traceback)


def _operation_row(
    record: OpRecord, position: str, run_id: str, texts: dict[str, str], root: str
) -> str:
    depth = min(position.count("/"), 3)
    short = record.op_id.removeprefix(f"{run_id}:")
    started = _started_ms(record)
    ended = record.result.recorded_at_ms if record.result else None
    detail: list[str] = []
    waits = _waits(record)
    if waits:
        detail.append(facts(waits))
    detail.append(_effect(record, root))
    child = _scheduled_field(record, "child_run_id") if record.kind is OpKind.INVOKE else None
    if child:
        detail.append(f"child run {run_link(root, child)}")
    approval = _scheduled_field(record, "approval_id") if record.kind is OpKind.APPROVAL else None
    if approval:
        detail.append(f"approval <code>{e(approval)}</code>")
    detail.append(_branch_failures(record))
    if record.result is not None and record.result.error is not None:
        err = record.result.error
        detail.append(f'<p class="err">{e(err.type)}: {e(err.message)}</p>{_traceback(err)}')
    elif record.last_failed is not None and record.last_failed.error is not None:
        err = record.last_failed.error
        detail.append(
            f'<p class="err">attempt {e(record.last_failed.attempt)}: '
            f"{e(err.type)}: {e(err.message)}</p>{_traceback(err)}"
        )
    text = texts.get(record.op_id)
    if text:
        clipped = text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + "…"
        detail.append(f'<pre class="streamed">{e(clipped)}</pre>')
    return (
        f'<tr class="op" data-kind="{e(record.kind.value)}">'
        f'<td class="opid op-depth-{depth}"><code>{e(short)}</code></td>'
        f"<td>{e(record.kind.value)}{_sub_kind_label(record)}</td><td>{e(record.name)}</td>"
        f'<td>{pill(_state(record))}</td><td class="num">{e(record.attempts or "")}</td>'
        f"<td>{when(started)}<br>{when(ended)}</td>"
        f'<td class="num">{_duration(record)}</td><td class="detail">{"".join(detail)}</td></tr>'
    )


def _sub_kind_label(record: OpRecord) -> str:
    """A small label under the kind of a marked operation (a ``wait_for_callback`` scope)."""
    sub_kind = record.result.sub_kind if record.result is not None else None
    return "" if sub_kind is None else f'<br><small class="sub-kind">{e(sub_kind)}</small>'


def _form(action: str, title: str, fields: str, button: str, kind: str) -> str:
    danger = ' class="danger"' if kind in ("cancel", "terminate") else ""
    return (
        f'<form method="post" action="{e(action)}" class="{e(kind)}"><h2>{e(title)}</h2>'
        f'{fields}<div class="actions"><button{danger} type="submit">{e(button)}</button></div>'
        "</form>"
    )


_BUDGET_FIELDS = (
    '<p class="muted">Raises the budget of this run\'s tree; the runs it paused go on.</p>'
    '<label for="budget-tokens">Tokens to add</label>'
    '<input id="budget-tokens" name="add_tokens" type="number" min="0" step="1" value="0">'
    '<label for="budget-usd">Dollars to add</label>'
    '<input id="budget-usd" name="add_cost_usd" type="number" min="0" step="0.01" value="0">'
    '<label for="budget-reason">Reason (recorded with the extension)</label>'
    '<textarea id="budget-reason" name="reason" required maxlength="500"></textarea>'
)


def flow_card(flow: Mapping[str, Any] | None, run_id: str, root: str) -> str:
    """The run's flow control card (``admin.flow_views.run_flow``).

    Its priority, where it queues and for how long, its tree's budget (used / limit, this
    run's share, the extensions with who and why). Nothing for a run flow control has
    nothing to say about (normal priority, no queue, no budget).
    """
    if not flow:
        return ""
    queue = flow.get("queue")
    budget = flow.get("budget")
    priority = flow.get("priority")
    if not queue and not budget and priority in (None, 3):
        return ""
    rows = [("Priority", f'{e(priority)} <span class="muted">(1 highest … 5 lowest)</span>')]
    if isinstance(queue, Mapping):
        rows.append(("Queued under key", f"<code>{e(queue.get('key') or '(none)')}</code>"))
        rows.append(("Waited", e(waited(queue.get("waited_ms")))))
    extensions = ""
    if isinstance(budget, Mapping):
        limit = budget.get("limit") or {}
        used = budget.get("used") or {}
        mine = budget.get("run_used") or {}
        root_run = str(budget.get("root_run_id") or "")
        if root_run and root_run != run_id:
            rows.append(("Budget of", run_link(root, root_run)))
        cost_limit = limit.get("cost_usd")
        cost_limit_text = "no limit" if cost_limit is None else dollars(cost_limit)
        rows += [
            ("Tokens (used / limit)", e(used_of(used.get("tokens"), limit.get("tokens")))),
            (
                "Dollars (used / limit)",
                e(f"{dollars(used.get('cost_usd'))} / {cost_limit_text}"),
            ),
            ("Model calls", e(used.get("calls"))),
            (
                "This run's share",
                e(
                    f"{mine.get('tokens_in', 0)} tokens in, {mine.get('tokens_out', 0)} out, "
                    f"{dollars(mine.get('cost_usd', 0))}, {mine.get('calls', 0)} call(s)"
                ),
            ),
            ("When spent", e(budget.get("on_exceeded"))),
            (
                "Exceeded",
                '<span class="err">yes</span>' if budget.get("exceeded") else "no",
            ),
        ]
        listed = "".join(
            f"<tr><td>{when(x.get('at_ms') if isinstance(x.get('at_ms'), int) else None)}</td>"
            f"<td><code>{e(x.get('by'))}</code></td>"
            f'<td class="num">{e(x.get("add_tokens"))}</td>'
            f'<td class="num">{e(dollars(x.get("add_cost_usd")))}</td>'
            f"<td>{e(x.get('reason'))}</td></tr>"
            for x in budget.get("extensions") or []
            if isinstance(x, Mapping)
        )
        if listed:
            extensions = (
                '<h3>Extensions</h3><div class="scroll"><table class="extensions"><thead><tr>'
                "<th>When</th><th>By</th><th>Tokens added</th><th>Dollars added</th>"
                f"<th>Reason</th></tr></thead><tbody>{listed}</tbody></table></div>"
            )
    return f'<section class="card flow"><h2>Flow control</h2>{facts(rows)}{extensions}</section>'


def _actions(snapshot: RunSnapshot, root: str) -> str:
    """The forms the run's state allows: cancel, terminate, redrive, event, extend budget.

    A BUDGET_EXCEEDED run not being stopped has "Extend budget". A finished run: none. A
    stop already asked: no event, no cancel (a terminate escalates a cancel). Cancel needs
    code that can run (``STOPPABLE``); terminate and redrive take any run that has not
    finished (``run_stops``, ``engine.follow_ups.redrive``).
    """
    header = snapshot.header
    if header.status.terminal:
        return ""
    base = f"{root}console/runs/{quote(header.run_id, safe='')}"
    stop = header.cancel_requested or {}

    def reason(kind: str) -> str:
        rid = "reason" if kind == "cancel" else f"{kind}-reason"
        return (
            f'<label for="{rid}">Reason (recorded with the request)</label>'
            f'<textarea id="{rid}" name="reason" maxlength="1000"></textarea>'
        )

    forms: list[str] = []
    if header.status.value in STOPPABLE and not stop:
        forms.append(
            _form(f"{base}/cancel", "Cancel this run", reason("cancel"), "Cancel run", "cancel")
        )
    if stop.get("mode") != "terminate":
        forms.append(
            _form(
                f"{base}/terminate",
                "Terminate this run",
                reason("terminate"),
                "Terminate run",
                "terminate",
            )
        )
    if not stop:
        fields = (
            '<label for="event-name">Event name</label>'
            '<input id="event-name" name="name" required maxlength="80">'
            '<label for="event-data">Data, as JSON (empty: null)</label>'
            '<textarea id="event-data" name="data" maxlength="200000"></textarea>'
        )
        forms.append(_form(f"{base}/events", "Send an event", fields, "Send event", "event"))
    if header.status is RunStatus.BUDGET_EXCEEDED and not stop:
        forms.append(_form(f"{base}/budget", "Extend budget", _BUDGET_FIELDS, "Extend", "budget"))
    forms.append(
        _form(
            f"{base}/redrive",
            "Redrive",
            '<p class="muted">Resumes a PAUSED run after a fix '
            "was deployed, or wakes a stalled one.</p>",
            "Redrive run",
            "redrive",
        )
    )
    return '<section class="card run-actions">' + "".join(forms) + "</section>"


def rerun_choices(snapshot: RunSnapshot) -> list[str]:
    """The run's top-level operations as its timeline shows them, in program order.

    What ``POST /runs/{id}/rerun``'s ``from`` takes (``engine.reruns``): a nested operation
    re-runs its top-level one, so only those are offered.
    """
    header = snapshot.header
    root_scope = pos_prefix(header.generation)
    prefix = id_prefix(header.run_id, header.generation)
    records = group_entries(snapshot.entries, snapshot.effects)
    return [
        records[p].op_id.removeprefix(prefix)
        for p in sorted(records)
        if p.startswith(root_scope)
        and not p.startswith("~")
        and "/" not in p.removeprefix(root_scope)
        and records[p].kind is not OpKind.MIGRATION
    ]


def _rerun_fields(choices: Sequence[str], chosen: str) -> str:
    """The re-run form's fields: from where, which version, whether effects are repeated."""
    options = "".join(
        f'<option value="{e(value)}"{" selected" if value == chosen else ""}>{e(label)}</option>'
        for value, label in (
            (reruns.FAILED, "failed (the operation that failed or never finished)"),
            (reruns.START, "start (nothing copied)"),
            *((c, c) for c in choices),
        )
    )
    return (
        '<label for="rerun-from">From</label>'
        f'<select id="rerun-from" name="from">{options}</select>'
        '<label for="rerun-version">Version (empty: the deployed one)</label>'
        '<input id="rerun-version" name="version" maxlength="80">'
        '<label for="rerun-repeat"><input id="rerun-repeat" name="repeat_effects" '
        'type="checkbox" value="true"> Repeat side effects</label>'
        '<p class="muted warn">Ticked, every tool call at or after the chosen operation is made '
        "again: a charge charges again, an email is sent again. Unticked, the calls already "
        "made are reused. Preview lists them.</p>"
    )


def _rerun_form(snapshot: RunSnapshot, root: str) -> str:
    """Re-runs a finished run (``POST /console/runs/{id}/rerun``); none for any other run."""
    header = snapshot.header
    if header.status not in reruns.RERUNNABLE:
        return ""
    action = f"{root}console/runs/{quote(header.run_id, safe='')}/rerun"
    chosen = reruns.FAILED if header.status is RunStatus.FAILED else reruns.START
    return (
        '<section class="card run-actions">'
        f'<form method="post" action="{e(action)}" class="rerun"><h2>Re-run</h2>'
        '<p class="muted">A new run of this agent that replays the operations before the one '
        "chosen and runs from there.</p>"
        f"{_rerun_fields(rerun_choices(snapshot), chosen)}"
        '<div class="actions"><button type="submit" name="dry_run" value="true" '
        'class="preview">Preview</button><button class="danger" type="submit">Re-run</button>'
        "</div></form></section>"
    )


def _origin(header: RunHeader, root: str) -> str:
    """Where a rerun came from: "Re-run of <the original> from <operation>" (else nothing)."""
    rerun = header.rerun
    if not isinstance(rerun, dict) or not rerun.get("of"):
        return ""
    repeated = " (side effects repeated)" if rerun.get("repeat_effects") else ""
    return (
        f'<p class="rerun-of">Re-run of {run_link(root, str(rerun["of"]))} from '
        f"<code>{e(rerun.get('from'))}</code>{e(repeated)}</p>"
    )


def render_rerun_preview(
    run_id: str,
    described: dict[str, Any],
    *,
    from_: str,
    version: str | None,
    repeat_effects: bool,
    root: str,
) -> str:
    """What a re-run would do (a dry run, nothing written), with a form to make it.

    Args:
        run_id: The run re-run.
        described: The plan, as ``RerunPlan.describe`` says it (requests scrubbed).
        from_: The ``from`` asked for (sent again by the confirm form).
        version: The version asked for (None: the deployed one).
        repeat_effects: Whether the side effects would be made again.
        root: The relative prefix to the Api's root (``console_page.root_of``).

    Returns:
        A complete HTML document; every value is escaped.
    """
    effects = described.get("effects_after") or []
    chain = described.get("chain") or []
    rows = [
        ("Re-run of", run_link(root, run_id)),
        ("From", f"<code>{e(described.get('rerun_from'))}</code>"),
        ("Version", e(version or "the deployed one")),
        ("Operations copied", e(described.get("copied_operations", 0))),
        ("Chain", "<br>".join(run_link(root, str(c)) for c in chain) or "—"),
    ]
    fate = "made again" if repeat_effects else "reused (not made again)"
    listed = "".join(
        f"<tr><td>{run_link(root, str(x.get('run_id')))}</td>"
        f"<td><code>{e(x.get('operation_id'))}</code></td><td>{e(x.get('tool'))}</td>"
        f"<td>{compact(x.get('request'))}</td><td><code>{e(x.get('idempotency_key'))}</code></td>"
        f"<td><code>{e(x.get('external_id') or '—')}</code></td></tr>"
        for x in effects
    )
    table = (
        '<div class="scroll"><table class="effects"><thead><tr><th>Run</th><th>Operation</th>'
        "<th>Tool</th><th>Request</th><th>Idempotency key</th><th>External id</th></tr>"
        f"</thead><tbody>{listed}</tbody></table></div>"
        if effects
        else '<p class="muted">None: no side effect was made at or after this operation.</p>'
    )
    warning = (
        '<p class="err">Repeat side effects is ticked: each of these is made again.</p>'
        if repeat_effects and effects
        else ""
    )
    action = f"{root}console/runs/{quote(run_id, safe='')}/rerun"
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{e(value)}">'
        for name, value in (
            ("from", from_),
            ("version", version or ""),
            ("repeat_effects", "true" if repeat_effects else ""),
        )
        if value
    )
    confirm = (
        f'<form method="post" action="{e(action)}" class="rerun-confirm">{hidden}'
        '<div class="actions"><button class="danger" type="submit">Re-run</button>'
        f'<a href="{e(root)}console/runs/{e(quote(run_id, safe=""))}">Back to the run</a>'
        "</div></form>"
    )
    body = (
        f'<section class="card preview"><h1>Preview: re-run <code>{e(run_id)}</code></h1>'
        '<p class="muted">Nothing was written. Re-run below makes it.</p>'
        f"{facts(rows)}</section>"
        f'<section class="card effects"><h2>Side effects that would be {e(fate)}</h2>'
        f"{warning}{table}</section>"
        f'<section class="card">{confirm}</section>'
    )
    return page(f"Re-run {run_id} (preview)", body, root=root, here="runs")


def render_timeline_page(
    snapshot: RunSnapshot,
    texts: Sequence[tuple[str, str]],
    *,
    root: str,
    children: Sequence[str] = (),
    done: str | None = None,
    follow: bool = False,
    flow: Mapping[str, Any] | None = None,
) -> str:
    """One run: status, error, what it waits on, its deadlines, children and every operation.

    Args:
        snapshot: The run as loaded from the journal (a consistent read).
        texts: ``(operation_id, text)`` the run streamed (``local.console.streamed_texts``).
        root: The relative prefix to the Api's root (``console_page.root_of``).
        children: Child run ids to link (``child_run_ids``).
        done: A ``NOTICES`` code to confirm.
        follow: Whether the page reloads itself every 3 seconds (no script: a meta refresh).
        flow: The run's flow control (``admin.flow_views.run_flow``; None: not shown).

    Returns:
        A complete HTML document; every value is escaped.
    """
    header = snapshot.header
    records = group_entries(snapshot.entries, snapshot.effects)
    by_op = dict(texts)
    waiting: Any = header.waiting_on
    stop = header.cancel_requested
    rows = [
        ("Status", pill(header.status.value)),
        ("Agent", e(header.agent)),
        ("Versions", f"<code>{e(json.dumps(header.versions, sort_keys=True))}</code>"),
        ("Tenant", e(header.tenant)),
        ("Created", when(header.created_at_ms)),
        ("Updated", when(header.updated_at_ms)),
        ("Wakes at", when(header.wake_at_ms)),
        ("Execution deadline", when(deadline_ms(header))),
        (
            "Waiting on",
            f"<code>{e(json.dumps(waiting, sort_keys=True))}</code>" if waiting else "—",
        ),
    ]
    if header.parent_run_id:
        rows.append(("Parent run", run_link(root, header.parent_run_id)))
    if children:
        rows.append(("Child runs", "<br>".join(run_link(root, c) for c in children)))
    if stop:
        at = stop.get("at_ms")
        rows.append(
            (
                "Stop requested",
                f"{e(stop.get('mode'))} by <code>{e(stop.get('by'))}</code> at "
                f"{when(at if isinstance(at, int) else None)}: {e(stop.get('reason') or '')}",
            )
        )
    if header.error is not None:
        error = header.error
        rows.append(
            (
                "Error",
                f'<span class="err">{e(error.type)}: {e(error.message)}</span>{_traceback(error)}',
            )
        )
    summary = (
        f'<section class="card"><h1>Run <code>{e(header.run_id)}</code></h1>'
        f"{_origin(header, root)}{facts(rows)}</section>"
    )
    io_rows = [("Input", compact(header.input or "null"))]
    if header.result is not None:
        io_rows.append(("Result", compact(header.result)))
    elif header.error is not None:
        io_rows.append(("Error", f'<span class="err">{e(header.error.type)}</span> (above)'))
    history = f"{root}runs/{quote(header.run_id, safe='')}/history?format=json"
    io_rows.append(("History", f'<a href="{e(history)}" type="application/json">as JSON</a>'))
    io = f'<section class="card io">{facts(io_rows)}</section>'
    ops = "".join(
        _operation_row(records[p], p, header.run_id, by_op, root)
        for p in sorted(records)
        if records[p].kind is not OpKind.MIGRATION
    )
    timeline = (
        '<section class="card"><h2>Timeline</h2><div class="scroll">'
        '<table class="timeline"><thead><tr>'
        "<th>Operation</th><th>Kind</th><th>Name</th><th>State</th><th>Attempts</th>"
        "<th>Started<br>ended</th><th>Took</th><th>Waits, effects, children, text</th>"
        f"</tr></thead><tbody>{ops}</tbody></table></div>"
        + ("" if ops else '<p class="muted">No operation recorded yet.</p>')
        + "</section>"
    )
    live = not header.status.terminal
    base = f"{root}console/runs/{quote(header.run_id, safe='')}"
    toggle = (
        f'<p><a href="{e(base)}">Stop following</a></p>'
        if follow
        else f'<p><a href="{e(base)}?follow=1">Follow (reload every 3 s)</a></p>'
        if live
        else ""
    )
    body = (
        notice(done)
        + summary
        + flow_card(flow, header.run_id, root)
        + io
        + toggle
        + _actions(snapshot, root)
        + _rerun_form(snapshot, root)
        + timeline
    )
    return page(
        f"Run {header.run_id}",
        body,
        root=root,
        here="runs",
        refresh_seconds=3 if follow and live else None,
    )
