"""The stack the Api fuzzer runs against: local mode's HTTP layer over the Api on moto, in-process.

``ApiServer``'s WSGI app (the local-mode server's routing, body reading and event building)
is called in-process by schemathesis through werkzeug's test client: no socket, no thread, a
few milliseconds a request, which is what makes 10,000 requests fit in minutes on a shared
2-core machine. Behind it is the real Api handler with a DynamoDB journal, stream cache, S3,
EventBridge and Secrets Manager on moto.

Credentials get the fuzzer past authentication and into the parsers: the local server names
the IAM caller (``X-Local-Caller-Arn``, an approver and review operator here), /people
requests carry a JWT signed by a test issuer the Api trusts, /links requests a minted link.

"No state change from a rejected request" is checked by counting the AWS calls that change
something (``WRITE_CALLS``) and succeeded, around every request: a 4xx must make none.
"""

from __future__ import annotations

import json
import re
import secrets
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.client
import pytest
from moto import mock_aws

from durable_agents.auth.jwt import JwtVerifier
from durable_agents.core.clock import SkipClock
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.functions import make_resolver, read_functions
from durable_agents_local.http_api import ApiServer, Route
from durable_agents_local.template import create_journal_table, load_template, table_definition
from durable_agents_local.testing import AgentTestRunner, Crash
from tests.conftest import TEMPLATE
from tests.unit.test_api_approvals import KEYS, OPERATOR, refund, start_approval
from tests.unit.test_api_callbacks import HANDED, Job, waiter
from tests.unit.test_api_reviews import notifier
from tests.unit.test_auth import AUDIENCE, ISSUER, claims

TABLE, STREAMS, BUCKET, BUS = "journal", "streams", "payloads", "durable-bus"
# AWS calls that change state when they succeed (a failed conditional write changes nothing).
WRITE_CALLS = re.compile(r"^(Put|Update|Delete|TransactWrite|BatchWrite|Create|Send|Start)")

requests: Counter[str] = Counter()  # per operation, for the end-of-session report
rejected: Counter[str] = Counter()
poisoned: Counter[str] = Counter()  # requests whose body was not valid Unicode (all refused)
# Hostile headers (Origin, Sec-Fetch-Site, Host, Content-Type) by kind and the status expected.
hostile_headers: Counter[str] = Counter()
statuses: Counter[int] = Counter()
seconds: Counter[str] = Counter()  # time spent sending (generation excluded)
elapsed: list[float] = []


def summary() -> list[str]:
    """The end-of-session lines (nothing when the fuzzer did not run)."""
    if not requests:
        return []
    lines = [f"{'operation':<44}{'requests':>9}{'4xx':>7}{'ms/request':>11}"]
    for label in sorted(requests):
        ms = 1000 * seconds[label] / requests[label]
        lines.append(f"{label:<44}{requests[label]:>9}{rejected[label]:>7}{ms:>11.1f}")
    total = sum(requests.values())
    lines.append(f"{'total':<44}{total:>9}{sum(rejected.values()):>7}")
    lines.append("statuses: " + ", ".join(f"{k}={v}" for k, v in sorted(statuses.items())))
    if hostile_headers:
        lines.append(
            "hostile headers refused: "
            + ", ".join(f"{k}={v}" for k, v in sorted(hostile_headers.items()))
        )
    if elapsed:
        lines.append(f"{total:,} requests in {sum(elapsed):.0f} s; 0 responses >= 500")
    return lines


class _Handler:
    """The Api handler as a local-mode function (what ``Route`` invokes)."""

    def invoke(self, event: dict[str, Any]) -> Any:
        from api.app import handler
        from tests.unit.conftest import FakeLambdaContext

        return handler(event, FakeLambdaContext())


@dataclass
class WriteRecorder:
    """Counts successful state-changing AWS calls (all clients, all services)."""

    calls: list[str] = field(default_factory=list)

    @contextmanager
    def installed(self) -> Iterator[None]:
        original = botocore.client.BaseClient._make_api_call

        def recording(client: Any, operation: str, params: Any) -> Any:
            result = original(client, operation, params)
            if WRITE_CALLS.match(operation):
                self.calls.append(f"{client.meta.service_model.service_name}:{operation}")
            return result

        botocore.client.BaseClient._make_api_call = recording  # type: ignore[method-assign]
        try:
            yield
        finally:
            botocore.client.BaseClient._make_api_call = original  # type: ignore[method-assign]


