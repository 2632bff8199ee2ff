"""HTML for people deciding an approval in a browser (a signed link, or a signed-in page).

Deliberately plain: every value from the record is escaped, the page loads nothing from
elsewhere, and the Api sends it with a strict Content-Security-Policy and ``Referrer-Policy:
no-referrer`` (a link's token is in the page URL). ``render_approval_page`` is the one entry
point the Api calls; restyle freely, keeping its signature and the form fields (``decision`` =
``approve`` | ``reject``, ``comment``, hidden ``token``).
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from durable_agents.models import WaitRecord, WaitStatus
from durable_agents.views import iso

HTML_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
"""Headers every HTML response of the Api carries."""

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:44rem;margin:2rem auto;padding:0 1rem;
color:#1b1b1b;line-height:1.45}
pre{background:#f4f4f4;padding:.75rem;overflow:auto;border-radius:4px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem}
dt{font-weight:600}textarea{width:100%;min-height:5rem}
button{font-size:1rem;padding:.5rem 1.25rem;margin-right:.5rem}
.status{display:inline-block;padding:.1rem .5rem;border-radius:4px;background:#eee}
"""


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


def _page(title: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
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
    facts = [
        ("Status", f'<span class="status">{escape(state)}</span>'),
        ("Agent", escape(str(details.get("agent", "")))),
        ("Run", escape(record.run_id)),
        ("Approvers", escape(", ".join(str(a) for a in details.get("approvers", [])))),
        ("Deadline", escape(iso(record.deadline_ms) or "none")),
    ]
    outcome = record.outcome or {}
    if state in ("approved", "rejected"):
        facts += [
            ("Decided by", escape(str(outcome.get("decided_by", "")))),
            ("Decided at", escape(str(outcome.get("decided_at", "")))),
            ("Comment", escape(str(outcome.get("comment", "")))),
        ]
    rows = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    body = (
        f"<h1>Approval requested</h1><p>{escape(summary)}</p><dl>{rows}</dl>"
        f"<h2>The exact request</h2><pre>{escape(_pretty(details.get('request', 'null')))}</pre>"
    )
    if state == "pending":
        hidden = (
            f'<input type="hidden" name="token" value="{escape(token, quote=True)}">'
            if token
            else ""
        )
        body += (
            f'<form method="post" action="{escape(action_url, quote=True)}">{hidden}'
            '<p><label for="comment">Comment (optional)</label><br>'
            '<textarea id="comment" name="comment" maxlength="2000"></textarea></p>'
            '<button type="submit" name="decision" value="approve">Approve</button>'
            '<button type="submit" name="decision" value="reject">Reject</button></form>'
        )
    else:
        body += f"<p>This approval is {escape(state)}; nothing more can be decided.</p>"
    return _page(f"Approval: {summary}", body)


def render_message_page(title: str, message: str) -> str:
    """A short page with a title and one message (decision recorded, link expired, ...)."""
    return _page(title, f"<h1>{escape(title)}</h1><p>{escape(message)}</p>")
