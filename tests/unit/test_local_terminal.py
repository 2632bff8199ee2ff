"""Local mode's terminal lines: one per invocation, and the agents' own lines, readable."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest

from durable_agents.core.observability import agent_logger, agent_loggers
from durable_agents_local.invoke import failure_phrase, summarize
from durable_agents_local.terminal import AgentLineFormatter, one_line, show_agent_lines

RUN = "run-8f0c1d2e3a4b5c6d"
STAMP = r"\d\d:\d\d:\d\d\.\d{3}"


def test_a_step_names_the_agent_the_run_what_it_executed_and_the_outcome() -> None:
    result = {
        "run_id": RUN,
        "agent": "greeter",
        "outcome": "continue",
        "executed": [f"{RUN}:plan:1", f"{RUN}:gather/fetch-1:2"],
    }
    assert summarize({}, result) == f"greeter {RUN} plan:1, gather/fetch-1:2 -> continue"


def test_a_step_that_executed_nothing_or_found_no_run_says_so_briefly() -> None:
    contended = {"run_id": RUN, "agent": "greeter", "outcome": "contended", "executed": []}
    assert summarize({}, contended) == f"greeter {RUN} -> contended"
    gone = {"run_id": RUN, "outcome": "not_found", "executed": []}  # no header: no agent
    assert summarize({}, gone) == f"{RUN} -> not_found"


def test_a_failed_run_names_its_error_on_one_line() -> None:
    result = {
        "run_id": RUN,
        "agent": "grumpy",
        "outcome": "failed",
        "executed": [],
        "error": 'ValueError: no\nway "out"',
    }
    assert summarize({}, result) == f'grumpy {RUN} -> failed: ValueError: no\\nway \\"out\\"'


def test_an_invocation_that_raised_names_the_error_type_and_message_on_one_line() -> None:
    assert failure_phrase(KeyError("run_id")) == "raised KeyError: 'run_id'"
    assert failure_phrase(RuntimeError()) == "raised RuntimeError"
    long = failure_phrase(ValueError("x" * 500))
    assert len(long) < 200 and long.endswith("…")


def test_api_lines_keep_method_path_and_status() -> None:
    event = {"httpMethod": "POST", "path": "/runs"}
    response = {"statusCode": 201, "body": f'{{"run": {{"run_id": "{RUN}"}}}}'}
    assert summarize(event, response) == f"POST /runs -> 201 {RUN}"


def test_one_line_escapes_control_characters_and_cuts() -> None:
    assert one_line("a\tb\r\nc") == "a\\tb\\r\\nc"
    assert one_line("é ok") == "é ok"  # readable, not \\u00e9
    assert one_line("y" * 20, limit=10) == "y" * 9 + "…"


@pytest.fixture
def shown() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """An agent logger whose lines local mode shows, written to a buffer; restored after."""
    logger = agent_logger("test-terminal", {})
    # show_agent_lines takes over every agent logger of the process (the StepRunner's one too,
    # when an earlier test made it): all of them are given back as they were.
    saved = [(each, each.handlers[:], each.propagate) for each in agent_loggers()]
    written = io.StringIO()
    show_agent_lines(written)
    yield logger, written
    for each, handlers, propagate in saved:
        each.handlers[:], each.propagate = handlers, propagate


def test_an_agents_line_reads_at_a_glance(shown: tuple[logging.Logger, io.StringIO]) -> None:
    logger, written = shown
    logger.info(
        "checking %s",
        "Ada\nLovelace",
        extra={
            "run_id": RUN,
            "agent": "greeter",
            "tenant": "default",
            "operation_id": f"{RUN}:greet:1",
            "op_id": f"{RUN}:greet:1",
            "operation_name": "greet",
            "attempt": 1,
            "order": "o-1",
            "items": [1, 2],
            "note": "two words",
        },
    )
    logger.warning("no operation yet", extra={"run_id": RUN, "agent": "greeter"})
    first, second = written.getvalue().splitlines()
    assert re.fullmatch(
        rf"{STAMP} agent greeter {RUN} greet:1: checking Ada\\nLovelace "
        r'order=o-1 items=\[1,2\] note="two words"',
        first,
    ), first
    assert re.fullmatch(rf"{STAMP} WARNING: agent greeter {RUN} -: no operation yet", second)


def test_shown_lines_no_longer_reach_the_functions_json_handler(
    shown: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, _ = shown
    assert not logger.propagate
    assert isinstance(logger.handlers[0].formatter, AgentLineFormatter)


def test_who_recovered_a_call_is_read_from_the_new_step_lines() -> None:
    from durable_agents_local.verify import recovered_by

    lines = [
        f"10:00:00.000 StepRunnerFunction shop {RUN} -> contended (0.01s)",
        f"10:00:01.000 StepRunnerFunction shop {RUN} charge-card:1, ship:2 -> continue (0.20s)",
    ]
    assert recovered_by(lines, "charge-card:1") == "StepRunner"
    assert recovered_by(lines, "ship:2") == "StepRunner"
    assert recovered_by(lines, "charge-card:11") is None


def test_quiet_shows_only_the_agents_warnings(shown: tuple[logging.Logger, io.StringIO]) -> None:
    logger, _ = shown
    quiet = io.StringIO()
    show_agent_lines(quiet, quiet=True)
    logger.info("chatter", extra={"run_id": RUN, "agent": "greeter"})
    logger.warning("careful", extra={"run_id": RUN, "agent": "greeter"})
    assert [line.split(" ", 1)[1] for line in quiet.getvalue().splitlines()] == [
        f"WARNING: agent greeter {RUN} -: careful"
    ]


def test_a_revealed_secret_is_masked_in_the_readable_line(
    shown: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_agents.core import scrub

    monkeypatch.setattr(scrub, "_revealed", type(scrub._revealed)())
    monkeypatch.setattr(scrub, "_ordered", ())
    scrub.remember("sk-live-0123456789")
    logger, written = shown
    # Written to the logger directly, not through ctx.logger (which masks it first).
    logger.info(
        "key %s", "sk-live-0123456789", extra={"run_id": RUN, "token": "sk-live-0123456789"}
    )
    assert "sk-live" not in written.getvalue()
    assert 'key *** token="***"' in written.getvalue()
