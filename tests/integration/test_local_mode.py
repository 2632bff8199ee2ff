"""Local mode end to end: a moto server process, a worker process, real HTTP, the CLI.

Each test talks to the worker the way a user does (HTTP on 127.0.0.1, the ``durable-agents``
CLI). The crash tests (SIGKILL mid-step, ``--crash-at`` between a charge and the COMMIT) are in
``test_local_crash_recovery.py``; the pieces without processes in ``test_local_parts.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from durable_agents.aws.eventbridge import EventBridgePublisher
from durable_agents.engine.events import step_ready
from durable_agents_local.cli.main import main as cli_main
from durable_agents_local.functions import (
    local_name,
)
from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.processes import WorkerProcess, http_json
from durable_agents_local.verify import (
    is_result,
    step_starts,
)
from tests.integration.local_workers import (
    get,
    history,
    start_run,
    start_worker,
    wait_for_status,
    wait_until,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def worker(moto: MotoProcess) -> Iterator[WorkerProcess]:
    process = start_worker(moto)
    yield process
    process.stop()


# -- happy path --------------------------------------------------------------------------------


def test_run_succeeds_over_http_and_duplicate_events_race_harmlessly(
    moto: MotoProcess, worker: WorkerProcess
) -> None:
    run_id = start_run(worker, {"topic": "local mode", "sections": 2, "pause_seconds": 0.5})
    # Extra Step Ready events for the same run: several consumers take them at once.
    publisher = EventBridgePublisher(moto.session().client("events"), local_name("EventBus"))
    publisher.publish([step_ready(run_id, "duplicate") for _ in range(6)])

    run = wait_for_status(worker, run_id, "SUCCEEDED", timeout=30)
    assert run["result"]["topic"] == "local mode"
    assert [s["title"] for s in run["result"]["sections"]] == [
        "local mode: background",
        "local mode: how it works",
    ]

    events = history(worker, run_id)
    assert events[0]["event"] == "run_started"
    assert events[-1]["event"] == "run_succeeded"
    assert step_starts(events) == {"plan": 1, "fetch-1": 1, "fetch-2": 1, "summarize": 1}
    names = [e["name"] for e in events if is_result(e)]
    assert names == ["plan", "fetch-1", "fetch-2", "gather", "cool-down", "summarize", "now"]

    status, listing = get(worker, "/runs?status=succeeded")
    assert status == 200
    assert run_id in [r["run_id"] for r in listing["runs"]]


# -- DynamoDB stream events (the outbox relay) -------------------------------------------------


def test_journal_stream_records_are_relayed_to_the_bus(
    moto: MotoProcess, worker: WorkerProcess
) -> None:
    session = moto.session()
    sqs, events = session.client("sqs"), session.client("events")
    queue = sqs.create_queue(QueueName="test-outbox-listener")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    bus = local_name("EventBus")
    events.put_rule(
        Name="test-outbox-listener",
        EventBusName=bus,
        EventPattern=json.dumps({"source": ["durable-agents.outbox"]}),
    )
    events.put_targets(
        Rule="test-outbox-listener", EventBusName=bus, Targets=[{"Id": "test", "Arn": arn}]
    )
    # An outbox entry as ctx.emit records it; the relay reads it from the table's stream.
    session.client("dynamodb").put_item(
        TableName=local_name("JournalTable"),
        Item={
            "pk": {"S": "RUN#run-outbox"},
            "sk": {"S": "J#0001|e"},
            "op_id": {"S": "run-outbox:announce:1"},
            "outbox": {"S": "1"},
            "value": {"S": json.dumps({"detail_type": "Report Ready", "detail": {"n": 1}})},
        },
    )

    def relayed() -> Any:
        return sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1).get("Messages")

    messages = wait_until(relayed, 20, "the outbox event on the bus")
    event = json.loads(messages[0]["Body"])
    assert event["detail-type"] == "Report Ready"
    assert event["detail"] == {
        "event_id": "run-outbox:announce:1",
        "run_id": "run-outbox",
        "data": {"n": 1},
    }


# -- 4xx over real HTTP ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "error_type"),
    [
        ("POST", "/runs", b"{not json", 400, "BadRequest"),
        ("POST", "/runs", b'{"agent": "no-such-agent"}', 404, "AgentNotFoundError"),
        (
            "POST",
            "/runs",
            b'{"agent": "example-research", "input": {"topic": ""}}',
            422,
            "InputValidationError",
        ),
        ("GET", "/runs/run-0000000000000000", None, 404, "RunNotFoundError"),
        ("GET", "/runs/run-0000000000000000/history", None, 404, "RunNotFoundError"),
        ("GET", "/nowhere", None, 404, "NotFound"),
        ("DELETE", "/runs", None, 405, "MethodNotAllowed"),
    ],
)
def test_rejections_over_http(
    worker: WorkerProcess,
    method: str,
    path: str,
    body: bytes | None,
    status: int,
    error_type: str,
) -> None:
    code, answer = http_json(method, f"{worker.base_url}{path}", raw=body)
    assert code == status, answer
    assert answer["error"]["type"] == error_type
    assert answer["error"]["message"]


# -- the CLI against the local Api ---------------------------------------------------------------


def test_cli_reads_runs_through_the_api(
    moto: MotoProcess, worker: WorkerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = start_run(worker, {"topic": "cli", "sections": 1, "pause_seconds": 0})
    wait_for_status(worker, run_id, "SUCCEEDED", timeout=30)
    endpoint = ["--api-url", worker.base_url]

    assert cli_main(["runs", "list", "--status", "succeeded", *endpoint]) == 0
    out = capsys.readouterr().out
    header = ["RUN", "ID", "AGENT", "VERSION", "STATUS", "CREATED", "UPDATED"]
    assert out.splitlines()[0].split() == header
    assert any(line.startswith(run_id) and "SUCCEEDED" in line for line in out.splitlines())
    by_version = ["--agent", "example-research", "--version", "1", "--json"]
    assert cli_main(["runs", "list", *by_version, *endpoint]) == 0
    assert run_id in {r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]}
    assert (
        cli_main(["runs", "list", "--agent", "example-research", "--version", "9", *endpoint]) == 0
    )
    assert capsys.readouterr().out.strip() == "no runs"

    assert cli_main(["runs", "show", run_id, "--json", *endpoint]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "SUCCEEDED"
    assert shown["result"]["topic"] == "cli"

    assert cli_main(["runs", "history", run_id, *endpoint]) == 0
    timeline = capsys.readouterr().out
    assert "step_started" in timeline
    assert "gather:2/fetch-1:1" in timeline
    assert timeline.rstrip().splitlines()[-1].split()[1] == "run_succeeded"

    assert cli_main(["runs", "history", run_id, "--json", *endpoint]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == history(worker, run_id)

    assert cli_main(["runs", "redrive", run_id, *endpoint]) == 1
    assert "answered 409" in capsys.readouterr().err


def test_cli_reports_unknown_runs_and_a_stopped_api(
    moto: MotoProcess, worker: WorkerProcess
) -> None:
    command = [sys.executable, "-m", "durable_agents_local.cli.main", "runs", "show"]
    unknown = subprocess.run(
        [*command, "run-0000000000000000", "--api-url", worker.base_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unknown.returncode == 1
    assert "no such run run-0000000000000000" in unknown.stderr

    down = f"http://127.0.0.1:{free_port()}"
    stopped = subprocess.run(
        [*command, "run-0000000000000000", "--api-url", down],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert stopped.returncode == 1
    assert f"cannot reach {down}" in stopped.stderr
