"""Local mode end to end: a moto server process, worker processes, real HTTP, SIGKILL.

Each test talks to the worker the way a user does (HTTP on 127.0.0.1, the ``durable-agents``
CLI); the crash tests kill the worker with SIGKILL in the middle of a step (or let it kill
itself with ``--crash-at`` between a provider's charge and the COMMIT) and check from the
journal and the providers' ledgers that nothing recorded ran again and nothing was charged
twice.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_agents.cli import main as cli_main
from durable_agents.clock import SystemClock
from durable_agents.events import EventBridgePublisher, step_ready
from durable_agents.local.aws import LocalSession
from durable_agents.local.crash import CrashHooks, CrashSpec
from durable_agents.local.functions import (
    FunctionSpec,
    StreamEvent,
    local_name,
    make_resolver,
    read_functions,
)
from durable_agents.local.invoke import LocalFunction
from durable_agents.local.moto_server import MotoProcess, free_port
from durable_agents.local.patterns import matches, matches_any
from durable_agents.local.processes import WorkerProcess, http_json
from durable_agents.local.runs import RunsClient
from durable_agents.local.services import ServicesHandle
from durable_agents.local.stream_router import StreamPoller, StreamRoute
from durable_agents.local.template import load_template
from durable_agents.local.verify import (
    crash_recovery_failures,
    is_result,
    prepared_at_crash_failures,
    recovered_by,
    sandwich_failures,
    step_starts,
)
from durable_agents.local.worker import services_environment

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORK_SECONDS = "0.5"
# A 1 s StepRunner timeout gives a 6 s claim lease (1 s + the runtime's 5 s margin), and the
# reconciler re-drives a stalled run after 1 s: a killed step is retried ~6 s after its claim.
WORKER_ARGS = [
    "--function-timeout",
    "StepRunnerFunction=1",
    "--stall-after",
    "1",
    "--log-level",
    "ERROR",
]
AGENT = "example-research"


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def start_worker(
    moto: MotoProcess, args: list[str] | None = None, env: dict[str, str] | None = None
) -> WorkerProcess:
    worker = WorkerProcess(
        api_port=free_port(),
        moto_endpoint=moto.endpoint,
        args=WORKER_ARGS + (args or []),
        cwd=ROOT,
        env={"EXAMPLE_WORK_SECONDS": WORK_SECONDS, **(env or {})},
    )
    worker.start()
    return worker


@pytest.fixture(scope="module")
def worker(moto: MotoProcess) -> Iterator[WorkerProcess]:
    process = start_worker(moto)
    yield process
    process.stop()


def get(worker: WorkerProcess, path: str) -> tuple[int, Any]:
    return http_json("GET", f"{worker.base_url}{path}")


def start_run(worker: WorkerProcess, input_value: Any, agent: str = AGENT) -> str:
    status, body = http_json(
        "POST", f"{worker.base_url}/runs", {"agent": agent, "input": input_value}
    )
    assert status == 201, body
    return str(body["run"]["run_id"])


def wait_for_status(worker: WorkerProcess, run_id: str, wanted: str, timeout: float) -> Any:
    def check() -> Any:
        status, run = get(worker, f"/runs/{run_id}")
        assert status == 200, run
        assert run["status"] not in ("FAILED", "PAUSED"), run
        return run if run["status"] == wanted else None

    return wait_until(check, timeout, f"run {run_id} to be {wanted}")


def history(worker: WorkerProcess, run_id: str) -> list[dict[str, Any]]:
    status, body = get(worker, f"/runs/{run_id}/history")
    assert status == 200, body
    return list(body["events"])


# -- happy path --------------------------------------------------------------------------------


def test_run_succeeds_over_http_and_duplicate_events_race_harmlessly(
    moto: MotoProcess, worker: WorkerProcess
) -> None:
    run_id = start_run(worker, {"topic": "local mode", "sections": 2, "pause_seconds": 0.5})
    # Extra Step Ready events for the same run: several consumers take them at once.
    publisher = EventBridgePublisher(
        LocalSession(moto.endpoint).client("events"), local_name("EventBus")
    )
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
    session = LocalSession(moto.endpoint)
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


# -- the CLI against the moto endpoint ---------------------------------------------------------


def test_cli_reads_runs_from_the_journal(
    moto: MotoProcess, worker: WorkerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = start_run(worker, {"topic": "cli", "sections": 1, "pause_seconds": 0})
    wait_for_status(worker, run_id, "SUCCEEDED", timeout=30)
    endpoint = ["--endpoint", moto.endpoint]

    assert cli_main(["runs", "list", "--status", "succeeded", *endpoint]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["RUN", "ID", "AGENT", "STATUS", "CREATED", "UPDATED"]
    assert any(line.startswith(run_id) and "SUCCEEDED" in line for line in out.splitlines())

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
    assert "already SUCCEEDED" in capsys.readouterr().err


def test_cli_reports_unknown_runs_and_a_stopped_endpoint(
    moto: MotoProcess, worker: WorkerProcess
) -> None:
    command = [sys.executable, "-m", "durable_agents.cli", "runs", "show"]
    unknown = subprocess.run(
        [*command, "run-0000000000000000", "--endpoint", moto.endpoint],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unknown.returncode == 1
    assert "run 'run-0000000000000000' not found" in unknown.stderr

    down = f"http://127.0.0.1:{free_port()}"
    stopped = subprocess.run(
        [*command, "run-0000000000000000", "--endpoint", down],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert stopped.returncode == 1
    assert f"cannot reach {down}" in stopped.stderr


# -- crash recovery ----------------------------------------------------------------------------


def test_sigkill_mid_step_then_restart_runs_each_recorded_step_once() -> None:
    moto = MotoProcess(free_port())
    workers: list[WorkerProcess] = []
    try:
        moto.start()
        workers.append(start_worker(moto))
        first = workers[0]
        run_id = start_run(first, {"topic": "crash", "sections": 3, "pause_seconds": 0})

        def fetch_2_running() -> bool:
            events = history(first, run_id)
            assert not any(
                e["event"] == "step_succeeded" and e["name"] == "fetch-2" for e in events
            ), "fetch-2 finished before the kill"
            return any(e["event"] == "step_started" and e["name"] == "fetch-2" for e in events)

        wait_until(fetch_2_running, 30, "fetch-2 to start")
        first.kill()
        killed_at_ms = SystemClock().now_ms()

        workers.append(start_worker(moto))
        second = workers[1]
        wait_for_status(second, run_id, "SUCCEEDED", timeout=45)
        events = history(second, run_id)
        assert (
            crash_recovery_failures(events, killed_step="fetch-2", killed_at_ms=killed_at_ms) == []
        )
        assert step_starts(events) == {
            "plan": 1,
            "fetch-1": 1,
            "fetch-2": 2,
            "fetch-3": 1,
            "summarize": 1,
        }
        assert second.stop() == 0  # SIGTERM: a clean stop
    except BaseException:
        for index, process in enumerate(workers, start=1):
            print(f"--- worker {index} log ---", *process.lines, sep="\n")
        raise
    finally:
        for process in workers:
            process.stop()
        moto.stop()


def test_crash_at_after_the_charge_then_restart_charges_exactly_once(tmp_path: Path) -> None:
    moto = MotoProcess(free_port())
    services = ServicesHandle.start_in_thread(state_file=tmp_path / "ledgers.json")
    workers: list[WorkerProcess] = []
    env = services.env()  # PAYMENTS_URL, ...: the worker passes them on to the handlers
    try:
        moto.start()
        workers.append(start_worker(moto, ["--crash-at", "charge-card:after_execute"], env))
        doomed = workers[0]
        run_id = start_run(
            doomed,
            {
                "order_id": "T-1",
                "customer": "cus_test",
                "email": "test@example.com",
                "items": {"tea": 2, "scone": 1},
            },
            agent="example-checkout",
        )

        # The hook kills the worker after the provider charged, before the COMMIT.
        assert doomed.wait(30) == -signal.SIGKILL
        assert any("--crash-at charge-card:after_execute: SIGKILL" in x for x in doomed.lines)
        journal = RunsClient(moto.endpoint).store
        at_crash = journal.load(run_id)
        assert prepared_at_crash_failures(at_crash, services.ledger("payments")) == []
        assert services.ledger("tickets") == services.ledger("email") == []

        workers.append(start_worker(moto, env=env))
        second = workers[1]
        wait_for_status(second, run_id, "SUCCEEDED", timeout=45)
        final = journal.load(run_id)
        assert (
            sandwich_failures(
                final,
                payments=services.ledger("payments"),
                tickets=services.ledger("tickets"),
                email=services.ledger("email"),
            )
            == []
        )
        [charge] = [e for e in final.entries if e.name == "charge-card" and e.type.is_result]
        # The tool's stale time (60 s) is far off: the StepRunner recovered it, not the sweep.
        assert recovered_by(second.lines, charge.op_id.removeprefix(f"{run_id}:")) == "StepRunner"
        assert second.stop() == 0
    except BaseException:
        for index, process in enumerate(workers, start=1):
            print(f"--- worker {index} log ---", *process.lines, sep="\n")
        raise
    finally:
        for process in workers:
            process.stop()
        services.stop()
        moto.stop()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("charge-card", "expected OPERATION:POINT (e.g. charge-card:after_execute)"),
        (":after_execute", "expected OPERATION:POINT"),
        ("charge-card:during", "unknown crash point 'during': use one of before_claim, "),
    ],
)
def test_crash_at_with_a_bad_spec_is_a_usage_error(
    spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["local", "--crash-at", spec])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "durable-agents local: error: argument --crash-at:" in err
    assert message in err


# -- the pieces, without processes -------------------------------------------------------------


def test_crash_hooks_fire_once_at_the_named_point_of_the_named_operation() -> None:
    kills: list[str] = []
    hooks = CrashHooks(CrashSpec.parse("charge-card:after_execute"), kill=lambda: kills.append("x"))
    hooks.before_execute("run-1:charge-card:2", 1)  # another point
    hooks.after_execute("run-1:price:1", 1)  # another operation
    assert kills == []
    hooks.after_execute("run-1:charge-card:2", 1)
    hooks.after_execute("run-1:charge-card:2", 2)
    assert kills == ["x"]
    assert hooks.fired == "run-1:charge-card:2"

    def fires(spec: str, op_id: str) -> bool:
        return CrashSpec.parse(spec).matches(op_id)

    assert fires("gather:2/fetch-1:1:before_claim", "run-1:gather:2/fetch-1:1")  # id in the run
    assert fires("fetch-1:before_claim", "run-1:gather:2/fetch-1:1")  # name, nested
    assert fires("run-1:price:1:after_record", "run-1:price:1")  # full id
    assert not fires("price:after_record", "run-1:price-2:3")
    assert CrashSpec.parse("run-1:price:1:after_record") == CrashSpec(
        "run-1:price:1", "after_record"
    )


def test_services_urls_come_from_the_flag_or_the_environment() -> None:
    assert services_environment("http://127.0.0.1:8900/") == {
        "PAYMENTS_URL": "http://127.0.0.1:8900/payments",
        "EMAIL_URL": "http://127.0.0.1:8900/email",
        "TICKETS_URL": "http://127.0.0.1:8900/tickets",
    }
    assert services_environment(None, {"EMAIL_URL": "http://x/email", "HOME": "/"}) == {
        "EMAIL_URL": "http://x/email"
    }


def test_filter_patterns_match_like_lambda_event_filters() -> None:
    record = {"eventName": "INSERT", "dynamodb": {"NewImage": {"outbox": {"S": "1"}}}}
    outbox = {"eventName": ["INSERT"], "dynamodb": {"NewImage": {"outbox": {"S": ["1"]}}}}
    assert matches(outbox, record)
    assert not matches(outbox, {**record, "eventName": "MODIFY"})
    assert not matches(outbox, {"eventName": "INSERT", "dynamodb": {"NewImage": {}}})
    assert matches({"eventName": [{"prefix": "INS"}]}, record)
    assert matches({"eventName": [{"anything-but": ["REMOVE"]}]}, record)
    assert matches({"userIdentity": [{"exists": False}]}, record)
    assert not matches({"eventName": [{"numeric": [">", 0]}]}, record)
    assert matches_any([], record)


def test_template_functions_resolve_to_local_names() -> None:
    template = load_template(ROOT / "template.yaml")
    specs = {s.logical_id: s for s in read_functions(template, ROOT, make_resolver(template))}
    runner = specs["StepRunnerFunction"]
    assert runner.handler == "step_runner.app.handler"
    assert runner.code_dir == ROOT / "functions"
    assert runner.environment["JOURNAL_TABLE"] == "durable-agents-local-journal"
    assert runner.environment["EVENT_BUS_NAME"] == "durable-agents-local-bus"
    assert runner.rules[0].pattern == {"source": ["durable-agents"], "detail-type": ["Step Ready"]}
    assert runner.rules[0].bus_name == "durable-agents-local-bus"
    assert specs["ReconcilerFunction"].environment["STALL_AFTER_SECONDS"] == "300"
    assert specs["ReconcilerFunction"].schedules[0].expression == "rate(1 minute)"
    assert ("GET", "/runs/{run_id}/history") in {
        (a.method, a.path) for a in specs["ApiFunction"].apis
    }


class _FakeClients:
    """Just enough of dynamodb and sqs for StreamPoller's checkpoints and dead letters."""

    def __init__(self) -> None:
        self.items: dict[str, str] = {}
        self.dead_letters: list[dict[str, Any]] = []
        self.dynamodb = self
        self.sqs = self

    def put_item(self, TableName: str, Item: dict[str, Any]) -> None:
        self.items[Item["pk"]["S"]] = Item["sequence"]["S"]

    def send_message(self, QueueUrl: str, MessageBody: str) -> None:
        self.dead_letters.append(json.loads(MessageBody))


