"""``durable-agents runs list --agent/--version`` and ``runs migrate RUN_ID --to V``.

The migrate command talks HTTP to the Api local mode serves; here a stand-in server on
loopback answers what the Api answers (its status codes and bodies), so the command's handling
of each is checked without starting local mode.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from durable_agents.core.models import RunStatus
from durable_agents_local.cli.main import STATUSES, build_parser, main

MIGRATED: dict[str, Any] = {
    "committed": True,
    "run": {"run_id": "run-1", "agent": "flow", "status": "SUSPENDED"},
    "migration": {
        "from": {"workflow_version": "1"},
        "to": {"workflow_version": "2"},
        "replays": ["create-ticket", "approve"],
        "results": {"00000001": {"op_id": "run-1:create-ticket:1"}},
        "note": "v2 tickets carry a priority",
        "frontier": "the new code stops at: approval approve",
    },
}
REFUSED = {
    "error": {
        "type": "MigrationRefusedError",
        "message": "migration of run 'run-1' refused: the new code diverges from the journal",
        "reason": "the new code diverges from the journal",
    }
}


class _Api(BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, Any]] = {}
    received: list[tuple[str, Any]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.received.append((self.path, json.loads(self.rfile.read(length) or b"null")))
        status, body = self.answers[self.path]
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    _Api.received = []
    _Api.answers = {
        "/runs/run-1/migrate": (200, MIGRATED),
        "/runs/run-2/migrate": (409, REFUSED),
        "/runs/run-3/migrate": (404, {"error": {"message": "run 'run-3' not found"}}),
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_every_run_status_can_be_listed_by() -> None:
    assert set(STATUSES) == {s.value for s in RunStatus}
    args = build_parser().parse_args(
        ["runs", "list", "--status", "version_unavailable", "--agent", "flow", "--version", "2"]
    )
    assert (args.status, args.agent, args.version) == ("VERSION_UNAVAILABLE", "flow", "2")
    plain = build_parser().parse_args(["runs", "list"])
    assert (plain.agent, plain.version) == (None, None)


def test_migrate_needs_a_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["runs", "migrate", "run-1"])
    assert exited.value.code == 2 and "--to" in capsys.readouterr().err
    args = build_parser().parse_args(["runs", "migrate", "run-1", "--to", "2", "--dry-run"])
    # No --api-url nor --stack: local mode's Api
    # (durable_agents_local.cli.api_client.LOCAL_API_URL).
    assert (args.run_id, args.to, args.dry_run, args.api_url) == ("run-1", "2", True, None)


def test_migrate_posts_to_the_api_and_says_what_changed(
    api: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "migrate", "run-1", "--to", "2", "--api", api]) == 0
    out = capsys.readouterr().out
    assert "run-1 migrated: flow version 1 -> 2" in out
    assert "run-1:create-ticket:1" in out and "approval approve" in out
    assert _Api.received == [("/runs/run-1/migrate", {"to_version": "2", "dry_run": False})]
    assert main(["runs", "migrate", "run-1", "--to", "2", "--dry-run", "--json", "--api", api]) == 0
    assert json.loads(capsys.readouterr().out) == MIGRATED
    assert _Api.received[-1][1] == {"to_version": "2", "dry_run": True}


def test_a_refusal_or_an_unknown_run_is_an_error_with_the_apis_message(
    api: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "migrate", "run-2", "--to", "3", "--api", api]) == 1
    err = capsys.readouterr().err
    assert "answered 409" in err and "diverges" in err
    assert main(["runs", "migrate", "run-3", "--to", "2", "--api", api]) == 1
    assert "no such run run-3 (run 'run-3' not found)" in capsys.readouterr().err


def test_migrate_says_what_to_do_when_nothing_answers(capsys: pytest.CaptureFixture[str]) -> None:
    # Port 9 (discard) on loopback: nothing listens there.
    assert main(["runs", "migrate", "run-1", "--to", "2", "--api", "http://127.0.0.1:9"]) == 1
    assert "start local mode first" in capsys.readouterr().err
