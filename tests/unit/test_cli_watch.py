"""``runs watch``: one updating line on a terminal, plain lines elsewhere, the run's exit code."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from durable_agents_local.cli.api_client import ApiClient, ApiNotFoundError, ApiUnreachableError
from durable_agents_local.cli.main import main
from durable_agents_local.cli.watch import MAX_INTERVAL, MIN_INTERVAL, Watch, WatchTimeoutError
from durable_agents_local.moto_server import free_port
from tests.unit.api_standin import StandIn, stand_in_api

RUN = "run-0123456789abcdef"
T0 = "2026-12-01T20:00:00.000+00:00"


def _run(status: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    return 200, {"run_id": RUN, "agent": "a", "status": status, "created_at": T0,
                 "updated_at": "2026-12-01T20:00:04.000+00:00", **extra}  # fmt: skip


def _history(*events: str) -> tuple[int, dict[str, Any]]:
    out: list[dict[str, Any]] = [{"event": "run_started", "run_id": RUN, "at": T0}]
    for i, event in enumerate(events):
        out.append({"event": event, "op_id": f"{RUN}:fetch:{i}", "kind": "step",
                    "name": "fetch", "attempt": 1, "at": T0})  # fmt: skip
    return 200, {"run_id": RUN, "events": out}


@pytest.fixture
def api() -> Iterator[StandIn]:
    with stand_in_api() as stand_in:
        stand_in.answers[("GET", f"/runs/{RUN}")] = [
            _run("RUNNING"), _run("RUNNING"), _run("RUNNING"), _run("SUCCEEDED", result=42)
        ]  # fmt: skip
        stand_in.answers[("GET", f"/runs/{RUN}/history")] = [
            _history("step_started"), _history("step_started"), _history("step_started"),
            _history("step_succeeded"),
        ]  # fmt: skip
        yield stand_in


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


def _watch(api: StandIn, *, tty: bool, **extra: Any) -> tuple[Watch, io.StringIO, _Clock]:
    out, clock = io.StringIO(), _Clock()
    watch = Watch(ApiClient(api.url), RUN, out, tty=tty, sleep=clock.sleep,
                  monotonic=clock.monotonic, **extra)  # fmt: skip
    return watch, out, clock


def test_on_a_terminal_one_line_is_rewritten_in_place(api: StandIn) -> None:
    watch, out, clock = _watch(api, tty=True)
    assert watch.run()["status"] == "SUCCEEDED"
    text = out.getvalue()
    frames = text.split("\r")[1:]
    assert len(frames) == 4 and text.endswith("\n") and text.count("\n") == 1
    assert frames[0].startswith(f"{RUN}  RUNNING  0.00s  0/1 done  last step_started fetch")
    assert frames[-1].startswith(f"{RUN}  SUCCEEDED  3.50s  1/1 done  last step_succeeded fetch")
    assert all(len(f.rstrip("\n")) <= 80 for f in frames)
    # Nothing changed: the polls back off; a change would reset them to MIN_INTERVAL.
    assert clock.slept == [MIN_INTERVAL, MIN_INTERVAL * 2, MIN_INTERVAL * 4]


def test_elsewhere_a_line_is_printed_per_change(api: StandIn) -> None:
    watch, out, _ = _watch(api, tty=False)
    watch.run()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split("  ")[1] for line in lines] == ["RUNNING", "SUCCEEDED"]


def test_polls_back_off_to_the_maximum(api: StandIn) -> None:
    api.answers[("GET", f"/runs/{RUN}")] = [_run("SUSPENDED")] * 8 + [_run("FAILED")]
    api.answers[("GET", f"/runs/{RUN}/history")] = _history("timer_scheduled")
    watch, _, clock = _watch(api, tty=False)
    assert watch.run()["status"] == "FAILED"
    assert max(clock.slept) == MAX_INTERVAL and clock.slept[-1] == MAX_INTERVAL


def test_a_timeout_and_an_unknown_run_end_the_watch(api: StandIn) -> None:
    api.answers[("GET", f"/runs/{RUN}")] = _run("RUNNING")
    watch, out, _ = _watch(api, tty=True, timeout=3)
    with pytest.raises(WatchTimeoutError, match="still RUNNING after 3s"):
        watch.run()
    assert out.getvalue().endswith("\n")
    gone, _, _ = _watch(api, tty=False)
    api.answers.pop(("GET", f"/runs/{RUN}"))
    with pytest.raises(ApiNotFoundError, match=f"no such run {RUN}"):
        gone.run()


def test_an_api_that_stays_down_ends_the_watch_after_some_polls() -> None:
    clock = _Clock()
    client = ApiClient(f"http://127.0.0.1:{free_port()}", timeout=1)
    watch = Watch(client, RUN, io.StringIO(), tty=False, sleep=clock.sleep,
                  monotonic=clock.monotonic)  # fmt: skip
    with pytest.raises(ApiUnreachableError):
        watch.run()
    assert len(clock.slept) == 4  # MAX_UNREACHABLE - 1 retries, backing off


@pytest.mark.parametrize(
    ("final", "code"),
    [("SUCCEEDED", 0), ("FAILED", 1), ("CANCELLED", 1), ("TIMED_OUT", 1), ("PAUSED", 1)],
)
def test_the_command_exits_with_the_runs_outcome(
    api: StandIn, final: str, code: int, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr("durable_agents_local.cli.watch.MIN_INTERVAL", 0.01)
    api.answers[("GET", f"/runs/{RUN}")] = [_run("RUNNING"), _run(final, result=42)]
    assert main(["runs", "watch", RUN, "--api-url", api.url]) == code
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith(f"{RUN} {final} after 4.00s")
    if final == "SUCCEEDED":
        assert out[-1].endswith("result: 42")


def test_ctrl_c_stops_watching_cleanly(
    api: StandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(self: Watch) -> dict[str, Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(Watch, "run", interrupted)
    assert main(["runs", "watch", RUN, "--api-url", api.url]) == 130
    captured = capsys.readouterr()
    assert "stopped watching; the run goes on" in captured.err
    assert "Traceback" not in captured.err


def test_with_json_stdout_holds_only_the_run(
    api: StandIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("durable_agents_local.cli.watch.MIN_INTERVAL", 0.01)
    assert main(["runs", "watch", RUN, "--json", "--api-url", api.url]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["result"] == 42
    assert captured.err.splitlines()[0].startswith(f"{RUN}  RUNNING")  # the progress


@pytest.mark.parametrize("tty", [True, False])
def test_a_run_waiting_for_an_approval_names_it_and_the_command_that_decides_it(
    api: StandIn, tty: bool
) -> None:
    waiting = {"kind": "approval", "approval_id": "apr-\x1b[2Jx", "op_id": f"{RUN}:ok:1"}
    api.answers[("GET", f"/runs/{RUN}")] = [
        _run("SUSPENDED", waiting_on=waiting), _run("SUSPENDED", waiting_on=waiting),
        _run("SUCCEEDED", result=42),
    ]  # fmt: skip
    api.answers[("GET", f"/runs/{RUN}/history")] = [_history("step_started")] * 3
    aid = "apr-\\x1b[2Jx"
    hint = f"waiting for approval {aid}: durable-agents approvals decide {aid} approve|reject"
    watch, out, _ = _watch(api, tty=tty, width=40)
    watch.run()
    text = out.getvalue()
    assert text.count(hint) == 1, text  # whole, though wider than the terminal; once
    assert "\x1b" not in text
