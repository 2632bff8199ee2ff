"""The secret scan through the deployed handlers, on DynamoDB/S3/EventBridge (moto).

A run goes through the real handlers — the Api starts it, the StepRunner executes it, the
Reconciler settles a stale call — while its step, its tool and a tool's lookup raise with the
credential in the message, in a chained exception (``__cause__``) and in the repr of their args
(tests/unit/secret_scan_agents.py), and a tool refuses with the credentials minted for its call
(an STS role session and a Secrets Manager value) in its message. Then the key, the secret's
value and the session's secret key and token must be in none of:

* every item of the journal and stream tables (a raw Scan) and every S3 object (spilled
  payloads: the tool's request is big enough to be spilled);
* every line each handler's Powertools logger wrote, and every line that reached the root
  logger (where the library's own loggers go, as in Lambda);
* every event published on the bus;
* every Api answer of every route that shows the runs, and the Reconciler's report.

Each handler runs as its own process would: the secrets the process revealed (the scrub
registry) are forgotten between them, so the Api and the Reconciler see only what was recorded.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.backends import get_backend

from durable_agents import SkipClock
from durable_agents.aws import deployment
from durable_agents.core import scrub
from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    RunHeader,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import input_hash
from tests.unit import secret_scan_agents as leaky
from tests.unit.conftest import BUCKET, STREAMS, TABLE, Deployment, FakeLambdaContext
from tests.unit.test_api import call
from tests.unit.test_step_runner import step_event

MINTED_VALUE = "sm-value-91f3-minted-per-call"
STALE_RUNS = {
    "run-secret-scan-ledger": leaky.LEDGER_TOOL,
    "run-secret-scan-vault": leaky.VAULT_TOOL,
}


def forget_revealed_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new process: nothing revealed yet (the registry is per process)."""
    monkeypatch.setattr(scrub, "_revealed", type(scrub._revealed)())
    monkeypatch.setattr(scrub, "_ordered", ())


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SkipClock:
    """One clock for every handler, so the test can let leases and stale deadlines pass."""
    from api import services as api_services
    from reconciler import app as reconciler_app
    from step_runner import app as step_app

    shared = SkipClock()
    original = deployment.build_runtime

    def build_runtime(settings: deployment.Settings, **kwargs: Any) -> Any:
        return original(settings, clock=shared, **kwargs)

    # The handlers import build_runtime by their first invocation (cold start), from here.
    monkeypatch.setattr(deployment, "build_runtime", build_runtime)
    for module in (api_services, step_app, reconciler_app):
        monkeypatch.setattr(module, "_runtime", None)
    return shared


@pytest.fixture
def log_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """Everything the four handlers log, as Lambda would write it to CloudWatch Logs."""
    from api import app as api_app
    from reconciler import app as reconciler_app
    from relay import app as relay_app
    from step_runner import app as step_app

    lines = io.StringIO()
    for module in (api_app, step_app, reconciler_app, relay_app):
        monkeypatch.setattr(module.logger.registered_handler, "stream", lines)
    # Lambda's runtime puts a handler on the root logger; the library's loggers reach it.
    root, handler = logging.getLogger(), logging.StreamHandler(lines)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # botocore logs request bodies at DEBUG: noise here
    yield lines
    root.removeHandler(handler)
    root.setLevel(level)


def plant_stale_call(client: Any, clock: SkipClock, run_id: str, tool: str) -> None:
    """A call whose StepRunner died after PREPARED: the reconciler's to settle."""
    journal = DynamoDBJournal(client, TABLE)
    now = clock.now_ms()
    journal.create_run(
        RunHeader(
            run_id=run_id,
            agent=leaky.AGENT,
            versions={"workflow_version": "1"},
            status=RunStatus.RUNNING,
            input='"+4915100000"',
            created_at_ms=now,
            updated_at_ms=now,
            input_hash=input_hash(leaky.AGENT, '"+4915100000"'),
        )
    )
    op_id = f"{run_id}:{tool}:1"
    record = SideEffectRecord(
        run_id=run_id,
        position="00000001",
        operation_id=op_id,
        tool=tool,
        tool_schema_version="1",
        canonical_request='{"memo":"","to":"+4915100000"}',
        idempotency_key=op_id,
        status=EffectStatus.PREPARED,
        attempt=1,
        prepared_at_ms=now,
        updated_at_ms=now,
        lease_expires_at_ms=now + 500,
        stale_at_ms=now + 1_000,
    )
    journal.commit(run_id, [], None, EffectChange(record))


