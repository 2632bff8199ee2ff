"""Messages into a running run in local mode, over real HTTP: the chat example.

One local stack: an ``example-chat`` run is started, a follow-up is POSTed at once (before its
agent got to its wait, most likely: it is kept either way) and POSTed again with the same
``Idempotency-Key`` (recorded once: 200, same event); ``GET /runs/{id}/status-value`` shows
the agent's published value; "bye" ends the run. Each message is answered once, in order; a
message to the finished run is 409.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest

from durable_agents_local.moto_server import MotoProcess
from durable_agents_local.processes import http_json
from durable_agents_local.services import ServicesHandle
from tests.integration.local_stack import wait_until, workers

pytestmark = pytest.mark.slow
OPENING = "What is durable execution?"


def post_event(base_url: str, run_id: str, body: Any, key: str | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(
        f"{base_url}/runs/{run_id}/events/message",
        data=json.dumps(body).encode(),
        method="POST",
        headers=headers,
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_chat_run_answers_follow_ups_sent_into_it_once_each_in_order(
    moto: MotoProcess, services: ServicesHandle
) -> None:
    with workers(moto, services) as start_worker:
        base = start_worker().base_url
        code, started = http_json(
            "POST",
            f"{base}/runs",
            {"agent": "example-chat", "input": {"message": OPENING, "idle_timeout_seconds": 600}},
        )
        assert code == 201, started
        run_id = started["run"]["run_id"]
        # At once: the agent is still answering the opening message (or has not started).
        code, first = post_event(base, run_id, {"text": "and in French?"}, key="m-1")
        assert code == 202, first
        assert (first["seq"], first["event_id"], first["duplicate"]) == (1, "m-1", False)
        code, again = post_event(base, run_id, {"text": "and in French?"}, key="m-1")
        assert code == 200, again
        assert again == {**first, "duplicate": True}

        def answered(turns: int) -> dict[str, Any] | None:
            code, status = http_json("GET", f"{base}/runs/{run_id}/status-value")
            assert code == 200, status
            value = status["value"] or {}
            ready = value.get("turns") == turns and status["status"] == "SUSPENDED"
            return dict(status) if ready else None

        published = wait_until(lambda: answered(2), 30, "both messages to be answered")
        assert published["value"]["last_answer"].startswith("In French")
        assert published["set_at"] and published["op_id"].startswith(f"{run_id}:status:")

        # The last message through the CLI, as an operator would send it.
        sent = subprocess.run(
            [sys.executable, "-m", "durable_agents_local.cli.main", "runs", "send-event", run_id,
             "message",
             "--data", '{"text": "bye"}', "--event-id", "m-2", "--json", "--api-url", base],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        bye = json.loads(sent.stdout)
        assert (bye["seq"], bye["event_id"], bye["duplicate"]) == (2, "m-2", False), bye

        def finished() -> dict[str, Any] | None:
            code, run = http_json("GET", f"{base}/runs/{run_id}")
            assert code == 200, run
            return dict(run) if run["status"] == "SUCCEEDED" else None

        run = wait_until(finished, 30, f"run {run_id} to finish")
        transcript = run["result"]
        assert [t["message"] for t in transcript["turns"]] == [OPENING, "and in French?"]
        assert [t["event_id"] for t in transcript["turns"]] == [None, "m-1"]
        assert transcript["ended"] == "bye"
        code, status = http_json("GET", f"{base}/runs/{run_id}/status-value")
        assert code == 200 and status["value"]["ended"] == "bye", status
        # Finished: a message now is refused, and says why.
        code, late = post_event(base, run_id, {"text": "hello?"})
        assert code == 409 and late["error"]["type"] == "RunNotAcceptingEventsError", late
        code, missing = http_json("GET", f"{base}/runs/run-0000000000000000/status-value")
        assert code == 404, missing
