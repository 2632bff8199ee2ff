"""Local mode's pieces without processes: crash hooks, settings, filters, template, streams."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from durable_agents_local.crash import CrashHooks, CrashSpec
from durable_agents_local.functions import (
    FunctionSpec,
    StreamEvent,
    make_resolver,
    read_functions,
)
from durable_agents_local.invoke import LocalFunction
from durable_agents_local.patterns import matches, matches_any
from durable_agents_local.stream_router import StreamPoller, StreamRoute
from durable_agents_local.template import load_template
from durable_agents_local.worker import services_environment
from tests.integration.local_workers import ROOT

pytestmark = pytest.mark.slow


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