def everything_stored(client: Any) -> str:
    """Every table item and every S3 object, as text."""
    items = [
        item
        for table in (TABLE, STREAMS)
        for page in client.get_paginator("scan").paginate(TableName=table)
        for item in page["Items"]
    ]
    s3 = boto3.client("s3", region_name="us-east-1")
    objects = [
        s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read().decode()
        for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    ]
    assert objects, "nothing was spilled to S3: the scan of S3 would prove nothing"
    return json.dumps(items) + "".join(objects)


def every_answer(run_ids: list[str]) -> list[Any]:
    """The answers of every Api route that shows a run, its history, its reviews or waits."""
    paths = ["/runs", "/reviews", "/approvals"]
    for run_id in run_ids:
        paths += [f"/runs/{run_id}", f"/runs/{run_id}/history", f"/runs/{run_id}/stream"]
    answers = []
    for path in paths:
        status, body = call("GET", path)
        assert status == 200, (path, body)
        answers.append(body)
    return answers


def test_no_trace_of_the_key_after_a_run_through_every_handler(
    deployment: Deployment,
    clock: SkipClock,
    log_lines: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reconciler import app as reconciler_app
    from reconciler.app import handler as reconcile
    from step_runner.app import handler as step

    monkeypatch.setenv("AGENT_MODULES", "tests.unit.secret_scan_agents")
    monkeypatch.setenv(leaky.ROLE_ENV, "arn:aws:iam::123456789012:role/secret-scan-tool")
    boto3.client("secretsmanager").create_secret(
        Name=leaky.MINTED_SECRET, SecretString=MINTED_VALUE
    )
    client = deployment.dynamodb
    published: list[dict[str, Any]] = []

    forget_revealed_secrets(monkeypatch)  # the Api process
    status, body = call("POST", "/runs", {"agent": leaky.AGENT, "input": "+4917012345"})
    assert status == 201, body
    run_id = body["run"]["run_id"]
    published += deployment.published()

    forget_revealed_secrets(monkeypatch)  # the StepRunner process
    for _ in range(20):
        outcome = step(step_event(run_id), FakeLambdaContext())["outcome"]
        published += deployment.published()
        clock.advance(600_000)  # past any lease or retry delay: the next event is due
        if outcome in ("succeeded", "failed", "paused", "suspended"):
            break
    assert outcome == "suspended", outcome  # the wire transfer waits for a person

    forget_revealed_secrets(monkeypatch)  # the Reconciler process
    for stale_run, tool in STALE_RUNS.items():
        plant_stale_call(client, clock, stale_run, tool)
    clock.advance(600_000)  # the calls are stale now
    reconciler_app.get_runtime()[0].credentials = leaky.RefusingProvider()
    report = reconcile({}, FakeLambdaContext())
    published += deployment.published()
    assert report["effects_escalated"] == 1, report  # the ledger call: its lookup raised
    # The vault call: its credentials could not be minted, so it was not called; recorded on
    # the call (with the key masked in the reason), to be looked at again.
    assert report["unit_errors"] == 0, report
    vault = DynamoDBJournal(client, TABLE).load("run-secret-scan-vault").effects[0]
    assert "could not be minted" in str(vault.note) and "***" in str(vault.note)

    forget_revealed_secrets(monkeypatch)  # the Api process again
    answers = every_answer([run_id, *STALE_RUNS])
    assert answers[3]["status"] == "PAUSED", answers[3]  # GET /runs/{run_id}: in review

    stored, logged = everything_stored(client), log_lines.getvalue()
    shown, events = json.dumps([answers, report]), json.dumps(published)
    # The errors themselves are kept, masked: the scan looks where the key would have been.
    assert "probe of +4917012345 refused" in stored and "wire refused" in stored
    assert "ledger lookup refused" in stored
    assert "wire refused" in shown and "ledger lookup refused" in shown
    assert "probe failed" in logged and "sweep finished" in logged
    assert "credential for the vault refused" in stored
    assert "gateway refused" in stored and "minted call refused" in logged
    assert "Review Requested" in events
    (session,) = get_backend("sts")["123456789012"]["aws"].assumed_roles  # the minted call's
    assert session.session_name.startswith(f"da-{run_id}")
    secrets = [leaky.KEY, MINTED_VALUE, session.secret_access_key, session.session_token]
    for value in secrets:
        assert value not in stored
        assert value not in logged
        assert value not in events
        assert value not in shown
