"""HTML of the run console (``/console``): the layout, the runs list and the approvals page.

Like ``api.approval_page``: server-rendered, no front-end build, nothing loaded from elsewhere,
no scripts. One stylesheet, inline and allowed by its hash in the Content-Security-Policy
(``CONSOLE_HEADERS``); forms post to the same origin only. Every value that comes from a run,
an agent or a caller is escaped (``html.escape``, ``quote=True`` in attributes), and every link
to an id is percent-encoded. Times are full ISO-8601 dates with their timezone (UTC).

Links are relative to the page (``root``: ``./`` or ``../`` repeated), so they work under an
API Gateway stage prefix (``/Prod/console``), a custom domain, local mode and a signing proxy.
The timeline of one run is in ``api.console_timeline``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from api.approval_page import page_headers
from durable_agents.core.clock import iso
from durable_agents.core.models import RunHeader, RunStatus, SideEffectRecord, WaitRecord
from durable_agents.engine.effects.records import REUSED_FROM, unclear_outcome, why

STYLE = """
:root{color-scheme:light;--fg:#1c2024;--muted:#5b6470;--line:#dfe3e8;--bg:#f4f5f7;--card:#fff;
--code:#f6f8fa;--ok:#1a7f37;--ok-bg:#edf8f0;--no:#b42318;--no-bg:#fef3f2;--warn:#9a6700;
--warn-bg:#fff8e6;--info:#0b5cad;--info-bg:#eef5fd}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
header.top{background:#1c2024;color:#fff;padding:.6rem 1rem;display:flex;gap:1.25rem;
align-items:center;flex-wrap:wrap}
header.top a{color:#fff;text-decoration:none;font-weight:600}
header.top a.here{text-decoration:underline}
header.top .brand{font-weight:700;margin-right:.5rem}
main{max-width:90rem;margin:0 auto;padding:1rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:1rem 1.25rem;
margin-bottom:1rem}
h1{font-size:1.3rem;margin:0 0 .5rem;overflow-wrap:anywhere}
h2{font-size:1.05rem;margin:0 0 .5rem}
a{color:var(--info)}
code,pre,time{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.83rem}
code{overflow-wrap:anywhere}
pre{margin:.25rem 0;white-space:pre-wrap;overflow-wrap:anywhere;background:var(--code);
border:1px solid var(--line);border-radius:6px;padding:.5rem .75rem;max-height:24rem;overflow:auto}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;vertical-align:top;padding:.4rem .5rem;border-bottom:1px solid var(--line)}
th{color:var(--muted);font-size:.78rem;text-transform:uppercase;letter-spacing:.03em}
td.num{text-align:right;white-space:nowrap}
td.detail{min-width:20rem}
td time{white-space:nowrap}
td.opid{min-width:12rem}
.scroll{overflow-x:auto}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem;margin:0}
dt{color:var(--muted);font-size:.85rem}
dd{margin:0;min-width:0;overflow-wrap:anywhere}
.pill{display:inline-block;white-space:nowrap;border-radius:999px;padding:.05rem .55rem;
font-size:.72rem;font-weight:700;letter-spacing:.03em;text-transform:uppercase;background:#eef0f3;color:#4a5361}
.s-succeeded,.s-committed,.s-approved{background:var(--ok-bg);color:var(--ok)}
.s-failed,.s-cancelled,.s-terminated,.s-timed_out,.s-abandoned,.s-rejected,.s-unknown
{background:var(--no-bg);color:var(--no)}
.s-suspended,.s-paused,.s-version_unavailable,.s-in_review,.s-pending,.s-waiting,.s-retrying
{background:var(--warn-bg);color:var(--warn)}
.s-running,.s-prepared{background:var(--info-bg);color:var(--info)}
.s-queued{background:#f3effc;color:#6639ba}
.s-budget_exceeded{background:#fff1e5;color:#b54708;border:1px solid #f5b27a}
form.filters{display:flex;flex-wrap:wrap;gap:.75rem;align-items:flex-end}
label{display:block;font-size:.8rem;color:var(--muted);font-weight:600}
input,select,textarea{font:inherit;padding:.3rem .5rem;border:1px solid #c4cad3;border-radius:6px;
background:#fff;color:inherit}
textarea{width:100%;min-height:3rem}
button{font:inherit;font-weight:600;padding:.35rem 1rem;border-radius:6px;cursor:pointer;
border:2px solid var(--info);background:var(--info);color:#fff}
button.danger{background:#fff;color:var(--no);border-color:var(--no)}
button.ok{background:var(--ok);border-color:var(--ok)}
.actions{display:flex;flex-wrap:wrap;gap:.5rem;margin-top:.5rem}
.run-actions{display:grid;grid-template-columns:repeat(auto-fit,minmax(16rem,1fr));gap:1rem 1.5rem}
.muted{color:var(--muted)}
.banner{border-radius:8px;padding:.6rem .9rem;margin-bottom:1rem;border:1px solid #a6dbb4;
background:var(--ok-bg)}
.err{color:var(--no)}
.op-depth-1{padding-left:1.5rem}.op-depth-2{padding-left:3rem}.op-depth-3{padding-left:4.5rem}
.pager{display:flex;gap:1rem;margin-top:.75rem}
footer{color:var(--muted);font-size:.8rem;text-align:center;margin:1rem 0}
"""

CONSOLE_HEADERS = page_headers(STYLE)  # only the console's own stylesheet; forms post to the Api
"""Headers every console page carries (the approval page's, with the console's stylesheet)."""

DEFAULT_LIMIT = 25
"""Runs a list page shows when the query does not say."""

NOTICES = {
    "cancel-requested": "Cancel requested: the run stops at its next operation.",
    "terminate-requested": "Terminate requested: the run stops without running its code again.",
    "redriven": "Run re-driven: it resumes (a PAUSED run) or is woken (an active one).",
    "event-sent": "Event sent: recorded for the run, which takes it with wait_for_event.",
    "run-started": "Run started.",
    "run-start-repeated": "This form had already started this run: it is shown, nothing new.",
    "rerun-started": "Re-run started: a new run, which replays the original's operations before "
    "the one chosen and reuses the side effects it already made.",
    "rerun-repeated": "This re-run had already been made with these options: it is shown, "
    "nothing new.",
    "approval-approved": "Approval recorded: approved. The run continues.",
    "approval-rejected": "Approval recorded: rejected. The run continues.",
    "review-decided": "Review decision recorded. The run continues.",
    "budget-extended": "Budget extended: the runs it paused go on (who and why are recorded).",
}
"""The confirmations a console action redirects to (fixed texts: nothing from the query)."""


def e(value: Any) -> str:
    """``value`` as text, escaped for HTML content and attributes."""
    return escape("" if value is None else str(value), quote=True)


def root_of(path: str) -> str:
    """The relative prefix from ``path`` to the Api's root (``./``, ``../``, ``../../``, ...).

    >>> root_of("/console"), root_of("/console/approvals"), root_of("/runs/r-1/history")
    ('./', '../', '../../')
    """
    depth = len([s for s in path.split("/") if s])
    return "./" if depth <= 1 else "../" * (depth - 1)


def run_link(root: str, run_id: str) -> str:
    """A link to a run's timeline page (the id percent-encoded and escaped)."""
    return (
        f'<a href="{e(root)}console/runs/{e(quote(run_id, safe=""))}"><code>{e(run_id)}</code></a>'
    )


def when(ms: int | None) -> str:
    """A full ISO-8601 date with timezone in a ``<time>`` element (``—`` when there is none)."""
    text = iso(ms)
    return (
        f'<time datetime="{e(text)}">{e(text)}</time>' if text else '<span class="muted">—</span>'
    )


def pill(state: str) -> str:
    """A status badge."""
    return f'<span class="pill s-{e(state.lower())}">{e(state.lower())}</span>'


def waited(ms: int | None) -> str:
    """A duration in words: ``—`` for none, else seconds, minutes or hours (escaped-safe).

    >>> waited(None), waited(1_500), waited(125_000), waited(7_380_000)
    ('—', '1.5 s', '2 min 5 s', '2 h 3 min')
    """
    if ms is None:
        return "—"
    seconds = max(ms, 0) / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def dollars(value: Any) -> str:
    """A dollar amount (``$0.0123``), or ``—`` when there is none.

    >>> dollars(0.01234), dollars(None), dollars(12)
    ('$0.0123', '—', '$12.0000')
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return f"${value:,.4f}"


def used_of(used: Any, limit: Any) -> str:
    """``used / limit`` (``used / no limit`` when there is none), as text to escape."""
    return f"{used} / {'no limit' if limit is None else limit}"


def pretty(value: Any) -> str:
    """A JSON value (or a JSON text), indented, escaped, in ``<pre>``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return f"<pre>{e(value)}</pre>"
    return f"<pre>{e(json.dumps(value, indent=2, ensure_ascii=False, default=str))}</pre>"


COMPACT_CHARS = 200
"""Compact JSON longer than this is folded in a ``<details>`` (``compact``)."""


def compact(value: Any) -> str:
    """A JSON value (or a JSON text) as compact JSON, escaped; a long one folded.

    Up to ``COMPACT_CHARS`` characters: one ``<code>`` line. Longer: a ``<details>`` whose
    summary is its beginning and whose body is the value indented (``pretty``); the browser
    folds and unfolds it (no script).

    >>> compact('{"a": [1, 2]}')
    '<code class="json">{&quot;a&quot;:[1,2]}</code>'
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return (
                f'<code class="json">{e(value)}</code>'
                if len(value) <= COMPACT_CHARS
                else (
                    f"<details><summary><code>{e(value[:80])}…</code></summary>"
                    f"<pre>{e(value)}</pre></details>"
                )
            )
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    if len(text) <= COMPACT_CHARS:
        return f'<code class="json">{e(text)}</code>'
    return (
        f'<details class="json"><summary><code>{e(text[:80])}…</code> '
        f'<span class="muted">({len(text):,} characters)</span></summary>{pretty(value)}</details>'
    )


def collapsed_traceback(text: str | None) -> str:
    """A recorded traceback, collapsed in a ``<details>`` (none if there is none).

    Escaped like every recorded value: a message is anyone's text. Folded and unfolded by the
    browser itself (the console has no JavaScript).
    """
    if not text:
        return ""
    return f'<details class="traceback"><summary>traceback</summary><pre>{e(text)}</pre></details>'


def effect_notes(record: SideEffectRecord, root: str | None = None) -> list[tuple[str, str]]:
    """A tool call's note as fact rows: why it is parked, and its unclear outcome's story.

    A call a rerun took from its chain's ledger instead of making it again (its note's
    ``reused_from``, ``durable_agents.engine.reruns``) says which run's call it reused: a link
    to that run when ``root`` is given.
    """
    rows: list[tuple[str, str]] = []
    note = record.note
    reused = note.get(REUSED_FROM) if isinstance(note, Mapping) else None
    if isinstance(reused, dict):
        source = str(reused.get("run_id") or "")
        run = run_link(root, source) if root is not None and source else f"<code>{e(source)}</code>"
        rows.append(
            (
                "Reused from",
                f"{run} call <code>{e(reused.get('operation_id'))}</code> (key "
                f"<code>{e(reused.get('key'))}</code>): not made again",
            )
        )
    reason = why(record.note)
    if reason:
        rows.append(("Why", e(reason)))
    unclear = unclear_outcome(record)
    if unclear is not None and unclear["reason"] != reason:
        rows.append(("Unclear outcome", e(unclear["reason"])))
    if unclear is not None and unclear["traceback"]:
        rows.append(("Where it failed", collapsed_traceback(unclear["traceback"])))
    return rows


def facts(rows: Sequence[tuple[str, str]]) -> str:
    """A definition list of (label, already-escaped HTML) rows."""
    return "<dl>" + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def page(title: str, body: str, *, root: str, here: str, refresh_seconds: int | None = None) -> str:
    """A complete console document: the navigation, then ``body`` (already escaped HTML)."""
    current = ' class="here"'
    nav = "".join(
        f'<a href="{e(root)}{href}"{current if key == here else ""}>{label}</a>'
        for key, href, label in (
            ("runs", "console", "Runs"),
            ("approvals", "console/approvals", "Approvals &amp; reviews"),
        )
    )
    refresh = (
        f'<meta http-equiv="refresh" content="{int(refresh_seconds)}">' if refresh_seconds else ""
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta name="robots" content="noindex,nofollow">{refresh}'
        f"<title>{e(title)} · durable-agents console</title><style>{STYLE}</style></head>"
        f'<body><header class="top"><span class="brand">durable-agents</span>{nav}</header>'
        f"<main>{body}<footer>durable-agents · run console</footer></main></body></html>\n"
    )


def notice(code: str | None) -> str:
    """The confirmation banner for a known ``done`` code (nothing for an unknown one)."""
    text = NOTICES.get(code or "")
    return f'<div class="banner" role="status">{e(text)}</div>' if text else ""


def render_runs_page(
    runs: Sequence[RunHeader],
    *,
    filters: Mapping[str, str],
    next_cursor: str | None,
    root: str,
    agents: Sequence[str] = (),
    start_key: str | None = None,
    flow: Mapping[str, Any] | None = None,
) -> str:
    """The runs list, newest start first: a filter form, a table, a next link; a start form.

    The filters: status, agent, start time, sub-agent runs, page size (QUEUED and
    BUDGET_EXCEEDED among the statuses, like every other).

    Args:
        runs: One page of runs.
        filters: The query parameters of this page that are filters (to keep them when paging).
        next_cursor: The cursor of the next page, or None on the last page.
        root: The relative prefix to the Api's root (``root_of``).
        agents: The agents the Api can start (a choice); none known: a text field.
        start_key: The idempotency key of this page's start form (None: no start form).
        flow: The flow overview (``admin.flow_views.flow_overview``) for operators, shown
            after the runs; ``{"unavailable": True}`` when it could not be read; None: not
            shown (a tenant's caller: its queues are keyed by other tenants too).

    Returns:
        A complete HTML document; every value is escaped.
    """
    status = filters.get("status", "")
    options = "".join(
        f'<option value="{s.value}"{" selected" if status.upper() == s.value else ""}>'
        f"{s.value.lower()}</option>"
        for s in RunStatus
    )
    form = (
        '<form class="filters" method="get" action="console">'
        f'<div><label for="status">Status</label><select id="status" name="status">'
        f'<option value="">any</option>{options}</select></div>'
        '<div><label for="agent">Agent</label>'
        f'<input id="agent" name="agent" value="{e(filters.get("agent", ""))}" '
        'maxlength="80"></div><div><label for="since">Started since</label>'
        f'<input id="since" name="since" value="{e(filters.get("since", ""))}" '
        'maxlength="40" placeholder="2026-12-01T00:00:00Z"></div>'
        '<div><label for="children">Sub-agent runs</label>'
        f'<input id="children" name="children" type="checkbox" value="true"'
        f"{' checked' if filters.get('children') == 'true' else ''}></div>"
        '<div><label for="limit">Per page</label>'
        f'<input id="limit" name="limit" type="number" min="1" max="100" '
        f'value="{e(filters.get("limit") or DEFAULT_LIMIT)}"></div>'
        '<div><button type="submit">Show</button></div></form>'
    )
    rows = "".join(
        "<tr>"
        f"<td>{run_link(root, r.run_id)}"
        + (
            f'<br><span class="muted">child of {run_link(root, r.parent_run_id)}</span>'
            if r.parent_run_id
            else ""
        )
        + f"</td><td>{e(r.agent)}</td><td>{pill(r.status.value)}</td>"
        f"<td>{when(r.created_at_ms)}</td><td>{when(r.updated_at_ms)}</td>"
        f"<td><code>{e((r.versions or {}).get('workflow_version', ''))}</code></td></tr>"
        for r in runs
    )
    table = (
        "<table><thead><tr><th>Run</th><th>Agent</th><th>Status</th><th>Created</th>"
        f"<th>Updated</th><th>Version</th></tr></thead><tbody>{rows}</tbody></table>"
        if runs
        else '<p class="muted">No runs match these filters on this page.</p>'
    )
    pager = '<div class="pager">'
    if filters.get("cursor"):
        first = {k: v for k, v in filters.items() if k != "cursor" and v}
        pager += f'<a href="console?{e(urlencode(first))}">First page</a>'
    if next_cursor:
        following = {**{k: v for k, v in filters.items() if v}, "cursor": next_cursor}
        pager += f'<a rel="next" href="console?{e(urlencode(following))}">Next page</a>'
    pager += "</div>"
    body = (
        f'<section class="card"><h1>Runs</h1>{form}</section>'
        f'<section class="card">{table}{pager}</section>'
        + ("" if start_key is None else _start_form(agents, start_key, root))
        + ("" if flow is None else render_flow_overview(flow))
    )
    return page("Runs", body, root=root, here="runs")


def _count(value: Any) -> str:
    return e(value if isinstance(value, int) and not isinstance(value, bool) else "—")


def render_flow_overview(flow: Mapping[str, Any]) -> str:
    """Flow control for operators: queues and slots per agent and key, then rate limits.

    Each limited agent's running and queued runs, overall and per key, with the oldest wait;
    each rate limit's use this period and its waits today (``GET /flow``'s figures).
    """
    if flow.get("unavailable"):
        return (
            '<section class="card flow"><h2>Flow control</h2>'
            '<p class="err">The flow control figures could not be read; the runs above are '
            "current.</p></section>"
        )
    rows: list[str] = []
    for agent in flow.get("agents") or []:
        limit = agent.get("limit")
        per_key = agent.get("per_key")
        limits = "no overall limit" if limit is None else f"{limit} at once"
        if per_key is not None:
            limits += f", {per_key} per {agent.get('key')}"
        rows.append(
            f'<tr class="flow-agent" data-agent="{e(agent.get("agent"))}">'
            f"<td><strong>{e(agent.get('agent'))}</strong></td>"
            f'<td class="muted">all keys (by <code>{e(agent.get("key"))}</code>)</td>'
            f'<td class="num">{_count(agent.get("running"))}</td><td>{e(limits)}</td>'
            f'<td class="num">{_count(agent.get("queued"))}</td>'
            f'<td class="num">{e(waited(agent.get("oldest_wait_ms")))}</td></tr>'
        )
        for key in agent.get("keys") or []:
            rows.append(
                '<tr class="flow-key"><td></td>'
                f'<td class="op-depth-1"><code>{e(key.get("key") or "(none)")}</code></td>'
                f'<td class="num">{_count(key.get("running"))}</td>'
                f"<td>{e('' if per_key is None else f'{per_key} at once')}</td>"
                f'<td class="num">{_count(key.get("queued"))}</td>'
                f'<td class="num">{e(waited(key.get("oldest_wait_ms")))}</td></tr>'
            )
    queues = (
        '<div class="scroll"><table class="flow-queues"><thead><tr><th>Agent</th><th>Key</th>'
        "<th>Running</th><th>Limit</th><th>Queued</th><th>Oldest wait</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
        if rows
        else '<p class="muted">No agent declares a concurrency limit.</p>'
    )
    limits_rows = "".join(
        f'<tr class="rate-limit"><td><code>{e(r.get("limiter"))}</code></td>'
        f"<td>{e(used_of(r.get('used_requests'), r.get('requests')))}</td>"
        f"<td>{e(used_of(r.get('used_tokens'), r.get('tokens')))}</td>"
        f"<td>{e(r.get('per_seconds'))} s</td>"
        f'<td class="num">{_count(r.get("waits_today"))}</td></tr>'
        for r in flow.get("rate_limits") or []
    )
    rates = (
        '<div class="scroll"><table class="rate-limits"><thead><tr><th>Limiter</th>'
        "<th>Requests (used / limit)</th><th>Tokens (used / limit)</th><th>Period</th>"
        f"<th>Waits today</th></tr></thead><tbody>{limits_rows}</tbody></table></div>"
        if limits_rows
        else '<p class="muted">No rate limit is declared.</p>'
    )
    return (
        '<section class="card flow"><h2>Flow control</h2>'
        f"<h3>Queues and slots</h3>{queues}<h3>Rate limits (this period)</h3>{rates}</section>"
    )


def _start_form(agents: Sequence[str], key: str, root: str) -> str:
    """Starts a run (``POST /console/runs``): agent, JSON input, this form's idempotency key."""
    if agents:
        choices = "".join(f'<option value="{e(a)}">{e(a)}</option>' for a in agents)
        agent = f'<select id="start-agent" name="agent" required>{choices}</select>'
    else:
        agent = '<input id="start-agent" name="agent" required maxlength="80">'
    return (
        '<section class="card"><h2>Start a run</h2>'
        f'<form method="post" action="{e(root)}console/runs" class="start">'
        f'<label for="start-agent">Agent</label>{agent}'
        '<label for="start-input">Input, as JSON (empty: null)</label>'
        '<textarea id="start-input" name="input" maxlength="200000"></textarea>'
        f'<input type="hidden" name="idempotency_key" value="{e(key)}">'
        '<div class="actions"><button type="submit">Start run</button></div></form></section>'
    )


def _approval_card(record: WaitRecord, root: str) -> str:
    details = record.details
    action = f"{root}console/approvals/{quote(record.wait_id, safe='')}"
    approvers = ", ".join(str(a) for a in details.get("approvers", [])) or "nobody"
    return (
        f'<section class="card approval" id="approval-{e(record.wait_id)}" '
        f'data-run="{e(record.run_id)}">'
        f"<h2>{e(details.get('summary') or record.name)}</h2>"
        + facts(
            [
                ("Run", run_link(root, record.run_id)),
                ("Agent", e(details.get("agent", ""))),
                ("Step", f"<code>{e(record.name)}</code>"),
                ("Approvers", e(approvers)),
                ("Requested", when(record.created_at_ms)),
                ("Deadline", when(record.deadline_ms)),
            ]
        )
        + pretty(str(details.get("request", "null")))
        + f'<form method="post" action="{e(action)}">'
        f'<label for="c-{e(record.wait_id)}">Comment</label>'
        f'<textarea id="c-{e(record.wait_id)}" name="comment" maxlength="2000"></textarea>'
        '<div class="actions"><button class="ok" type="submit" name="decision" value="approve">'
        'Approve</button><button class="danger" type="submit" name="decision" value="reject">'
        "Reject</button></div></form></section>"
    )


def _review_card(record: SideEffectRecord, root: str) -> str:
    action = f"{root}console/reviews/{quote(record.operation_id, safe='')}"
    return (
        f'<section class="card review">'
        f"<h2>Tool call <code>{e(record.tool)}</code> {pill(record.status.value)}</h2>"
        + facts(
            [
                ("Run", run_link(root, record.run_id)),
                ("Operation", f"<code>{e(record.operation_id)}</code>"),
                ("Idempotency key", f"<code>{e(record.idempotency_key)}</code>"),
                ("Attempt", e(record.attempt)),
                ("External id", f"<code>{e(record.external_id or '—')}</code>"),
                *effect_notes(record, root),
                ("Prepared", when(record.prepared_at_ms)),
                ("Updated", when(record.updated_at_ms)),
            ]
        )
        + pretty(record.canonical_request)
        + f'<form method="post" action="{e(action)}">'
        '<label>Result, as JSON (for "It happened": what the tool returned)'
        '<textarea name="result" maxlength="20000"></textarea></label>'
        '<label>External id (when it happened)<input name="external_id" maxlength="256">'
        '</label><label>Comment<textarea name="comment" maxlength="2000"></textarea></label>'
        '<div class="actions">'
        '<button class="ok" type="submit" name="decision" value="committed">It happened</button>'
        '<button type="submit" name="decision" value="retry">Retry it</button>'
        '<button class="danger" type="submit" name="decision" value="abandon">Abandon</button>'
        "</div></form></section>"
    )


def render_pending_page(
    approvals: Sequence[WaitRecord],
    reviews: Sequence[SideEffectRecord],
    *,
    root: str,
    done: str | None = None,
    more_approvals: str | None = None,
    more_reviews: str | None = None,
    paged: bool = False,
) -> str:
    """Pending approvals (approve / reject) and tool calls in review (committed / retry / abandon).

    Args:
        approvals: Pending approvals of the caller's tenant (one page).
        reviews: Tool calls of the caller's tenant waiting for a person (one page).
        root: The relative prefix to the Api's root (``root_of``).
        done: A ``NOTICES`` code to confirm (an unknown one shows nothing).
        more_approvals: The relative link to the next page of approvals, if there is one.
        more_reviews: The relative link to the next page of reviews, if there is one.
        paged: Whether this is a later page (a link back to the first is shown).

    Returns:
        A complete HTML document; every value is escaped.
    """

    def pager(more: str | None, what: str) -> str:
        links = '<a href="approvals">First page</a>' if paged else ""
        if more is not None:
            links += f'<a rel="next" href="{e(more)}">Next page of {what}</a>'
        return f'<div class="pager">{links}</div>' if links else ""

    def empty(none: str, more: str | None) -> str:
        # A page of another tenant's backlog holds nothing of the caller's: say so honestly.
        text = none if more is None and not paged else "None on this page."
        return f'<p class="card muted">{text}</p>'

    body = notice(done) + "<h1>Pending approvals</h1>"
    body += "".join(_approval_card(a, root) for a in approvals) or empty(
        "No approval is waiting.", more_approvals
    )
    body += pager(more_approvals, "approvals")
    body += "<h1>Tool calls in review</h1>"
    body += "".join(_review_card(r, root) for r in reviews) or empty(
        "No tool call is waiting for review.", more_reviews
    )
    body += pager(more_reviews, "tool calls")
    return page("Approvals & reviews", body, root=root, here="approvals")
