"""``durable-agents runs cancel|terminate RUN_ID --reason ...`` over HTTP.

A stand-in server on loopback answers what the Api answers (its status codes and bodies), so
the command's handling of each is checked without starting local mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from durable_agents_local.cli.main import build_parser, main
from tests.unit.test_cli_runs_versions import _Api


def _run(mode: str) -> dict[str, Any]:
    return {
        "run_id": "run-1",
        "status": "SUSPENDED",
        "cancel_requested": {"mode": mode, "reason": "withdrawn", "by": "user:ops"},
    }


@pytest.fixture
def api() -> Iterator[str]:
    import threading

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    _Api.received = []
    _Api.answers = {
        "/runs/run-1/cancel": (202, _run("cancel")),
        "/runs/run-1/terminate": (202, _run("terminate")),
        "/runs/run-2/cancel": (409, {"error": {"message": "run run-2 is SUCCEEDED"}}),
        "/runs/run-3/terminate": (404, {"error": {"message": "run 'run-3' not found"}}),
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("action", ["cancel", "terminate"])
def test_a_stop_posts_the_reason_and_says_what_was_asked(
    api: str, action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["runs", action, "run-1", "--reason", "withdrawn", "--api", api])
    assert code == 0
    assert _Api.received == [(f"/runs/run-1/{action}", {"reason": "withdrawn"})]
    out = capsys.readouterr().out
    assert f"run-1: {action} requested by user:ops (withdrawn); status now SUSPENDED" in out


def test_refusals_are_errors_with_the_apis_message(
    api: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "cancel", "run-2", "--api", api]) == 1
    assert "answered 409: run run-2 is SUCCEEDED" in capsys.readouterr().err
    assert main(["runs", "terminate", "run-3", "--api", api]) == 1
    assert "no such run run-3 (run 'run-3' not found)" in capsys.readouterr().err


def test_the_reason_is_optional_and_nothing_answering_says_what_to_do(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(["runs", "cancel", "run-1"])
    # No --api-url nor --stack: local mode's Api
    # (durable_agents_local.cli.api_client.LOCAL_API_URL).
    assert (args.run_id, args.reason, args.api_url, args.stack) == ("run-1", "", None, None)
    assert main(["runs", "terminate", "run-1", "--api", "http://127.0.0.1:9"]) == 1
    assert "start local mode first" in capsys.readouterr().err
