"""``GET /runs/{id}/stream`` over real HTTP in local mode: reconnects and a crashed attempt.

A client reads the support agent's streamed model text as Server-Sent Events, hangs up in the
middle of responses and reconnects with ``Last-Event-ID``: what it pieces together equals one
uninterrupted read (no gap, no duplicate). When the worker dies right after a model turn
streamed (``--crash-at turn-1:after_execute``), the turn runs again after the restart: the
stream shows a ``begin`` with ``"restart": true`` for attempt 2, and a client that resets an
operation's text at each ``begin`` ends with the model's answer exactly once.
"""

from __future__ import annotations

import http.client
import json
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from durable_agents_local.moto_server import MotoProcess
from durable_agents_local.processes import WorkerProcess, http_json
from durable_agents_local.services import ServicesHandle
from tests.integration.local_stack import ROOT, workers

pytestmark = pytest.mark.slow

MESSAGE = {"customer": "cus-ada", "message": "My order A-1001 arrived broken, I want a refund"}
# A 1 s StepRunner timeout gives a 6 s claim lease: the crashed turn is retried soon after.
FAST_RECOVERY = ["--function-timeout", "StepRunnerFunction=1", "--stall-after", "1"]
SSE = "text/event-stream"


def scripted_answers() -> list[str]:
    """The text of each support-model turn, from the scripted model's script."""
    script = json.loads((ROOT / "functions/agents/scripts/support.json").read_text())
    [support] = [s for s in script["scripts"] if s["name"] == "support-refund"]
    return [
        turn.get("text")
        or "".join(part["text"] for part in turn["content"] if part["type"] == "text")
        for turn in support["turns"]
    ]


ANSWERS = scripted_answers()


# -- a small SSE client ------------------------------------------------------------------------


