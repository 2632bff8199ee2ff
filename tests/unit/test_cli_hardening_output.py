"""Issue 31 (7): no control character of the Api's data reaches the operator's terminal raw.

Run data (a callback's failure message, an approval's summary, a review's note, inputs and
results, even a run id or a status) can hold terminal escapes: a window-title change, a line
erased and overwritten with a fake "all good", a bidi override that reverses what one reads.
Every human-readable output of the CLI shows them escaped (``\\x1b``, ``\\u202e``); ``--json``
stays exact JSON. The Api is a stand-in served for real on 127.0.0.1.
"""

from __future__ import annotations

import doctest
import http.server
import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from durable_agents_local.cli.main import main
from durable_agents_local.cli.tables import (
    approvals_table,
    clip,
    escape_controls,
    escape_strings,
    fit_table,
    history_table,
    reviews_table,
    run_details,
    runs_table,
    timeline_table,
)
from durable_agents_local.cli.watch import Watch
from tests.unit.api_standin import StandIn, stand_in_api

BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
FORBIDDEN = {*range(0x20), 0x7F, *range(0x80, 0xA0), *BIDI}
# A window title, a line erased and overwritten, an 8-bit CSI, a bidi override and isolate,
# DEL and NUL.
HOSTILE = "\x1b]0;pwned\x07\x1b[2K\rall good\n\x9b31m\u202egnp.exe\u2066x\u2069\x7f\x00end"
RUN = "run-0123456789abcdef"


def _raw_controls(text: str, *, newlines: bool = True) -> list[str]:
    """The forbidden characters in ``text`` (the output's own line breaks aside)."""
    allowed = {"\n"} if newlines else set()
    return [f"U+{ord(c):04X}" for c in text if ord(c) in FORBIDDEN and c not in allowed]


def _clean(text: str) -> None:
    assert _raw_controls(text) == [], text
    # What was there is visible, escaped.
    assert "\\x1b" in text or "\\u202e" in text or "\\x9b" in text, text


@pytest.fixture
def api() -> Iterator[StandIn]:
    with stand_in_api() as stand_in:
        yield stand_in


def _view(**extra: Any) -> dict[str, Any]:
    return {"run_id": RUN, "agent": "research", "status": "FAILED",
            "versions": {"workflow_version": "1"}, "created_at": "2026-12-01T20:00:00.000+00:00",
            "updated_at": "2026-12-01T20:00:01.000+00:00", **extra}  # fmt: skip


# ------------------------------------------------------------------------- the escaping


