"""HTML for people deciding an approval in a browser (a signed link, or a signed-in page).

No front-end build and nothing loaded from elsewhere: one document with its stylesheet inline,
no scripts, no images, no fonts. The Api sends it with a Content-Security-Policy that allows only
that exact stylesheet (by hash) and form posts to the same origin, ``Referrer-Policy:
same-origin`` (``no-referrer`` on a link's page: its token is in the page URL) and
``Cache-Control: no-store``. Every value from the record is escaped.

``render_approval_page`` and ``render_message_page`` are the entry points the Api calls; restyle
freely, keeping their signatures and the form fields (``decision`` = ``approve`` | ``reject``,
``comment``, hidden ``token``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from html import escape
from typing import Any, Literal

from durable_agents.core.clock import iso
from durable_agents.core.models import WaitRecord, WaitStatus

Tone = Literal["info", "success", "warning", "error"]

MAX_COMMENT_CHARS = 2000
LONG_SUMMARY_CHARS = 80

_STYLE = """
:root{color-scheme:light;--fg:#1c2024;--muted:#5b6470;--line:#dfe3e8;--bg:#f4f5f7;
--card:#fff;--code:#f6f8fa;--ok:#1a7f37;--ok-dark:#116329;--no:#b42318;--no-bg:#fef3f2;
--warn:#9a6700;--warn-bg:#fff8e6;--info:#0b5cad;--info-bg:#eef5fd;--ok-bg:#edf8f0}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%;text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--fg);line-height:1.5;
font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:42rem;margin:0 auto;padding:1.5rem 1rem 3rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:12px;
padding:1.5rem;box-shadow:0 1px 2px rgba(16,24,40,.05)}
.card+.card{margin-top:1rem}
.eyebrow{display:flex;align-items:center;justify-content:space-between;gap:.75rem;
margin:0 0 .5rem;color:var(--muted);font-size:.8125rem;font-weight:600;letter-spacing:.04em;
text-transform:uppercase}
h1{margin:0 0 .25rem;font-size:1.375rem;line-height:1.3;overflow-wrap:anywhere}
h1.long{font-size:1.125rem;font-weight:600}
h2{margin:0 0 .75rem;font-size:1rem}
h2.space{margin-top:1.25rem}
p{margin:.5rem 0}
.lead{color:var(--muted);margin:.375rem 0 0}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;
font-size:.875rem}
code{overflow-wrap:anywhere}
pre{margin:0;white-space:pre-wrap;overflow-wrap:anywhere;background:var(--code);
border:1px solid var(--line);border-radius:8px;padding:.875rem 1rem;overflow:auto;
line-height:1.45;tab-size:2}
.request{border-left:4px solid var(--info)}
.caption{margin:.5rem 0 0;color:var(--muted);font-size:.875rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.5rem 1.25rem;margin:0}
dt{color:var(--muted);font-size:.875rem;padding-top:.1rem}
dd{margin:0;min-width:0;overflow-wrap:anywhere}
ul.who{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:.375rem}
ul.who li{background:var(--code);border:1px solid var(--line);border-radius:999px;
padding:.05rem .6rem;font-size:.875rem}
.pill{display:inline-block;border-radius:999px;padding:.15rem .65rem;font-size:.75rem;
letter-spacing:.04em;text-transform:uppercase;font-weight:700}
.pill-pending{background:var(--warn-bg);color:var(--warn)}
.pill-approved{background:var(--ok-bg);color:var(--ok)}
.pill-rejected{background:var(--no-bg);color:var(--no)}
.pill-expired{background:#eef0f3;color:#4a5361}
label{display:block;font-weight:600;margin-bottom:.25rem}
.hint{color:var(--muted);font-size:.875rem;font-weight:400}
textarea{display:block;width:100%;min-height:6rem;padding:.625rem .75rem;resize:vertical;
font:inherit;color:inherit;border:1px solid #c4cad3;border-radius:8px;background:#fff}
textarea:focus{outline:3px solid #9ec5f8;outline-offset:1px;border-color:var(--info)}
.actions{display:flex;flex-wrap:wrap;gap:.75rem;margin-top:1rem}
button{font:inherit;font-weight:600;min-height:2.75rem;padding:.5rem 1.5rem;border-radius:8px;
cursor:pointer;border:2px solid transparent}
button:focus-visible{outline:3px solid #9ec5f8;outline-offset:2px}
.approve{background:var(--ok);color:#fff;border-color:var(--ok)}
.approve:hover{background:var(--ok-dark);border-color:var(--ok-dark)}
.reject{background:#fff;color:var(--no);border-color:var(--no)}
.reject:hover{background:var(--no-bg)}
.note{margin-top:1rem;color:var(--muted);font-size:.875rem}
.banner{border-radius:8px;padding:.875rem 1rem;margin-top:1rem;border:1px solid}
.banner p{margin:.25rem 0}
.tone-info{background:var(--info-bg);border-color:#b6d4f5}
.tone-success{background:var(--ok-bg);border-color:#a6dbb4}
.tone-warning{background:var(--warn-bg);border-color:#f1d48a}
.tone-error{background:var(--no-bg);border-color:#f5b5ae}
.mark{display:inline-flex;align-items:center;justify-content:center;width:2.5rem;
height:2.5rem;border-radius:50%;font-size:1.25rem;font-weight:700;margin-bottom:.75rem}
.mark-info{background:var(--info-bg);color:var(--info)}
.mark-success{background:var(--ok-bg);color:var(--ok)}
.mark-warning{background:var(--warn-bg);color:var(--warn)}
.mark-error{background:var(--no-bg);color:var(--no)}
blockquote{margin:.5rem 0 0;padding:.25rem 0 .25rem .75rem;border-left:3px solid var(--line);
white-space:pre-wrap;overflow-wrap:anywhere}
footer{margin-top:1.25rem;color:var(--muted);font-size:.8125rem;text-align:center}
@media (max-width:30rem){main{padding:.75rem .5rem 2rem}.card{padding:1rem;border-radius:10px}
dl{grid-template-columns:1fr;gap:.125rem}dd{margin-bottom:.5rem}
.actions{flex-direction:column}button{width:100%}}
"""


def page_headers(stylesheet: str) -> dict[str, str]:
    """The headers of a server-rendered page whose only resource is ``stylesheet`` (inline).

    Only that exact stylesheet (by hash) may apply; nothing may be loaded or run, and forms
    may post only to the Api itself. The console's pages use it too. ``Referrer-Policy:
    same-origin``: no referrer leaves for another origin, and a browser that sends no
    ``Sec-Fetch-Site`` (Safari before 16.4) posts the page's forms with the page's ``Origin``
    (under ``no-referrer`` it sends ``Origin: null``, which ``api.cross_site`` refuses). A page
    whose URL holds a link's token sends no referrer at all (``LINK_PAGE_HEADERS``).
    """
    digest = base64.b64encode(hashlib.sha256(stylesheet.encode()).digest()).decode()
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'sha256-{digest}'; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'"
        ),
        "Referrer-Policy": "same-origin",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-store",
    }


HTML_HEADERS = page_headers(_STYLE)
"""Headers every HTML response of the Api carries."""

LINK_PAGE_HEADERS = {"Referrer-Policy": "no-referrer"}
"""Added to a page under ``/links/``: its URL holds the link's token, which no referrer carries."""

_MARKS: dict[Tone, str] = {"info": "i", "success": "\u2713", "warning": "!", "error": "\u00d7"}

# Friendlier headings for the error pages the Api renders with the HTTP reason phrase as title.
_FRIENDLY: dict[str, tuple[str, Tone]] = {
    "Decision recorded": ("Decision recorded", "success"),
    "Conflict": ("Already decided", "warning"),
    "Gone": ("This approval has expired", "warning"),
    "Unauthorized": ("This link cannot be used", "error"),
    "Forbidden": ("You may not decide this request", "error"),
    "Not Found": ("Not found", "error"),
    "Bad Request": ("Something is wrong with the request", "error"),
    "Unprocessable Entity": ("The decision could not be read", "error"),
    "Service Unavailable": ("Approvals are unavailable right now", "error"),
}


def approval_state(record: WaitRecord) -> str:
    """``pending``, ``approved``, ``rejected`` or ``expired``."""
    if record.status is WaitStatus.PENDING:
        return "pending"
    if record.status is WaitStatus.EXPIRED:
        return "expired"
    return "approved" if (record.outcome or {}).get("approved") else "rejected"


def _pretty(canonical: Any) -> str:
    try:
        return json.dumps(json.loads(str(canonical)), indent=2, ensure_ascii=False)
    except ValueError:
        return str(canonical)


def _when(ms: int | None) -> str:
    """``<time>`` with a readable UTC date and the exact ISO timestamp as its ``datetime``."""
    if ms is None:
        return "no deadline"
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = f"{moment:%a} {moment.day} {moment:%b %Y, %H:%M} UTC"
    return f'<time datetime="{escape(iso(ms) or "", quote=True)}">{escape(text)}</time>'


def _when_iso(value: Any) -> str:
    """Like ``_when`` for an ISO timestamp from an outcome (shown as is if it does not parse)."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return escape(str(value))
    return _when(int(moment.timestamp() * 1000))


def _page(title: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="robots" content="noindex,nofollow">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><main>{body}"
        "<footer>durable-agents \u00b7 approvals</footer></main></body></html>\n"
    )


def _facts(rows: list[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _decision_panel(record: WaitRecord, state: str) -> str:
    outcome = record.outcome or {}
    if state == "expired":
        return (
            '<div class="banner tone-warning" role="status"><p><strong>No one decided in '
            f"time.</strong> The deadline ({_when(record.deadline_ms)}) passed, so nothing can "
            "be decided any more; the agent was told that the approval timed out.</p></div>"
        )
    verb = "Approved" if state == "approved" else "Rejected"
    tone = "success" if state == "approved" else "error"
    comment = str(outcome.get("comment") or "")
    quoted = f"<blockquote>{escape(comment)}</blockquote>" if comment else ""
    return (
        f'<div class="banner tone-{tone}" role="status"><p><strong>{verb}</strong> by '
        f"<code>{escape(str(outcome.get('decided_by', '')))}</code> on "
        f"{_when_iso(outcome.get('decided_at', ''))}.</p>{quoted}"
        "<p>This decision is final; nothing more can be decided here.</p></div>"
    )


def _form(action_url: str, token: str | None) -> str:
    hidden = (
        f'<input type="hidden" name="token" value="{escape(token, quote=True)}">' if token else ""
    )
    return (
        '<section class="card" aria-labelledby="decide">'
        '<h2 id="decide">Your decision</h2>'
        f'<form method="post" action="{escape(action_url, quote=True)}">{hidden}'
        '<label for="comment">Comment <span class="hint">(optional, recorded with your '
        "decision)</span></label>"
        f'<textarea id="comment" name="comment" maxlength="{MAX_COMMENT_CHARS}" rows="4" '
        'aria-describedby="comment-hint"></textarea>'
        f'<p id="comment-hint" class="hint">Up to {MAX_COMMENT_CHARS} characters.</p>'
        '<div class="actions">'
        '<button type="submit" name="decision" value="approve" class="approve">Approve</button>'
        '<button type="submit" name="decision" value="reject" class="reject">Reject</button>'
        "</div></form>"
        '<p class="note">The first decision is final: once someone has approved or rejected '
        "this request, nobody can change it.</p></section>"
    )


def render_approval_page(record: WaitRecord, *, action_url: str, token: str | None = None) -> str:
    """The page showing one approval, with Approve/Reject and a comment box while pending.

    Args:
        record: The approval (``kind == "approval"``).
        action_url: Where the form posts (``decision``, ``comment`` and ``token``).
        token: The signed link's token, carried in a hidden field (None for signed-in pages).

    Returns:
        A complete HTML document; every value from the record is escaped.
    """
    details = record.details
    state = approval_state(record)
    summary = str(details.get("summary") or record.name)
    approvers = [str(a) for a in details.get("approvers", [])]
    who = (
        '<ul class="who">' + "".join(f"<li>{escape(a)}</li>" for a in approvers) + "</ul>"
        if approvers
        else "nobody"
    )
    agent = str(details.get("agent") or "an agent")
    h1_class = ' class="long"' if len(summary) > LONG_SUMMARY_CHARS else ""
    body = (
        '<section class="card" aria-labelledby="title">'
        '<p class="eyebrow"><span>Approval request</span>'
        f'<span class="pill pill-{state}">{escape(state)}</span></p>'
        f'<h1 id="title"{h1_class}>{escape(summary)}</h1>'
        f'<p class="lead">Agent <strong>{escape(agent)}</strong> '
        + (
            f"asks for approval before it continues. Decide by {_when(record.deadline_ms)}."
            if state == "pending" and record.deadline_ms is not None
            else "asks for approval before it continues."
            if state == "pending"
            else "asked for approval."
        )
        + "</p>"
    )
    if state != "pending":
        body += _decision_panel(record, state)
    what = {
        "pending": "What will happen if you approve",
        "approved": "What was approved",
    }.get(state, "What was requested")
    body += (
        f'<h2 id="what" class="space">{what}</h2>'
        '<pre class="request"><code>'
        f"{escape(_pretty(details.get('request', 'null')))}</code></pre>"
        '<p class="caption">The exact request: approving lets the agent do this, and nothing '
        "else.</p></section>"
        '<section class="card" aria-labelledby="details">'
        '<h2 id="details">Details</h2>'
        + _facts(
            [
                ("Asked by", f"<code>{escape(agent)}</code>"),
                ("Run", f"<code>{escape(record.run_id)}</code>"),
                ("Step", f"<code>{escape(record.name)}</code>"),
                ("Who may decide", who),
                ("Requested", _when(record.created_at_ms)),
                ("Decide by", _when(record.deadline_ms)),
                ("Approval id", f"<code>{escape(record.wait_id)}</code>"),
            ]
        )
        + "</section>"
    )
    if state == "pending":
        body += _form(action_url, token)
    return _page(f"Approval: {summary}", body)


def render_message_page(title: str, message: str, *, tone: Tone | None = None) -> str:
    """A short page with a title and one message (decision recorded, link expired, ...).

    Args:
        title: The title; an HTTP reason phrase (``Conflict``, ``Gone``, ...) is shown as a
            plain-language heading instead.
        message: What happened, in a sentence or two.
        tone: ``info``, ``success``, ``warning`` or ``error`` (by default from the title).

    Returns:
        A complete HTML document; the title and message are escaped.
    """
    heading, default_tone = _FRIENDLY.get(title, (title, "info"))
    chosen: Tone = tone or default_tone
    role = "alert" if chosen == "error" else "status"
    body = (
        f'<section class="card" role="{role}" aria-labelledby="title">'
        f'<div class="mark mark-{chosen}" aria-hidden="true">{_MARKS[chosen]}</div>'
        f'<h1 id="title">{escape(heading)}</h1><p>{escape(message)}</p>'
        '<p class="note">You can close this page.</p></section>'
    )
    return _page(heading, body)