def _poller(handler: Callable[[dict[str, Any], Any], Any], max_retries: int) -> Any:
    event = StreamEvent("S", "T", max_retries=max_retries, report_failures=True)
    spec = FunctionSpec("F", "m.h", ROOT, 3, 128, 0, {}, streams=(event,))
    route = StreamRoute("F", event, "arn:stream", "checkpoints", "http://q/dlq")
    clients = _FakeClients()
    poller = StreamPoller(
        clients, route, LocalFunction(spec, handler, region="us-east-1"), threading.Event()
    )
    return poller, clients


def _records(*seqs: int) -> list[dict[str, Any]]:
    return [{"eventName": "INSERT", "dynamodb": {"SequenceNumber": str(s)}} for s in seqs]


def test_stream_batches_retry_from_the_first_reported_failure() -> None:
    calls: list[list[str]] = []

    def handler(event: dict[str, Any], context: Any) -> Any:
        seqs = [r["dynamodb"]["SequenceNumber"] for r in event["Records"]]
        calls.append(seqs)
        return {"batchItemFailures": [{"itemIdentifier": "2"}] if len(calls) == 1 else []}

    poller, clients = _poller(handler, max_retries=3)
    assert poller._deliver("shard", _records(1, 2, 3)) is False
    assert clients.items == {"FS#shard": "1"}  # checkpoint just before the failed record
    assert poller._deliver("shard", _records(2, 3)) is True
    assert calls == [["1", "2", "3"], ["2", "3"]]
    assert clients.items == {"FS#shard": "3"}
    assert clients.dead_letters == []


def test_stream_batches_are_given_up_after_maximum_retries() -> None:
    def handler(event: dict[str, Any], context: Any) -> Any:
        raise RuntimeError("relay down")

    poller, clients = _poller(handler, max_retries=1)
    assert poller._deliver("shard", _records(7, 8)) is False  # the first attempt
    assert poller._deliver("shard", _records(7, 8)) is True  # the retry fails: given up
    assert clients.items == {"FS#shard": "8"}
    [dead] = clients.dead_letters
    assert dead["DDBStreamBatchInfo"]["startSequenceNumber"] == "7"
    assert dead["requestContext"]["approximateInvokeCount"] == 2
