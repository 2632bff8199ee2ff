"""``durable-agents runs rerun``: one run (``POST /runs/{id}/rerun``) or a filter's runs.

The Api is a stand-in served for real on 127.0.0.1 (``tests.unit.api_standin``) that answers
what ``functions/api/routes/reruns.py`` answers (``tests/unit/test_api_reruns.py`` shows the
real answers); the command's requests, what it prints, and its exit statuses are checked.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from durable_agents_local import runs_rerun
from durable_agents_local.cli.main import build_parser, main
from tests.unit.api_standin import StandIn, stand_in_api

RUN = "run-0123456789abcdef0123456789abcdef"  # longer than any column would leave it
NEW = "run-fedcba9876543210fedcba9876543210"
EFFECT = {
    "run_id": RUN,
    "operation_id": f"{RUN}:charge:2",
    "tool": "charge",
    "request": {"customer": "c-1", "cents": 500},
    "idempotency_key": "k-1",
    "external_id": "pay-1",
}
PLAN = {"rerun_of": RUN, "rerun_from": "charge:2", "copied_operations": 1, "chain": [RUN]}
CREATED = {
    "created": True,
    "run": {
        "run_id": NEW,
        "agent": "checkout",
        "status": "PENDING",
        "versions": {"workflow_version": "2"},
        "rerun_of": RUN,
        "rerun_from": "charge:2",
    },
    "reusable_effects": [EFFECT],
    "rerun": PLAN,
}
PATH = f"/runs/{RUN}/rerun"
HOSTILE = "no\x1b]0;pwned\x07 operation\n'pay'\u202e"


@pytest.fixture
def api() -> Iterator[StandIn]:
    with stand_in_api() as stand_in:
        yield stand_in


def test_a_rerun_prints_the_reusable_effects_first_then_the_new_run(
    api: StandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # the request is cut to what fits; here all of it
    api.answers[("POST", PATH)] = (201, CREATED)
    argv = ["runs", "rerun", RUN, "--from", "charge:2", "--version", "2", "--api", api.url]
    assert main(argv) == 0
    (sent,) = api.received
    assert sent.body == {"from": "charge:2", "version": "2", "repeat_effects": False,
                         "dry_run": False}  # fmt: skip
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "may reuse" in lines[0] and "1 side effect" in lines[0]
    effect = next(line for line in lines if "charge" in line.split())
    assert f"{RUN}:charge:2" in effect and '{"customer":"c-1","cents":500}' in effect
    assert lines.index(effect) < next(i for i, line in enumerate(lines) if NEW in line)
    assert f"started {NEW}" in out
    assert f"rerun_of: {RUN}" in out and "rerun_from: charge:2" in out
    # The default: from the failed operation, and no replacement input.
    assert main(["runs", "rerun", RUN, "--api", api.url]) == 0
    assert api.received[-1].body == {"from": "failed", "repeat_effects": False, "dry_run": False}


def test_ids_are_never_cut_on_a_narrow_terminal(
    api: StandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    api.answers[("POST", PATH)] = (201, CREATED)
    assert main(["runs", "rerun", RUN, "--api", api.url]) == 0
    out = capsys.readouterr().out
    assert NEW in out and f"{RUN}:charge:2" in out and f"rerun_of: {RUN}" in out


def test_the_same_request_again_names_the_same_rerun(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", PATH)] = (200, {**CREATED, "created": False})
    assert main(["runs", "rerun", RUN, "--api", api.url]) == 0
    out = capsys.readouterr().out
    assert NEW in out and "already" in out


def test_repeat_effects_says_which_effects_are_made_again(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = {**CREATED, "repeated_effects": [EFFECT]}
    del answer["reusable_effects"]
    api.answers[("POST", PATH)] = (201, answer)
    assert main(["runs", "rerun", RUN, "--repeat-effects", "--api", api.url]) == 0
    assert api.received[-1].body["repeat_effects"] is True
    first = capsys.readouterr().out.splitlines()[0]
    assert "repeat" in first and "1 side effect" in first


def test_a_dry_run_says_nothing_was_started(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", PATH)] = (
        200,
        {"dry_run": True, "rerun": PLAN, "reusable_effects": [EFFECT]},
    )
    assert main(["runs", "rerun", RUN, "--dry-run", "--api", api.url]) == 0
    assert api.received[-1].body["dry_run"] is True
    out = capsys.readouterr().out
    assert "dry run: nothing was started" in out
    assert f"{RUN}:charge:2" in out and "charge:2" in out


def test_a_replacement_input_is_sent_as_json(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", PATH)] = (201, CREATED)
    assert main(["runs", "rerun", RUN, "--input", '{"cents": 700}', "--api", api.url]) == 0
    assert api.received[-1].body["input"] == {"cents": 700}
    assert main(["runs", "rerun", RUN, "--input", "null", "--api", api.url]) == 0
    assert api.received[-1].body["input"] is None  # null replaces it too: sent, not left out


def test_malformed_input_is_refused_with_line_and_column_and_nothing_sent(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "rerun", RUN, "--input", '{"cents": }', "--api", api.url]) == 2
    err = capsys.readouterr().err
    assert "--input is not valid JSON" in err and "line 1 column 11" in err
    assert "Traceback" not in err
    assert api.received == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([RUN, "--agent", "checkout"], "not both"),
        ([], "RUN_ID"),
        (["--agent", "checkout", "--input", "{}"], "--input"),
        ([RUN, "--status", "failed"], "--status"),
        ([RUN, "--since", "1d"], "--since"),
        (["--agent", "checkout", "--limit", "26"], "--limit"),
    ],
)
def test_usage_errors_exit_2_and_send_nothing(
    api: StandIn, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert main(["runs", "rerun", *argv, "--api", api.url]) == 2
    assert says in capsys.readouterr().err
    assert api.received == []


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (409, {"error": {"type": "RerunRefusedError", "message": "run x is RUNNING: only a "
                         "finished run can be re-run (cancel or terminate it first)"}}),
        (400, {"error": {"type": "UnknownOperationError", "message": "no operation 'pay'"}}),
    ],
)  # fmt: skip
def test_a_refusal_is_the_apis_message_without_a_traceback(
    api: StandIn, capsys: pytest.CaptureFixture[str], status: int, body: dict[str, Any]
) -> None:
    api.answers[("POST", PATH)] = (status, body)
    assert main(["runs", "rerun", RUN, "--api", api.url]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: POST {PATH} answered {status}: ")
    assert body["error"]["message"] in captured.err
    assert "Traceback" not in captured.err and "{'" not in captured.err


def test_a_refusals_control_characters_are_escaped(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", PATH)] = (400, {"error": {"message": HOSTILE}})
    assert main(["runs", "rerun", RUN, "--api", api.url]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    assert "no\\x1b]0;pwned\\x07 operation 'pay'\\u202e" in err  # one line: its break a blank
    assert err.count("\n") == 1


def test_the_apis_text_in_a_rerun_is_escaped(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = {**EFFECT, "tool": "char\x1b[2Jge", "request": "pay\n\x07"}
    run = {**CREATED["run"], "status": "PEND\x1bING"}
    api.answers[("POST", PATH)] = (201, {**CREATED, "run": run, "reusable_effects": [hostile]})
    assert main(["runs", "rerun", RUN, "--api", api.url]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "char\\x1b[2Jge" in out and "PEND\\x1bING" in out


def test_json_prints_the_apis_answer(api: StandIn, capsys: pytest.CaptureFixture[str]) -> None:
    api.answers[("POST", PATH)] = (201, CREATED)
    assert main(["runs", "rerun", RUN, "--json", "--api", api.url]) == 0
    assert json.loads(capsys.readouterr().out) == CREATED


# Bulk: POST /runs/rerun, page by page, after counting the matches with GET /runs.

RUNS = [f"run-{i:032x}" for i in range(1, 4)]


def _result(run_id: str, outcome: str, **more: Any) -> dict[str, Any]:
    plan = {**PLAN, "rerun_of": run_id, "rerun_from": "ship:3"}
    effect = {**EFFECT, "run_id": run_id, "operation_id": f"{run_id}:charge:2"}
    base: dict[str, Any] = {"run_id": run_id, "outcome": outcome}
    if outcome in ("started", "existing", "planned"):
        base |= {"rerun": plan, "reusable_effects": [effect]}
    return base | more


def _bulk(api: StandIn, *pages: tuple[list[dict[str, Any]], str | None]) -> None:
    answers = []
    for results, cursor in pages:
        counts = {o: sum(r["outcome"] == o for r in results)
                  for o in ("started", "existing", "planned", "refused", "skipped")}  # fmt: skip
        answers.append((200, {"dry_run": False, "results": results, "cursor": cursor,
                              "counts": counts}))  # fmt: skip
    api.answers[("POST", "/runs/rerun")] = answers
    listed = [{"run_id": r} for r in RUNS]
    api.answers[("GET", "/runs")] = [(200, {"runs": listed[:2], "cursor": "l1"}),
                                     (200, {"runs": listed[2:], "cursor": None})]  # fmt: skip


def test_bulk_pages_until_the_cursor_is_null_and_prints_a_table(
    api: StandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    refusal = {"type": "UnknownOperationError", "message": "no operation 'ship'"}
    _bulk(
        api,
        ([_result(RUNS[0], "started", rerun_run_id=NEW, status="PENDING"),
          _result(RUNS[1], "refused", error=refusal)], "c1"),
        ([_result(RUNS[2], "skipped", reason="made by this request")], None),
    )  # fmt: skip
    argv = ["runs", "rerun", "--agent", "checkout", "--since", "2026-11-30", "--until",
            "2026-12-01T00:00:00Z", "--from", "ship", "--limit", "2", "--api", api.url]  # fmt: skip
    assert main(argv) == 0
    counted = [r for r in api.received if r.method == "GET"]
    assert [r.query for r in counted] == [
        {"agent": "checkout", "status": "FAILED", "since": "2026-11-30T00:00:00.000+00:00",
         "until": "2026-12-01T00:00:00.000+00:00", "limit": "100"},
        {"agent": "checkout", "status": "FAILED", "since": "2026-11-30T00:00:00.000+00:00",
         "until": "2026-12-01T00:00:00.000+00:00", "limit": "100", "cursor": "l1"},
    ]  # fmt: skip
    posts = [r.body for r in api.received if r.method == "POST"]
    assert posts[0] == {"agent": "checkout", "status": "FAILED",
                        "since": "2026-11-30T00:00:00.000+00:00",
                        "until": "2026-12-01T00:00:00.000+00:00", "from": "ship",
                        "repeat_effects": False, "dry_run": False, "limit": 2}  # fmt: skip
    assert posts[1] == {**posts[0], "cursor": "c1"}
    captured = capsys.readouterr()
    # Not a terminal: a plain progress line per page, on stderr.
    progress = captured.err.splitlines()
    assert len(progress) == 2 and "\r" not in captured.err
    assert "2/3" in progress[0] and "3/3" in progress[1]
    out = captured.out.splitlines()
    header = next(line for line in out if line.startswith("RUN ID"))
    assert header.split() == ["RUN", "ID", "OUTCOME", "RERUN", "RUN", "ID", "NOTE"]
    rows = out[out.index(header) + 1 : out.index(header) + 4]
    assert rows[0].split()[:3] == [RUNS[0], "started", NEW]
    assert rows[1].split()[:2] == [RUNS[1], "refused"]
    assert f"  {RUNS[1]}: no operation 'ship'" in out  # whole, under the table
    assert rows[2].split()[:3] == [RUNS[2], "skipped", "mad…"]  # cut: the ids are not
    assert "started 1" in out[-1] and "refused 1" in out[-1] and "skipped 1" in out[-1]


def test_bulk_on_a_terminal_draws_a_progress_bar() -> None:
    out = io.StringIO()
    progress = runs_rerun.Progress(out, tty=True, total=4, width=40)
    progress.page(2, {"started": 2})
    progress.page(2, {"started": 3, "refused": 1})
    progress.done()
    text = out.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1
    assert "2/4" in text and "4/4" in text
    assert all(len(part) <= 40 for part in text.strip("\n").split("\r"))


def test_bulk_dry_run_lists_what_would_happen_and_the_effects(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    _bulk(api, ([_result(r, "planned") for r in RUNS], None))
    argv = ["runs", "rerun", "--agent", "checkout", "--dry-run", "--repeat-effects",
            "--api", api.url]  # fmt: skip
    assert main(argv) == 0
    post = next(r.body for r in api.received if r.method == "POST")
    assert post["dry_run"] is True and post["repeat_effects"] is True
    out = capsys.readouterr().out
    assert "dry run: nothing was started" in out
    for run_id in RUNS:
        assert f"{run_id}:charge:2" in out  # the effect each would reuse
    assert "planned 3" in out.splitlines()[-1]


def test_bulk_json_is_every_page_in_one_answer(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    _bulk(
        api,
        ([_result(RUNS[0], "started", rerun_run_id=NEW, status="PENDING")], "c1"),
        ([_result(RUNS[1], "existing", rerun_run_id=NEW, status="RUNNING")], None),
    )
    assert main(["runs", "rerun", "--agent", "checkout", "--json", "--api", api.url]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [r["outcome"] for r in answer["results"]] == ["started", "existing"]
    assert answer["cursor"] is None and answer["dry_run"] is False
    assert answer["counts"]["started"] == 1 and answer["counts"]["existing"] == 1


def test_bulk_escapes_the_apis_text_in_the_table(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = {"type": "X", "message": HOSTILE}
    _bulk(api, ([_result(RUNS[0], "refused", error=refusal)], None))
    assert main(["runs", "rerun", "--agent", "checkout", "--api", api.url]) == 0
    captured = capsys.readouterr()
    for text in (captured.out, captured.err):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "no\\x1b]0;pwned\\x07" in captured.out


def test_a_bulk_refusal_is_an_error(api: StandIn, capsys: pytest.CaptureFixture[str]) -> None:
    api.answers[("GET", "/runs")] = (200, {"runs": [], "cursor": None})
    body = {"error": {"message": "status must be one of CANCELLED, FAILED"}}
    api.answers[("POST", "/runs/rerun")] = (400, body)
    argv = ["runs", "rerun", "--agent", "checkout", "--status", "running", "--api", api.url]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "answered 400: status must be one of" in err and "Traceback" not in err


def test_the_parser_takes_every_option() -> None:
    args = build_parser().parse_args(
        ["runs", "rerun", "--agent", "a", "--status", "cancelled", "--since", "6h"]
    )
    assert (args.run_id, args.agent, args.status) == (None, "a", "CANCELLED")
    assert args.since.endswith("+00:00")


def test_ctrl_c_says_what_was_done_and_how_to_go_on(
    api: StandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _bulk(api, ([_result(RUNS[0], "started", rerun_run_id=NEW, status="PENDING")], "c1"))

    def interrupted(*_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runs_rerun.Progress, "page", interrupted)
    argv = ["runs", "rerun", "--agent", "checkout", "--since", "2026-11-30", "--api", api.url]
    assert main(argv) == 130
    captured = capsys.readouterr()
    assert NEW in captured.out  # what was made is said
    assert "stopped after 1 run" in captured.err
    assert "again with --since 2026-11-30T00:00:00.000+00:00" in captured.err
