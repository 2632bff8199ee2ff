"""The CLI's Api commands against a stand-in Api: what they send, print, and exit with."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_agents_local.cli.main import build_parser, main
from durable_agents_local.identity import CALLER_HEADER
from durable_agents_local.moto_server import free_port
from tests.unit.api_standin import StandIn, stand_in_api

RUN = "run-0123456789abcdef"
VIEW = {"run_id": RUN, "agent": "research", "status": "RUNNING",
        "versions": {"workflow_version": "1"}, "created_at": "2026-12-01T20:00:00.000+00:00",
        "updated_at": "2026-12-01T20:00:01.000+00:00"}  # fmt: skip


@pytest.fixture
def api() -> Iterator[StandIn]:
    with stand_in_api() as stand_in:
        yield stand_in


def test_list_sends_the_filters_and_prints_a_table_or_json(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("GET", "/runs")] = (200, {"runs": [VIEW], "cursor": "abc"})
    argv = ["runs", "list", "--status", "running", "--agent", "research", "--since",
            "2026-11-30", "--limit", "5", "--api-url", api.url]  # fmt: skip
    assert main(argv) == 0
    assert api.received[0].query == {
        "status": "RUNNING", "agent": "research", "since": "2026-11-30T00:00:00.000+00:00",
        "limit": "5",
    }  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:4] == [RUN, "research", "1", "RUNNING"]
    assert out[-1] == "more: --cursor abc"
    # The connection options work before the command too.
    assert main(["--api-url", api.url, "runs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"runs": [VIEW], "cursor": "abc"}


def test_show_history_timeline_in_json_are_the_apis_views(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [{"event": "run_started", "run_id": RUN, "at": VIEW["created_at"]},
              {"event": "step_started", "op_id": f"{RUN}:fetch:1", "kind": "step",
               "name": "fetch", "attempt": 1, "at": VIEW["updated_at"]}]  # fmt: skip
    api.answers[("GET", f"/runs/{RUN}")] = (200, VIEW)
    api.answers[("GET", f"/runs/{RUN}/history")] = (200, {"run_id": RUN, "events": events})
    for action in ("show", "history", "timeline"):
        assert main(["runs", action, RUN, "--json", "--api", api.url]) == 0
    show, history, timeline = (json.loads(t) for t in _documents(capsys.readouterr().out))
    assert show == VIEW and history["events"] == events
    assert timeline["operations"][0]["name"] == "fetch"
    assert timeline["operations"][0]["status"] == "RUNNING"
    assert main(["runs", "timeline", RUN, "--api", api.url]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["fetch:1", "step", "fetch"]


def test_history_of_an_earlier_generation_asks_for_it(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = {"run_id": RUN, "generation": 0, "events": []}
    api.answers[("GET", f"/runs/{RUN}/history")] = (200, answer)
    assert main(["runs", "history", RUN, "--generation", "0", "--json", "--api", api.url]) == 0
    assert main(["runs", "timeline", RUN, "--json", "--api", api.url]) == 0
    assert [r.query for r in api.received] == [{"generation": "0"}, {}]
    capsys.readouterr()


def _documents(text: str) -> list[str]:
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        value, end = decoder.raw_decode(text, at)
        docs.append(json.dumps(value))
        at = end + 1
    return docs


def test_send_event_posts_the_payload_and_event_id(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", f"/runs/{RUN}/events/new%20topic")] = (202, {"accepted": True})
    argv = ["runs", "send-event", RUN, "new topic", "--data", '{"topic": "x"}',
            "--event-id", "e-1", "--api-url", api.url]  # fmt: skip
    assert main(argv) == 0
    assert api.received[0].body == {"topic": "x"}  # the payload is the body
    assert api.received[0].headers["Idempotency-Key"] == "e-1"
    assert f"event 'new topic' sent to {RUN}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        build_parser().parse_args(["runs", "send-event", RUN, "n", "--data", "{not json"])


def test_approvals_and_reviews(api: StandIn, capsys: pytest.CaptureFixture[str]) -> None:
    approval = {"approval_id": "apr-1", "status": "pending", "run_id": RUN, "agent": "support",
                "name": "refund", "deadline": None, "summary": "refund 40 EUR"}  # fmt: skip
    api.answers[("GET", "/approvals")] = (200, {"approvals": [approval]})
    api.answers[("POST", "/approvals/apr-1")] = (200, {**approval, "status": "approved"})
    op = f"{RUN}:gather:2/charge-card:1"
    api.answers[("POST", f"/reviews/{RUN}:gather:2%2Fcharge-card:1")] = (
        200, {"operation_id": op, "status": "COMMITTED"},
    )  # fmt: skip
    api.answers[("GET", "/reviews")] = (200, {"reviews": []})
    url = ["--api-url", api.url]
    assert main(["approvals", "list", "--agent", "support", *url]) == 0
    assert main(["approvals", "list", "--agent", "other", *url]) == 0
    out = capsys.readouterr().out
    assert "apr-1" in out and "no approvals" in out
    assert api.received[0].query == {"status": "pending", "limit": "100"}
    assert main(["approvals", "decide", "apr-1", "approve", "--comment", "ok", *url]) == 0
    assert api.received[-1].body == {"decision": "approve", "comment": "ok"}
    assert main(["reviews", "decide", op, "committed", "--result", '{"id": 7}', *url]) == 0
    assert api.received[-1].body == {"decision": "committed", "comment": "", "result": {"id": 7}}
    assert main(["reviews", "list", *url]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "no calls in review"


def test_approval_and_review_listings_page_with_a_cursor(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    # Another tenant's backlog can leave a page short, even empty: the cursor goes on.
    api.answers[("GET", "/approvals")] = (200, {"approvals": [], "cursor": "nxt"})
    api.answers[("GET", "/reviews")] = (200, {"reviews": [], "cursor": "r\x1b2"})
    url = ["--api-url", api.url]
    assert main(["approvals", "list", "--limit", "5", "--cursor", "c1", *url]) == 0
    assert api.received[-1].query == {"status": "pending", "limit": "5", "cursor": "c1"}
    assert capsys.readouterr().out.splitlines()[-1] == "more: --cursor nxt"
    assert main(["reviews", "list", "--cursor", "c2", *url]) == 0
    assert api.received[-1].query == {"limit": "100", "cursor": "c2"}
    assert capsys.readouterr().out.splitlines()[-1] == "more: --cursor r\\x1b2"
    assert main(["approvals", "list", "--json", *url]) == 0
    assert json.loads(capsys.readouterr().out) == {"approvals": [], "cursor": "nxt"}


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (403, {"error": {"message": "user:ops is not an approver"}},
         "error: not allowed: user:ops is not an approver"),
        (404, {"error": {"message": "run not found"}}, f"error: no such run {RUN}"),
        (409, {"error": {"message": "run is SUCCEEDED"}},
         f"error: POST /runs/{RUN}/cancel answered 409: run is SUCCEEDED"),
    ],
)  # fmt: skip
def test_errors_are_one_line_and_exit_1(
    api: StandIn, status: int, body: object, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", f"/runs/{RUN}/cancel")] = (status, body)
    assert main(["runs", "cancel", RUN, "--api-url", api.url]) == 1
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1 and "Traceback" not in err


def test_the_local_caller_and_an_unreachable_api(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("GET", "/reviews")] = (200, {"reviews": []})
    caller = "arn:aws:iam::000000000000:user/reviewer"
    assert main(["--caller-arn", caller, "reviews", "list", "--api-url", api.url]) == 0
    assert api.received[0].headers[CALLER_HEADER] == caller
    down = f"http://127.0.0.1:{free_port()}"
    assert main(["runs", "show", RUN, "--api-url", down]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach {down}") and "start local mode first" in err
    assert err.count("\n") == 1


def test_setup_errors_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    argv = ["runs", "list", "--api-url", "https://api.example.com/prod"]
    assert main(argv) == 2
    assert "pass --region" in capsys.readouterr().err
    assert main(["runs", "list", "--api-url", "http://127.0.0.1:1", "--stack", "s"]) == 2
    assert "not both" in capsys.readouterr().err


def test_runs_start_takes_the_connection_options_too(capsys: pytest.CaptureFixture[str]) -> None:
    # A deployed stack's Api starts runs too (tests/unit/test_cli_friction.py): `runs start`
    # is set up as the other commands are, and refuses what they refuse.
    argv = ["--stack", "prod", "runs", "start", "greeter", "Ada", "--api-url", "http://127.0.0.1:1"]
    assert main(argv) == 2
    assert "not both" in capsys.readouterr().err