class _FakeTime:
    """``time`` for the stream route: its long-poll sleeps advance a clock instead of waiting."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FuzzStack:
    """What the fuzz test needs: the WSGI app, credentials, seeded ids, the write recorder."""

    wsgi: Any
    caller_arn: str
    jwt: str
    link_token: str
    approval_id: str
    run_id: str
    callback_id: str
    operation_id: str
    writes: WriteRecorder
    port: int  # what the local server takes as its own in ``Host`` (it is never served)

    def seeded(self, path: str) -> dict[str, str]:
        """Path parameters of ``path`` that name something that exists."""
        ids = {
            "approval_id": self.approval_id,
            "run_id": self.run_id,
            "callback_id": self.callback_id,
            "operation_id": self.operation_id,  # "<run>:test-notify:1": no "/" to encode
            "name": "message",  # POST /runs/{run_id}/events/{name}
        }
        return {name: value for name, value in ids.items() if "{" + name + "}" in path}


def _seed_callback(journal: DynamoDBJournal, clock: SkipClock) -> str:
    """A pending callback; returns its full id (with the secret, as the agent hands it out)."""
    HANDED.clear()
    result = AgentTestRunner(waiter, journal=journal, mode="faithful", clock=clock).run(
        Job().model_dump()
    )
    assert result.status == "SUSPENDED", result.error
    (callback_id,) = HANDED
    return callback_id


def _seed_review(journal: DynamoDBJournal, clock: SkipClock) -> str:
    """A tool call in review (its run PAUSED); returns its operation id."""
    runner = AgentTestRunner(notifier, journal=journal, mode="faithful", clock=clock)
    result = runner.run("ada@example.com", crash=Crash("test-notify", "after_execute"))
    assert result.status == "PAUSED", result.error
    return f"{result.run_id}:test-notify:1"


def _with_raw_uri(app: Any) -> Any:
    """Puts the query string into ``RAW_URI``, as a real server's request target has it.

    ``ApiServer`` routes on the raw target (so ``%2F`` stays in its segment); werkzeug's test
    client puts only the path there.
    """

    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        query = environ.get("QUERY_STRING")
        raw = str(environ.get("RAW_URI") or environ.get("PATH_INFO") or "/")
        if query and "?" not in raw:
            environ = {**environ, "RAW_URI": f"{raw}?{query}", "REQUEST_URI": f"{raw}?{query}"}
        return app(environ, start_response)

    return wsgi


@contextmanager
def fuzz_stack() -> Iterator[FuzzStack]:
    """The Api on moto behind local mode's WSGI app, with one run and one pending approval."""
    with pytest.MonkeyPatch.context() as mp, mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        create_journal_table(dynamodb, TABLE, TEMPLATE)
        dynamodb.create_table(
            TableName=STREAMS, **table_definition(load_template(TEMPLATE), "StreamTable")
        )
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
        boto3.client("events", region_name="us-east-1").create_event_bus(Name=BUS)
        arn = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name="approval-link-key", SecretString=secrets.token_urlsafe(48)
        )["ARN"]
        operators = "iam:arn:aws:sts::123456789012:assumed-role/durable-agents-operator/*"
        for name, value in {
            "JOURNAL_TABLE": TABLE,
            "STREAM_TABLE": STREAMS,
            "EVENT_BUS_NAME": BUS,
            "PAYLOAD_BUCKET": BUCKET,
            "AGENT_MODULES": "agents.example,agents.checkout",
            "POWERTOOLS_TRACE_DISABLED": "1",
            "POWERTOOLS_LOG_LEVEL": "CRITICAL",
            "POWERTOOLS_METRICS_NAMESPACE": "DurableAgentsFuzz",
            "STALL_AFTER_SECONDS": "60",
            "APPROVAL_LINK_SECRET_ARN": arn,
            "JWT_ISSUER": ISSUER,
            "JWT_AUDIENCE": AUDIENCE,
            "LINK_MINTERS": operators,
            "REVIEW_OPERATORS": operators,
        }.items():
            mp.setenv(name, value)
        mp.delenv("PUBLIC_BASE_URL", raising=False)
        from api import services as api_services
        from api.routes import approvals, openapi_doc, streams

        mp.setattr(api_services, "_runtime", None)
        mp.setattr(openapi_doc, "_document", None)
        mp.setattr(approvals, "_link_signer", None)
        mp.setattr(
            approvals, "_jwt_verifier", JwtVerifier(ISSUER, AUDIENCE, jwks={"keys": [KEYS.jwk]})
        )
        mp.setattr(streams, "time", _FakeTime())
        journal = DynamoDBJournal(dynamodb, TABLE)
        runner = AgentTestRunner(refund, journal=journal, mode="faithful")
        runtime = api_services.get_runtime()
        mp.setattr(runtime, "clock", runner.clock)
        _, approval_id = start_approval(runner)
        callback_id = _seed_callback(journal, runner.clock)
        operation_id = _seed_review(journal, runner.clock)
        run, _ = runtime.start_run("example-research", {"topic": "fuzzing"})
        token, _ = approvals.link_signer().mint(
            approval_id,
            "user:ada@example.com",
            86_400,
            now_ms=runner.clock.now_ms(),
            minted_by=OPERATOR,
        )
        # A day of validity: the runner's skip-clock does not move while the fuzzer runs.
        jwt = KEYS.sign(claims(runner.clock, exp=runner.clock.now_ms() // 1000 + 86_400))
        handler: Any = _Handler()
        template = load_template(TEMPLATE)
        specs = read_functions(template, TEMPLATE.parent, make_resolver(template))
        # As local mode routes them: IAM routes name the caller, auth NONE routes none.
        routes = [Route(a.method, a.path, handler, iam=a.iam) for s in specs for a in s.apis]
        server = ApiServer(routes, port=0)  # bound on loopback, never served: called in-process
        writes = WriteRecorder()
        try:
            with writes.installed():
                yield FuzzStack(
                    wsgi=_with_raw_uri(server._wsgi),
                    caller_arn=OPERATOR,
                    jwt=jwt,
                    link_token=token,
                    approval_id=approval_id,
                    run_id=run.run_id,
                    callback_id=callback_id,
                    operation_id=operation_id,
                    writes=writes,
                    port=int(server.server_address[1]),
                )
        finally:
            server.server_close()


def describe(case: Any, response: Any) -> str:
    """One request and its answer, for an assertion message."""
    body = response.text if hasattr(response, "text") else response.content
    return json.dumps(
        {
            "request": f"{case.method} {case.formatted_path}",
            "query": case.query,
            "headers": case.headers,
            "body": repr(case.body)[:500],
            "status": response.status_code,
            "response": str(body)[:500],
        },
        default=str,
        indent=1,
    )
