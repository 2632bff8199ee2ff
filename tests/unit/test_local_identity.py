"""Local mode's caller identity: ``--caller-arn`` sets it, ``X-Local-Caller-Arn`` overrides it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from durable_agents_local.cli.main import build_parser
from durable_agents_local.functions import FunctionSpec
from durable_agents_local.http_api import Route, build_event
from durable_agents_local.identity import CALLER_HEADER, LOCAL_CALLER_ARN
from durable_agents_local.worker import WorkerOptions, function_environment

ADA = "arn:aws:iam::123456789012:user/ada"


def _event(headers: list[tuple[str, str]], **kwargs: Any) -> dict[str, Any]:
    route = Route("GET", "/runs", function=None)  # type: ignore[arg-type]
    return build_event(
        route,
        {},
        method="GET",
        raw_path="/runs",
        headers=headers,
        body=b"",
        source_ip="127.0.0.1",
        **kwargs,
    )


def _arn(event: dict[str, Any]) -> str:
    return str(event["requestContext"]["identity"]["userArn"])


def test_the_default_caller_is_the_local_principal() -> None:
    assert _arn(_event([])) == LOCAL_CALLER_ARN == "arn:aws:iam::123456789012:user/local"


def test_caller_arn_sets_the_default_and_the_header_overrides_it() -> None:
    assert _arn(_event([], caller_arn=ADA)) == ADA
    other = "arn:aws:sts::123456789012:assumed-role/ops/lee"
    assert CALLER_HEADER == "X-Local-Caller-Arn"
    assert _arn(_event([(CALLER_HEADER, other)], caller_arn=ADA)) == other


def test_the_cli_takes_a_caller_arn() -> None:
    args = build_parser().parse_args(["local", "--caller-arn", ADA])
    assert args.caller_arn == ADA
    assert build_parser().parse_args(["local"]).caller_arn == LOCAL_CALLER_ARN


def test_the_cli_refuses_a_caller_that_is_not_an_arn(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["local", "--caller-arn", "ada"])
    assert "--caller-arn" in capsys.readouterr().err


def test_the_local_caller_mints_links_and_decides_reviews() -> None:
    spec = FunctionSpec("Fn", "m.handler", Path("."), 3, 128, 0, {})
    env = function_environment(
        [spec], WorkerOptions(caller_arn=ADA), "http://127.0.0.1:5010", "LOCALKEY"
    )
    assert env["LINK_MINTERS"] == f"iam:{ADA}"
    assert env["REVIEW_OPERATORS"] == f"iam:{ADA}"


def test_runs_start_says_what_to_do_when_nothing_answers() -> None:
    from durable_agents_local.moto_server import free_port
    from durable_agents_local.runs_start import RunStartError, parse_input, start_run

    assert parse_input('"Ada"') == "Ada" == parse_input("Ada")
    assert parse_input('{"topic": "x"}') == {"topic": "x"}
    with pytest.raises(RunStartError, match="start local mode first"):
        start_run(f"http://127.0.0.1:{free_port()}", "greeter", "Ada", wait_seconds=0.3)
