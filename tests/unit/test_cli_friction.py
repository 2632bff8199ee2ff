"""The CLI's friction points (issue 33): what a person trying the local loop runs into."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from botocore.credentials import Credentials

from durable_agents.core.models import RunChange, RunStatus
from durable_agents.errors import RunStateConflictError
from durable_agents_local.cli import api_client
from durable_agents_local.cli.api_client import ApiClient, ApiConfigError
from durable_agents_local.cli.main import main
from durable_agents_local.cli.tables import (
    approvals_table,
    history_table,
    operations,
    reviews_table,
    run_details,
    runs_table,
    timeline_table,
)
from durable_agents_local.cli.watch import outcome
from durable_agents_local.identity import CALLER_HEADER
from durable_agents_local.moto_server import free_port
from durable_agents_local.runs_start import InputSyntaxError, parse_input, start_run
from tests.unit.api_standin import StandIn, _handler, stand_in_api
from tests.unit.conftest import Deployment
from tests.unit.test_api import GOOD, call

RUN = "run-0123456789abcdef"


@pytest.fixture
def api() -> Iterator[StandIn]:
    with stand_in_api() as stand_in:
        yield stand_in


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Ada", "Ada"),
        ("Ada Lovelace", "Ada Lovelace"),
        ('"Ada"', "Ada"),
        ('{"topic": "x"}', {"topic": "x"}),
        (" [1, 2] ", [1, 2]),
        ("42", 42),
        ("-1.5e3", -1500.0),
        ("true", True),
        ("null", None),
        ("2nd-attempt", "2nd-attempt"),
        ("1.2.3", "1.2.3"),  # a version, a date: words, not numbers
        ("2026-12-01", "2026-12-01"),
        ("NaN", "NaN"),  # not JSON (RFC 8259): a word like any other
        ("", ""),
    ],
)
def test_plain_words_are_strings_and_json_is_json(text: str, value: object) -> None:
    assert parse_input(text) == value


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"topic": }', "line 1 column 11"),
        ("[1, 2", "line 1 column 6"),
        ('"Ada', "line 1 column 1"),
        ("+1", "line 1 column 1"),
        (".5", "line 1 column 1"),
        ("01", "line 1 column 2"),
        ("1e", "line 1 column 2"),
        ("True", "line 1 column 1"),
        ("NULL", "line 1 column 1"),
        ('{\n  "a": 1,\n}', "line 3 column 1"),
    ],
)
def test_text_that_looks_like_json_but_is_not_is_refused(text: str, where: str) -> None:
    with pytest.raises(InputSyntaxError, match=where):
        parse_input(text)


def test_runs_start_refuses_malformed_json_with_exit_2_and_sends_nothing(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", "/runs")] = (201, {"run": {"run_id": RUN, "status": "SUCCEEDED"}})
    assert main(["runs", "start", "greeter", '{"topic": }', "--api", api.url]) == 2
    err = capsys.readouterr().err
    assert "INPUT is not valid JSON" in err and "line 1 column 11" in err
    assert "quote it" in err
    assert api.received == []


@pytest.mark.parametrize(
    "body",
    [
        # What functions/api/app.py answers for an input that does not match the agent's type.
        {"error": {"type": "InputValidationError", "message": "input does not match agent "
                   "'greeter'", "details": [
                       {"loc": ["topic"], "msg": "Field required", "type": "missing"},
                       {"loc": ["sections", 0], "msg": "Input should be a valid integer",
                        "type": "int_parsing"}]}},
        # pydantic / FastAPI's own shape.
        {"detail": [{"loc": ["topic"], "msg": "Field required"},
                    {"loc": ["sections", 0], "msg": "Input should be a valid integer"}]},
    ],
)  # fmt: skip
def test_runs_start_prints_each_field_error_of_a_422(
    api: StandIn, body: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", "/runs")] = (422, body)
    assert main(["runs", "start", "greeter", '{"sections": ["x"]}', "--api", api.url]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("error: POST /runs answered 422")
    assert lines[1:] == ["  topic: Field required", "  sections.0: Input should be a valid integer"]


def test_a_422s_field_errors_are_shown_escaped(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    details = [{"loc": ["to\x1b[2J"], "msg": "bad\nline\x07"}]
    api.answers[("POST", "/runs")] = (422, {"error": {"message": "no\x1b]0;x", "details": details}})
    assert main(["runs", "start", "greeter", "Ada", "--api", api.url]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "error: POST /runs answered 422: no\\x1b]0;x",
        "  to\\x1b[2J: bad line\\x07",  # one line each: its breaks are blanks
    ]


def test_runs_start_says_at_once_that_it_waits_for_the_api(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    assert main(["runs", "start", "greeter", "Ada", "--api", url, "--wait", "0.6"]) == 1
    lines = capsys.readouterr().err.splitlines()
    # Once, before the retries (not once per retry), then the error when --wait runs out.
    assert lines[0] == f"waiting for the Api at {url} (start it with durable-agents local) ..."
    assert len(lines) == 2 and lines[1].startswith(f"error: nothing answers at {url}")


def test_the_wait_is_announced_once_and_the_run_starts_when_the_api_comes_up() -> None:
    port = free_port()
    stand_in = StandIn(url=f"http://127.0.0.1:{port}")
    stand_in.answers[("POST", "/runs")] = (201, {"run": {"run_id": RUN, "status": "SUCCEEDED"}})
    servers: list[ThreadingHTTPServer] = []

    def come_up() -> None:
        servers.append(ThreadingHTTPServer(("127.0.0.1", port), _handler(stand_in)))
        servers[0].serve_forever()

    said: list[str] = []
    late = threading.Timer(0.6, come_up)
    late.start()
    try:
        started = start_run(stand_in.url, "greeter", "Ada", wait_seconds=10, on_wait=said.append)
    finally:
        while not servers:
            time.sleep(0.05)
        servers[0].shutdown()
        servers[0].server_close()
        late.join()
    assert started.run["status"] == "SUCCEEDED" and started.settled
    assert said == [
        f"waiting for the Api at {stand_in.url} (start it with durable-agents local) ..."
    ]


LONG_RUN = "run-" + "0123456789abcdef" * 6  # 100 characters: wider than the terminal
LONG_OP = f"{LONG_RUN}:gather:2/charge-card-with-a-very-long-tool-name:1"
AT = "2026-12-01T20:33:30.000+00:00"


@pytest.mark.parametrize("width", [80, 40])
def test_ids_are_never_cut_in_any_table(width: int) -> None:
    rows = {
        "runs": runs_table(
            [{"run_id": LONG_RUN, "agent": "a" * 50, "status": "SUCCEEDED", "created_at": AT,
              "updated_at": AT, "versions": {"workflow_version": "12"}}], width),
        "approvals": approvals_table(
            [{"approval_id": "apr-" + "9" * 90, "status": "pending", "run_id": LONG_RUN,
              "name": "approve-refund", "deadline": AT, "summary": "s" * 200}], width),
        "reviews": reviews_table(
            [{"operation_id": LONG_OP, "tool": "charge-card", "attempt": 2, "updated_at": AT,
              "note": "n" * 200}], width),
        "history": history_table(
            [{"event": "run_started", "run_id": LONG_RUN, "at": AT},
             {"event": "step_succeeded", "op_id": f"{LONG_RUN}:{'fetch' * 20}:1",
              "kind": "step", "name": "fetch", "attempt": 1, "result": "r" * 200, "at": AT}],
            width),
        "timeline": timeline_table(
            LONG_RUN,
            operations([{"event": "step_succeeded", "op_id": f"{LONG_RUN}:{'fetch' * 20}:1",
                         "kind": "step", "name": "fetch", "attempt": 1, "at": AT}]),
            width),
        "show": run_details({"run_id": LONG_RUN, "parent_run_id": LONG_RUN, "agent": "a",
                             "status": "SUCCEEDED", "result": "r" * 200}, width),
    }  # fmt: skip
    shown = "\n".join(rows.values())
    for one_id in (LONG_RUN, "apr-" + "9" * 90, LONG_OP, f"{'fetch' * 20}:1"):
        assert one_id in shown, (one_id, shown)
    assert rows["approvals"].splitlines()[1].count(LONG_RUN) == 1
    assert rows["show"].count(LONG_RUN) == 2
    # The other columns still shrink: the long texts are cut, not the ids.
    assert "a" * 50 not in rows["runs"] and "…" in rows["runs"]
    assert "s" * 200 not in rows["approvals"] and "n" * 200 not in rows["reviews"]
    assert "r" * 200 not in rows["history"] and "r" * 200 not in rows["show"]


def test_a_table_without_long_ids_still_fits_the_width() -> None:
    table = runs_table(
        [{"run_id": RUN, "agent": "a" * 60, "status": "SUCCEEDED", "created_at": AT,
          "updated_at": AT}], 80)  # fmt: skip
    assert all(len(line) <= 80 for line in table.splitlines())


def test_the_outcome_of_a_watch_keeps_the_run_id_whole() -> None:
    line = outcome({"run_id": LONG_RUN, "status": "SUCCEEDED", "result": "r" * 200}, 40)
    assert line.startswith(f"{LONG_RUN} SUCCEEDED") and line.endswith("…")


def test_the_apis_conflict_messages_name_statuses_not_python_reprs(deployment: Deployment) -> None:
    from api.services import get_runtime

    status, body = call("POST", "/runs", GOOD)
    assert status == 201
    run_id = body["run"]["run_id"]
    get_runtime().store.commit(
        run_id,
        [],
        RunChange(
            expected=frozenset({RunStatus.RUNNING}),
            status=RunStatus.SUCCEEDED,
            updated_at_ms=1,
            result="done",
        ),
    )
    for path in (f"/runs/{run_id}/redrive", f"/runs/{run_id}/cancel"):
        status, body = call("POST", path, {} if path.endswith("cancel") else None)
        assert status == 409, body
        message = body["error"]["message"]
        assert not re.search(r"<\w+\.\w+: '", message), message
        assert "SUCCEEDED" in message and "RunStatus" not in message, message


def test_run_state_conflicts_show_status_values() -> None:
    error = RunStateConflictError(
        "run-1", sorted({RunStatus.RUNNING, RunStatus.SUSPENDED}), RunStatus.FAILED
    )
    assert str(error) == "run 'run-1' is FAILED, expected RUNNING or SUSPENDED"
    assert str(RunStateConflictError("run-1", ["a header that stays still"], "changing")) == (
        "run 'run-1' is changing, expected a header that stays still"
    )


@pytest.mark.parametrize("argv", [["runs", "show", RUN, "--json"], ["runs", "list"]])
def test_a_reader_that_stops_early_ends_the_cli_quietly(api: StandIn, argv: list[str]) -> None:
    big = {"run_id": RUN, "agent": "a", "status": "SUCCEEDED", "input": "x" * 300_000}
    api.answers[("GET", f"/runs/{RUN}")] = (200, big)
    api.answers[("GET", "/runs")] = (200, {"runs": [{**big, "input": None}] * 5_000})
    cli = subprocess.Popen(
        [sys.executable, "-m", "durable_agents_local.cli.main", *argv, "--api-url", api.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert cli.stdout is not None and cli.stderr is not None
    first = cli.stdout.readline()  # `| head -1`: one line, then the pipe is closed
    cli.stdout.close()
    err = cli.stderr.read().decode()
    assert cli.wait(timeout=60) == 141, err  # 128 + SIGPIPE, as `yes | head -1` reports
    assert first.strip() and err == ""


def _signed_to(url: str) -> ApiClient:
    # A deployed Api's client (what --stack/--api-url https://… connect to), aimed at the stand-in.
    return ApiClient(url, credentials=Credentials("AKIDEXAMPLE", "secret"), region="eu-west-1")


def test_runs_start_on_a_deployed_stack_goes_through_the_signed_client(
    api: StandIn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: dict[str, object] = {}

    def connect(**options: object) -> ApiClient:
        asked.update(options)
        return _signed_to(api.url)

    monkeypatch.setattr(api_client, "connect", connect)
    api.answers[("POST", "/runs")] = (201, {"run": {"run_id": RUN, "status": "RUNNING"}})
    api.answers[("GET", f"/runs/{RUN}")] = (200, {"run_id": RUN, "status": "SUCCEEDED",
                                                  "result": "Hello, Ada!"})  # fmt: skip
    argv = ["runs", "start", "greeter", "Ada", "--stack", "prod", "--region", "eu-west-1",
            "--profile", "ops", "--idempotency-key", "k1"]  # fmt: skip
    assert main(argv) == 0
    assert asked == {"api_url": None, "stack": "prod", "region": "eu-west-1",
                     "profile": "ops", "caller_arn": None}  # fmt: skip
    post, get = api.received[0], api.received[-1]
    assert (post.method, post.path, get.method, get.path) == (
        "POST",
        "/runs",
        "GET",
        f"/runs/{RUN}",
    )
    assert post.body == {"agent": "greeter", "input": "Ada", "idempotency_key": "k1"}
    assert all(r.headers["Authorization"].startswith("AWS4-HMAC-SHA256 ") for r in api.received)
    assert capsys.readouterr().out == f'{RUN} SUCCEEDED result: "Hello, Ada!"\n'


def test_runs_start_on_a_deployed_api_neither_waits_nor_retries(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setattr(api_client, "connect", lambda **_: _signed_to(down))
    url = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod"
    started = time.monotonic()
    assert main(["runs", "start", "greeter", "Ada", "--api-url", url, "--wait", "20"]) == 1
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert err.startswith(f"error: nothing answers at {down}") and "waiting" not in err
    assert "durable-agents local" not in err


def test_runs_start_takes_the_caller_and_the_api_after_the_command_in_local_mode(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", "/runs")] = (201, {"run": {"run_id": RUN, "status": "SUCCEEDED"}})
    caller = "arn:aws:iam::000000000000:user/ada"
    for where in ("--api", "--api-url"):
        argv = ["runs", "start", "greeter", "1", where, api.url, "--caller-arn", caller]
        assert main([*argv, "--wait", "0"]) == 0
    assert [r.headers[CALLER_HEADER] for r in api.received] == [caller, caller]
    assert all("Authorization" not in r.headers for r in api.received)  # local: unsigned
    assert [r.body["input"] for r in api.received] == [1, 1]


def test_a_setup_error_of_runs_start_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def connect(**_: object) -> ApiClient:
        raise ApiConfigError("cannot read stack 'gone': Stack with id gone does not exist")

    monkeypatch.setattr(api_client, "connect", connect)
    assert main(["runs", "start", "greeter", "Ada", "--stack", "gone"]) == 2
    assert capsys.readouterr().err.startswith("error: cannot read stack 'gone'")


def test_the_other_commands_print_a_422s_field_errors_too(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    details = [{"loc": ["result"], "msg": "Field required"}]
    body = {"error": {"message": "the request body does not match the schema", "details": details}}
    api.answers[("POST", "/reviews/op-1")] = (422, body)
    assert main(["reviews", "decide", "op-1", "committed", "--api-url", api.url]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: POST /reviews/op-1 answered 422: the request body does not match the schema",
        "  result: Field required",
    ]
