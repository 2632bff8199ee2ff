"""Flow control from the CLI against a stand-in Api (ADR 0030): what is sent, printed, exited.

``runs start --priority/--budget-*``, ``runs budget``, ``flow``, and QUEUED/BUDGET_EXCEEDED in
the listings, ``runs show``, ``runs watch`` and ``runs start``'s wait.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from durable_agents_local.cli.main import build_parser, main
from durable_agents_local.cli.tables import run_details
from durable_agents_local.cli.watch import exit_code, outcome
from durable_agents_local.runs_flow import FlowUsageError, flow_tables, start_options
from tests.unit.api_standin import StandIn, stand_in_api

RUN = "run-0123456789abcdef"
VIEW = {"run_id": RUN, "agent": "research", "status": "QUEUED",
        "versions": {"workflow_version": "1"}, "created_at": "2026-12-01T20:00:00.000+00:00",
        "updated_at": "2026-12-01T20:00:01.000+00:00"}  # fmt: skip
BUDGET = {
    "root_run_id": RUN,
    "limit": {"tokens": 1250, "cost_usd": None},
    "used": {"tokens_in": 400, "tokens_out": 400, "tokens": 800, "cost_usd": 0.0072, "calls": 8},
    "on_exceeded": "pause",
    "exceeded": False,
    "extensions": [{"by": "user:ops", "reason": "worth it\x1b]0;x", "at_ms": 1, "add_tokens": 1000,
                    "add_cost_usd": 0.0}],
}  # fmt: skip
OVERVIEW = {
    "agents": [
        {"agent": "batch-worker", "limit": 3, "per_key": 1, "key": "input.customer",
         "running": 3, "queued": 5, "oldest_wait_ms": 125_000,
         "keys": [{"key": "acme", "running": 1, "queued": 4, "oldest_wait_ms": 125_000},
                  {"key": "evil\x1b[2J", "running": 1, "queued": 1, "oldest_wait_ms": 2_500}]},
    ],
    "rate_limits": [
        {"limiter": "model#flow-summarizer", "requests": 3, "tokens": None, "per_seconds": 60.0,
         "used_requests": 2, "used_tokens": 310, "waits_today": 7},
    ],
}  # fmt: skip


@pytest.fixture
def api() -> Iterator[StandIn]:
    with stand_in_api() as stand_in:
        yield stand_in


# ----------------------------------------------------------------------------- runs start
def test_runs_start_sends_the_priority_and_the_budget(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("POST", "/runs")] = (201, {"run": {"run_id": RUN, "status": "SUCCEEDED"}})
    argv = ["runs", "start", "research", '{"topic": "x"}', "--priority", "1", "--budget-tokens",
            "5000", "--budget-usd", "0.25", "--on-budget-exceeded", "fail",
            "--api", api.url]  # fmt: skip
    assert main(argv) == 0
    assert api.received[0].body == {
        "agent": "research", "input": {"topic": "x"}, "priority": 1,
        "budget": {"tokens": 5000, "cost_usd": 0.25, "on_exceeded": "fail"},
    }  # fmt: skip
    # Without them: the body is as before (the agent's priority and budget apply).
    assert main(["runs", "start", "research", "x", "--api", api.url]) == 0
    assert api.received[-1].body == {"agent": "research", "input": "x"}
    capsys.readouterr()


def test_runs_start_refuses_bad_flow_options_and_sends_nothing(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["runs", "start", "research", "x", "--on-budget-exceeded", "pause", "--api", api.url]
    assert main(argv) == 2
    assert "needs a budget" in capsys.readouterr().err
    for bad in (["--priority", "0"], ["--priority", "6"], ["--priority", "high"],
                ["--budget-tokens", "-1"], ["--budget-tokens", "1.5"], ["--budget-usd", "nan"],
                ["--budget-usd", "-2"], ["--on-budget-exceeded", "ignore"]):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            main(["runs", "start", "research", "x", *bad, "--api", api.url])
        assert exited.value.code == 2, bad
    assert api.received == []
    capsys.readouterr()


def test_start_options_alone() -> None:
    assert start_options(None, None, None, None) == {}
    assert start_options(None, None, 1.5, None) == {"budget": {"cost_usd": 1.5}}
    with pytest.raises(FlowUsageError):
        start_options(2, None, None, "fail")


def test_a_started_run_over_its_budget_stops_the_wait_and_says_how_to_extend_it(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    paused = {"run_id": RUN, "status": "BUDGET_EXCEEDED", "waiting_on": {"kind": "budget"}}
    api.answers[("POST", "/runs")] = (201, {"run": {"run_id": RUN, "status": "RUNNING"}})
    api.answers[("GET", f"/runs/{RUN}")] = (200, paused)
    argv = ["runs", "start", "research", "x", "--budget-tokens", "10", "--wait", "30"]
    assert main([*argv, "--api", api.url]) == 1  # it needs a person: not a success
    out = capsys.readouterr().out
    assert f"{RUN} BUDGET_EXCEEDED" in out and f"runs budget {RUN} --add-tokens" in out
    assert len(api.received) == 2  # no polling until --wait ran out


# ---------------------------------------------------------------------------- runs budget
def test_runs_budget_posts_the_extension_and_says_what_it_did(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = {"run_id": RUN, "budget": BUDGET}
    api.answers[("POST", f"/runs/{RUN}/budget")] = (200, answer)
    argv = ["runs", "budget", RUN, "--add-tokens", "1000", "--reason", "worth it", "--api",
            api.url]  # fmt: skip
    assert main(argv) == 0
    assert api.received[0].body == {"add_tokens": 1000, "add_cost_usd": 0.0, "reason": "worth it"}
    out = capsys.readouterr().out
    assert f"budget of {RUN} extended" in out
    assert "tokens:  800 / 1250" in out and "dollars: $0.0072 / no limit" in out
    assert "by user:ops: worth it\\x1b]0;x" in out and "\x1b" not in out  # escaped
    assert "the runs it paused are woken" in out
    assert main([*argv, "--add-usd", "2.5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == answer
    assert api.received[-1].body["add_cost_usd"] == 2.5


def test_runs_budget_needs_a_reason_and_refusals_exit_1(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["runs", "budget", RUN, "--add-tokens", "5"])
    assert exited.value.code == 2
    message = {"error": {"message": f"run {RUN} has no budget"}}
    api.answers[("POST", f"/runs/{RUN}/budget")] = (409, message)
    argv = ["runs", "budget", RUN, "--add-tokens", "5", "--reason", "r", "--api", api.url]
    assert main(argv) == 1
    assert "answered 409" in capsys.readouterr().err
    still = {**BUDGET, "exceeded": True}
    api.answers[("POST", f"/runs/{RUN}/budget")] = (200, {"run_id": RUN, "budget": still})
    assert main(argv) == 0
    assert "still exceeded" in capsys.readouterr().out


# ----------------------------------------------------------------------------------- flow
def test_flow_prints_queues_per_key_and_rate_limits_or_json(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answers[("GET", "/flow")] = (200, OVERVIEW)
    assert main(["flow", "--api", api.url]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "evil\\x1b[2J" in out
    lines = out.splitlines()
    assert lines[0].split() == ["AGENT", "KEY", "RUNNING", "LIMIT", "QUEUED", "OLDEST", "WAIT"]
    assert lines[1].split() == ["batch-worker", "(all,", "by", "input.customer)", "3", "3", "5",
                                "2m05s"]  # fmt: skip
    assert lines[2].split() == ["acme", "1", "1", "4", "2m05s"]
    limiter = next(line for line in lines if line.startswith("model#flow-summarizer"))
    assert limiter.split() == ["model#flow-summarizer", "2", "/", "3", "310", "/", "no", "limit",
                               "60.0s", "7"]  # fmt: skip
    assert lines[lines.index(limiter) - 1].split() == ["LIMITER", "REQUESTS", "TOKENS", "PER",
                                                      "WAITS", "TODAY"]  # fmt: skip
    assert main(["flow", "--json", "--api", api.url]) == 0
    assert json.loads(capsys.readouterr().out) == OVERVIEW
    assert [r.path for r in api.received] == ["/flow", "/flow"]


def test_flow_says_when_nothing_is_limited_and_a_refusal_exits_1(
    api: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    assert flow_tables({"agents": [], "rate_limits": []}) == (
        "no agent has a concurrency limit\n\nno rate limits"
    )
    refused = {"error": {"message": "GET /flow shows every tenant's queues"}}
    api.answers[("GET", "/flow")] = (403, refused)
    assert main(["flow", "--api", api.url]) == 1
    assert "not allowed: GET /flow shows every tenant's queues" in capsys.readouterr().err


# ------------------------------------------------------------------ statuses like the others
def test_queued_and_budget_exceeded_are_listed_filtered_shown_and_watched(
    api: StandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # at 80 a long status is clipped, as any long cell
    over = {**VIEW, "run_id": "run-2", "status": "BUDGET_EXCEEDED"}
    api.answers[("GET", "/runs")] = (200, {"runs": [VIEW, over]})
    assert main(["runs", "list", "--status", "queued", "--api", api.url]) == 0
    assert api.received[0].query["status"] == "QUEUED"
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[3] == "QUEUED" and lines[2].split()[3] == "BUDGET_EXCEEDED"
    assert main(["runs", "list", "--status", "budget_exceeded", "--api", api.url]) == 0
    capsys.readouterr()
    flow = {"priority": 1, "queue": {"key": "acme", "waited_ms": 2000}}
    shown = run_details({**VIEW, "flow": flow}, 200)
    assert 'flow:               {"priority":1,"queue":{"key":"acme","waited_ms":2000}}' in shown
    assert exit_code(over) == 1
    assert "extend it (durable-agents runs budget)" in outcome(over, 120)