class Sse:
    """One ``GET /runs/{id}/stream`` as Server-Sent Events, parsed while it is read."""

    def __init__(self, base_url: str, run_id: str, *, last_event_id: str | None, wait: float):
        parts = urlsplit(base_url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        headers = {"Accept": SSE, "Cache-Control": "no-cache"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.connection.request("GET", f"/runs/{run_id}/stream?wait={wait}", headers=headers)
        self.response = self.connection.getresponse()
        assert self.response.status == 200, self.response.read()
        assert self.response.getheader("Content-Type", "").startswith(SSE)

    def events(self) -> Iterator[dict[str, Any]]:
        """Dispatches an event at each blank line (fields: ``id``, ``event``, ``data``)."""
        fields: dict[str, str] = {}
        data: list[str] = []
        for raw in self.response:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                if data:  # a block without data (the ``retry:`` preamble) dispatches nothing
                    yield {
                        "id": fields.get("id"),
                        "event": fields.get("event", "message"),
                        "data": json.loads("\n".join(data)),
                    }
                fields, data = {}, []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            elif name in ("id", "event", "retry"):
                fields[name] = value

    def close(self) -> None:
        self.connection.close()


def read_once(base_url: str, run_id: str, after: str | None = None) -> list[dict[str, Any]]:
    """Everything the stream holds now (after ``after``), in one uninterrupted read."""
    sse = Sse(base_url, run_id, last_event_id=after, wait=0)
    try:
        return list(sse.events())
    finally:
        sse.close()


def follow(
    base_url: str,
    run_id: str,
    *,
    hang_up_after: int,
    on_idle: Callable[[], None],
    timeout: float = 30,
) -> tuple[list[dict[str, Any]], int]:
    """Reads the stream to its ``done`` event, hanging up after ``hang_up_after`` events of
    every response and reconnecting with ``Last-Event-ID``; ``on_idle`` runs when a long poll
    brings nothing.

    Returns:
        The events received, and how many responses were cut short.
    """
    received: list[dict[str, Any]] = []
    last_id: str | None = None
    hang_ups = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sse = Sse(base_url, run_id, last_event_id=last_id, wait=1)
        got: list[dict[str, Any]] = []
        try:
            for event in sse.events():
                got.append(event)
                if len(got) == hang_up_after:
                    hang_ups += 1
                    break  # hang up in the middle of the response
        finally:
            sse.close()
        received += got
        last_id = next((e["id"] for e in reversed(got) if e["id"]), last_id)
        if got and got[-1]["event"] == "done":
            return received, hang_ups
        if not got:
            on_idle()
    raise AssertionError(f"the stream of {run_id} did not end within {timeout} s")


def texts_by_operation(events: list[dict[str, Any]]) -> dict[str, str]:
    """Each operation's final text: reset at each ``begin``, as a front end shows it."""
    texts: dict[str, str] = {}
    for event in events:
        data = event["data"]
        if event["event"] == "begin":
            texts[data["operation_id"]] = ""
        elif event["event"] == "text":
            texts[data["operation_id"]] = texts.get(data["operation_id"], "") + data["text"]
    return texts


def approver(worker: WorkerProcess, run_id: str) -> Callable[[], None]:
    """An ``on_idle`` that approves the run's pending refund (once) through a signed link."""

    def approve_if_waiting() -> None:
        status, listed = http_json("GET", f"{worker.base_url}/approvals?status=pending")
        assert status == 200, listed
        for approval in listed["approvals"]:
            if approval["run_id"] != run_id:
                continue
            aid = approval["approval_id"]
            status, minted = http_json(
                "POST",
                f"{worker.base_url}/approvals/{aid}/links",
                {"approver": "group:support-leads"},
            )
            assert status == 201, minted
            token = parse_qs(urlsplit(minted["url"]).query)["token"][0]
            body = {"token": token, "decision": "approve"}
            status, decided = http_json("POST", f"{worker.base_url}/links/approvals/{aid}", body)
            assert status == 200, decided

    return approve_if_waiting


def start_run(worker: WorkerProcess) -> str:
    status, body = http_json(
        "POST", f"{worker.base_url}/runs", {"agent": "example-support", "input": MESSAGE}
    )
    assert status == 201, body
    return str(body["run"]["run_id"])


def refunds(services: ServicesHandle) -> list[dict[str, Any]]:
    return [e for e in services.ledger("payments") if e["event"] == "charge.created"]


# -- the tests ---------------------------------------------------------------------------------


def test_reconnecting_with_last_event_id_loses_and_repeats_nothing(
    moto: MotoProcess, services: ServicesHandle
) -> None:
    with workers(moto, services) as start_worker:
        worker = start_worker()
        run_id = start_run(worker)
        pieced, hang_ups = follow(
            worker.base_url, run_id, hang_up_after=3, on_idle=approver(worker, run_id)
        )
        assert hang_ups >= 3, "the client never hung up mid-response"
        assert pieced[-1] == {"id": None, "event": "done", "data": {"status": "SUCCEEDED"}}

        # One read from the start gets every chunk (``done`` comes with the next, empty page).
        whole = read_once(worker.base_url, run_id)
        assert pieced[:-1] == whole  # no gap, no duplicate, same order
        assert read_once(worker.base_url, run_id, after=whole[-1]["id"]) == pieced[-1:]
        ids = [e["id"] for e in whole if e["id"]]
        assert ids == sorted(set(ids))
        assert all(e["data"]["attempt"] == 1 for e in whole if e["event"] != "done")
        assert list(texts_by_operation(whole).values()) == ANSWERS
        assert len(refunds(services)) == 1


def test_a_turn_streamed_then_crashed_restarts_its_text_after_the_restart(
    moto: MotoProcess, services: ServicesHandle
) -> None:
    with workers(moto, services) as start_worker:
        doomed = start_worker(*FAST_RECOVERY, "--crash-at", "turn-1:after_execute")
        run_id = start_run(doomed)
        # The model's answer streamed; the worker dies before the turn's result is recorded.
        assert doomed.wait(30) == -signal.SIGKILL
        assert any("--crash-at turn-1:after_execute: SIGKILL" in x for x in doomed.lines)

        worker = start_worker(*FAST_RECOVERY)
        pieced, _ = follow(
            worker.base_url, run_id, hang_up_after=4, on_idle=approver(worker, run_id)
        )
        assert pieced[-1]["data"] == {"status": "SUCCEEDED"}
        whole = read_once(worker.base_url, run_id)
        assert pieced[:-1] == whole

        [turn_1] = {e["data"]["operation_id"] for e in whole if ":turn-1:" in e["id"]}
        begins = [
            e["data"]
            for e in whole
            if e["event"] == "begin" and e["data"]["operation_id"] == turn_1
        ]
        assert [(b["attempt"], b["restart"]) for b in begins] == [(1, False), (2, True)]
        first_attempt = "".join(
            e["data"]["text"]
            for e in whole
            if e["event"] == "text"
            and e["data"]["operation_id"] == turn_1
            and e["data"]["attempt"] == 1
        )
        assert first_attempt == ANSWERS[0]  # streamed in full before the crash
        # Reset at each begin: every turn's answer once, the crashed one included.
        assert list(texts_by_operation(whole).values()) == ANSWERS
        assert len(refunds(services)) == 1