def test_every_control_character_is_escaped_and_nothing_else() -> None:
    for code in sorted(FORBIDDEN):
        shown = escape_controls(f"a{chr(code)}b")
        assert _raw_controls(shown, newlines=False) == [], hex(code)
        assert shown.startswith("a\\") and shown.endswith("b"), (hex(code), shown)
    assert escape_controls("\x1b[31m") == "\\x1b[31m"
    assert escape_controls("\u202e") == "\\u202e" and escape_controls("\x9b") == "\\x9b"
    assert escape_controls("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert escape_controls("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"
    printable = "Grüße, 中文, ❤️, a\\x1b literal, \u200b"
    assert escape_controls(printable) == printable
    # A lone surrogate (valid JSON: "\ud800") would stop print() with UnicodeEncodeError.
    assert escape_controls("\ud800") == "\\ud800"
    assert escape_strings({"k\x1b": ["v\x1b", 1, None, {"x": "\u202e"}]}) == {
        "k\\x1b": ["v\\x1b", 1, None, {"x": "\\u202e"}]
    }


def test_tables_cells_and_details_show_controls_escaped() -> None:
    assert clip("a\x1b[2Kb", 20) == "a\\x1b[2Kb"
    assert clip("a\nb", 10) == "a\\nb"
    _clean(fit_table(["A"], [[HOSTILE]], width=200))
    run = _view(agent=HOSTILE, status=HOSTILE, input=HOSTILE, result={"text": HOSTILE},
                error={"type": "X", "message": HOSTILE})  # fmt: skip
    for text in (runs_table([run], 200), run_details(run, 200)):
        _clean(text)
    event = {"event": "step_failed", "run_id": RUN, "at": run["created_at"], "op_id": HOSTILE,
             "kind": "step", "name": HOSTILE,
             "error": {"type": HOSTILE, "message": HOSTILE}}  # fmt: skip
    _clean(history_table([event], 200))
    _clean(timeline_table(RUN, [{"op_id": HOSTILE, "kind": HOSTILE, "name": HOSTILE,
                                 "attempts": 1, "status": HOSTILE}], 200))  # fmt: skip
    _clean(approvals_table([{"approval_id": "a-1", "name": HOSTILE, "summary": HOSTILE}], 200))
    _clean(reviews_table([{"operation_id": "o-1", "tool": HOSTILE, "note": HOSTILE}], 200))


# --------------------------------------------------------------------- through the CLI


def test_runs_list_show_history_timeline_print_escaped(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    view = _view(agent=HOSTILE, input=HOSTILE, result=HOSTILE,
                 error={"type": "CallbackFailed", "message": HOSTILE})  # fmt: skip
    events = [{"event": "run_started", "run_id": RUN, "at": view["created_at"]},
              {"event": "callback_failed", "op_id": f"{RUN}:cb:1", "kind": "callback",
               "name": HOSTILE, "attempt": 1, "at": view["updated_at"],
               "error": {"type": "CallbackFailed", "message": HOSTILE}}]  # fmt: skip
    api.answers[("GET", "/runs")] = (200, {"runs": [view], "cursor": HOSTILE})
    api.answers[("GET", f"/runs/{RUN}")] = (200, view)
    api.answers[("GET", f"/runs/{RUN}/history")] = (200, {"run_id": RUN, "events": events})
    for argv in (["runs", "list"], ["runs", "show", RUN], ["runs", "history", RUN],
                 ["runs", "timeline", RUN]):  # fmt: skip
        assert main([*argv, "--api-url", api.url]) == 0
        _clean(capsys.readouterr().out)


def test_approvals_and_reviews_print_escaped(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = {"approval_id": "a-1", "status": "pending", "run_id": RUN, "name": HOSTILE,
                "summary": HOSTILE, "agent": "research"}  # fmt: skip
    api.answers[("GET", "/approvals")] = (200, {"approvals": [approval]})
    api.answers[("POST", "/approvals/a-1")] = (200, {**approval, "status": HOSTILE})
    review = {"operation_id": "o-1", "tool": HOSTILE, "attempt": 1, "note": HOSTILE}
    api.answers[("GET", "/reviews")] = (200, {"reviews": [review]})
    api.answers[("POST", "/reviews/o-1")] = (200, {**review, "status": HOSTILE})
    for argv in (["approvals", "list"], ["approvals", "decide", "a-1", "approve"],
                 ["reviews", "list"], ["reviews", "decide", "o-1", "abandon"]):  # fmt: skip
        assert main([*argv, "--api-url", api.url]) == 0
        _clean(capsys.readouterr().out)


def test_stop_redrive_migrate_and_events_print_escaped(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped = _view(status=HOSTILE, cancel_requested={"mode": HOSTILE, "by": HOSTILE,
                                                      "reason": HOSTILE})  # fmt: skip
    api.answers[("POST", f"/runs/{RUN}/cancel")] = (202, stopped)
    api.answers[("POST", f"/runs/{RUN}/redrive")] = (202, _view(status=HOSTILE))
    migrated = {"committed": True, "run": _view(agent=HOSTILE, status=HOSTILE),
                "migration": {"from": {"workflow_version": HOSTILE},
                              "to": {"workflow_version": "2"},
                              "results": {"x": {"op_id": HOSTILE}}, "replays": [HOSTILE],
                              "frontier": HOSTILE, "note": HOSTILE}}  # fmt: skip
    api.answers[("POST", f"/runs/{RUN}/migrate")] = (200, migrated)
    for argv in (["runs", "cancel", RUN], ["runs", "redrive", RUN],
                 ["runs", "migrate", RUN, "--to", "2"]):  # fmt: skip
        assert main([*argv, "--api-url", api.url]) == 0
        out = capsys.readouterr().out
        _clean(out)
        if "migrate" in argv:  # its own lines, and no line of the Api's making
            assert len(out.splitlines()) == 6


def test_errors_from_the_api_print_escaped(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("GET", f"/runs/{RUN}")] = (409, {"error": {"message": HOSTILE}})
    api.answers[("GET", f"/runs/{RUN}/history")] = (404, {"error": {"message": HOSTILE}})
    api.answers[("GET", "/reviews")] = (403, {"message": HOSTILE})
    api.answers[("GET", "/approvals")] = (502, HOSTILE.encode())
    for argv in (["runs", "show", RUN], ["runs", "history", RUN], ["reviews", "list"],
                 ["approvals", "list"]):  # fmt: skip
        assert main([*argv, "--api-url", api.url]) == 1
        captured = capsys.readouterr()
        _clean(captured.err)
        assert captured.out == ""


def test_a_redirects_location_prints_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:1/\x1b]0;pwned\x07")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert main(["runs", "list", "--api-url", url]) == 1
    finally:
        server.shutdown()
        server.server_close()
    _clean(capsys.readouterr().err)


def test_watch_prints_escaped_on_a_log_and_on_a_terminal(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    view = _view(error={"type": "CallbackFailed", "message": HOSTILE})
    events = [{"event": HOSTILE, "op_id": f"{RUN}:cb:1", "kind": "callback", "name": HOSTILE,
               "at": view["updated_at"]}]  # fmt: skip
    api.answers[("GET", f"/runs/{RUN}")] = (200, view)
    api.answers[("GET", f"/runs/{RUN}/history")] = (200, {"run_id": RUN, "events": events})
    assert main(["runs", "watch", RUN, "--api-url", api.url]) == 1
    _clean(capsys.readouterr().out)

    from durable_agents_local.cli.api_client import ApiClient

    screen = io.StringIO()
    Watch(ApiClient(api.url), RUN, screen, tty=True, width=200, sleep=lambda _: None).run()
    # On a terminal the watch's own \r rewrites its line: nothing else.
    assert [c for c in screen.getvalue() if ord(c) in FORBIDDEN] == ["\r", "\n"]


def test_a_watch_timeout_prints_the_status_escaped(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("GET", f"/runs/{RUN}")] = (200, _view(status=HOSTILE))
    api.answers[("GET", f"/runs/{RUN}/history")] = (200, {"run_id": RUN, "events": []})
    assert main(["runs", "watch", RUN, "--timeout", "0.01", "--api-url", api.url]) == 1
    captured = capsys.readouterr()
    _clean(captured.out)
    _clean(captured.err)


def test_runs_start_prints_escaped(api: StandIn, capsys: pytest.CaptureFixture[str]) -> None:
    run = _view(run_id=HOSTILE, status="SUCCEEDED", result=HOSTILE)
    api.answers[("POST", "/runs")] = [(201, {"run": run}), (400, {"error": {"message": HOSTILE}})]
    assert main(["runs", "start", "research", "x", "--wait", "0", "--api", api.url]) == 0
    _clean(capsys.readouterr().out)
    assert main(["runs", "start", "research", "x", "--wait", "0", "--api", api.url]) == 1
    _clean(capsys.readouterr().err)


def test_json_output_stays_exact_json_with_every_control_escaped(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    view = _view(agent=HOSTILE, result={HOSTILE: HOSTILE})
    api.answers[("GET", f"/runs/{RUN}")] = (200, view)
    assert main(["runs", "show", RUN, "--json", "--api-url", api.url]) == 0
    out = capsys.readouterr().out
    assert _raw_controls(out) == []
    assert json.loads(out) == view  # exact: the escaping is JSON's own


def test_the_examples_run() -> None:
    from durable_agents_local.cli import tables

    result = doctest.testmod(tables)
    assert result.attempted >= 1 and result.failed == 0
