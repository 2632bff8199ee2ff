"""The fake external services over real HTTP: behaviour, fault injection, persistence, tools."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPException
from pathlib import Path
from typing import Any

import pytest

from agents.tools import (
    ChargeRequest,
    EmailRequest,
    ProviderError,
    TicketRequest,
    charge_card,
    create_ticket,
    send_email,
)
from durable_agents.tools import (
    Found,
    NotFound,
    ToolCall,
    ToolRejectedError,
    ToolResult,
    Unknown,
)
from durable_agents_local.services import ServicesError, ServicesHandle
from durable_agents_local.services.server import HOST

ROOT = Path(__file__).resolve().parents[2]
CHARGE = {"customer": "cus_1", "amount_cents": 1250, "currency": "EUR", "description": "order 7"}


@pytest.fixture(scope="module")
def server() -> Iterator[ServicesHandle]:
    handle = ServicesHandle.start_in_thread(port=0)
    yield handle
    handle.stop()


@pytest.fixture
def services(server: ServicesHandle) -> ServicesHandle:
    server.reset()
    return server


def http(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5,
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def charge(services: ServicesHandle, key: str | None, **changes: Any) -> tuple[int, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    return http("POST", f"{services.url}/payments/charges", {**CHARGE, **changes}, headers)


def events(services: ServicesHandle, service: str, event: str) -> list[dict[str, Any]]:
    return [e for e in services.ledger(service) if e["event"] == event]


# --- payments ---------------------------------------------------------------------------------


def test_same_idempotency_key_charges_once(services: ServicesHandle) -> None:
    status, first = charge(services, "key-1")
    assert status == 201 and first["status"] == "succeeded" and first["idempotency_key"] == "key-1"
    status, again = charge(services, "key-1")
    assert status == 200 and again == first
    assert len(events(services, "payments", "charge.created")) == 1


def test_same_key_with_another_body_is_a_conflict(services: ServicesHandle) -> None:
    charge(services, "key-1")
    status, body = charge(services, "key-1", amount_cents=999)
    assert status == 409 and "different request" in body["error"]["message"]
    assert len(services.ledger("payments")) == 1


def test_without_a_key_every_call_charges(services: ServicesHandle) -> None:
    assert charge(services, None)[0] == 201
    assert charge(services, None)[0] == 201
    assert len(events(services, "payments", "charge.created")) == 2


@pytest.mark.parametrize("changes", [{"amount_cents": 0}, {"amount_cents": -5}, {"currency": "E"}])
def test_invalid_charges_are_refused(services: ServicesHandle, changes: dict[str, Any]) -> None:
    assert charge(services, "key-1", **changes)[0] == 400
    assert services.ledger("payments") == []


def test_lookup_by_key_and_operation_id(services: ServicesHandle) -> None:
    _, made = charge(services, "key-1", metadata={"operation_id": "run-1:charge:1"})
    base = f"{services.url}/payments/charges"
    assert http("GET", f"{base}?idempotency_key=key-1") == (200, made)
    assert http("GET", f"{base}?idempotency_key=other")[0] == 404
    assert http("GET", f"{base}?operation_id=run-1:charge:1") == (200, [made])
    assert http("GET", f"{base}?operation_id=run-9:charge:1") == (200, [])
    assert http("GET", f"{base}/{made['charge_id']}") == (200, made)


def test_refunds_are_idempotent(services: ServicesHandle) -> None:
    _, made = charge(services, "key-1", metadata={"operation_id": "op-1"})
    refunds = f"{services.url}/payments/refunds"
    status, body = http("POST", refunds, {"charge_id": made["charge_id"]})
    assert status == 200 and body["refunded"] == [made["charge_id"]]
    assert http("POST", refunds, {"operation_id": "op-1"})[1]["refunded"] == []
    assert http("POST", refunds, {"operation_id": "nothing"}) == (
        200,
        {"refunded": [], "charges": []},
    )
    assert http("POST", refunds, {"charge_id": "ch_missing"})[0] == 404
    assert len(events(services, "payments", "charge.refunded")) == 1
    _, ledger = http("GET", f"{services.url}/payments/ledger")
    assert [c["refunded"] for c in ledger] == [True]


# --- email and tickets --------------------------------------------------------------------------


def test_email_has_no_dedupe(services: ServicesHandle) -> None:
    message = {"to": "a@example.com", "subject": "hi", "body": "hello"}
    first = http("POST", f"{services.url}/email/messages", message)
    second = http("POST", f"{services.url}/email/messages", message)
    assert first[0] == second[0] == 202 and first[1]["message_id"] != second[1]["message_id"]
    _, outbox = http("GET", f"{services.url}/email/outbox")
    assert [m["subject"] for m in outbox] == ["hi", "hi"]
    assert http("POST", f"{services.url}/email/messages", {**message, "to": "nobody"})[0] == 400


def test_tickets_duplicate_and_are_found_by_business_key(services: ServicesHandle) -> None:
    ticket = {"business_key": "order-7", "title": "refund order 7"}
    assert http("GET", f"{services.url}/tickets?business_key=order-7") == (200, [])
    _, first = http("POST", f"{services.url}/tickets", ticket)
    _, second = http("POST", f"{services.url}/tickets", ticket)
    assert first["ticket_id"] != second["ticket_id"]
    _, found = http("GET", f"{services.url}/tickets?business_key=order-7")
    assert [t["ticket_id"] for t in found] == [first["ticket_id"], second["ticket_id"]]
    status, closed = http("DELETE", f"{services.url}/tickets/{first['ticket_id']}")
    assert status == 200 and closed["status"] == "closed"
    assert http("DELETE", f"{services.url}/tickets/tk_missing")[0] == 404
    _, ledger = http("GET", f"{services.url}/tickets/ledger")
    assert [t["status"] for t in ledger] == ["closed", "open"]
    assert [e["event"] for e in services.ledger("tickets")] == ["ticket.created"] * 2 + [
        "ticket.closed"
    ]


# --- faults -----------------------------------------------------------------------------------


def test_act_then_drop_acts_but_never_answers(services: ServicesHandle) -> None:
    services.set_fault("payments", "charge", "act_then_drop")
    with pytest.raises((OSError, HTTPException)):
        charge(services, "key-1")
    assert len(events(services, "payments", "charge.created")) == 1
    assert charge(services, "key-1")[0] == 200  # the retry with the same key is deduplicated
    assert len(events(services, "payments", "charge.created")) == 1


def test_fail_before_act_answers_503_without_acting(services: ServicesHandle) -> None:
    services.set_fault("email", "send", "fail_before_act", times=2)
    message = {"to": "a@example.com", "subject": "hi"}
    assert http("POST", f"{services.url}/email/messages", message)[0] == 503
    assert http("POST", f"{services.url}/email/messages", message)[0] == 503
    assert services.ledger("email") == []
    assert http("POST", f"{services.url}/email/messages", message)[0] == 202
    assert services.faults() == []


def test_unavailable_lookup_and_wildcard(services: ServicesHandle) -> None:
    services.set_fault("tickets", "find_ticket", "unavailable", times=-1)
    assert http("GET", f"{services.url}/tickets?business_key=k")[0] == 503
    assert http("POST", f"{services.url}/tickets", {"business_key": "k", "title": "t"})[0] == 201
    assert http("GET", f"{services.url}/tickets?business_key=k")[0] == 503
    services.clear_faults()
    services.set_fault("tickets", "*", "unavailable")
    assert http("POST", f"{services.url}/tickets", {"business_key": "k", "title": "t"})[0] == 503


def test_slow_fault_acts_after_the_client_gave_up(services: ServicesHandle) -> None:
    services.set_fault("tickets", "create_ticket", "slow", delay_ms=300)
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        http("POST", f"{services.url}/tickets", {"business_key": "k", "title": "t"}, timeout=0.05)
    assert http("GET", f"{services.url}/tickets?business_key=k")[0] == 200  # not slowed down
    for _ in range(50):
        if services.ledger("tickets"):
            break
        time.sleep(0.02)
    assert len(events(services, "tickets", "ticket.created")) == 1


@pytest.mark.parametrize(
    "fault",
    [
        {"service": "nope", "action": "charge", "mode": "slow"},
        {"service": "payments", "action": "nope", "mode": "slow"},
        {"service": "payments", "action": "charge", "mode": "explode"},
        {"service": "payments", "action": "charge", "mode": "slow", "times": 0},
    ],
)
def test_invalid_faults_are_refused(services: ServicesHandle, fault: dict[str, Any]) -> None:
    with pytest.raises(ServicesError):
        services.set_fault(**fault)


def test_reset_clears_ledgers_and_faults(services: ServicesHandle) -> None:
    charge(services, "key-1")
    services.set_fault("payments", "charge", "fail_before_act")
    services.reset()
    assert services.ledger("payments") == [] and services.faults() == []
    assert charge(services, "key-1")[0] == 201


# --- persistence and the process --------------------------------------------------------------


def test_state_file_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "services.json"
    with ServicesHandle.start_in_thread(state_file=state) as first:
        _, made = charge(first, "key-1", metadata={"operation_id": "op-1"})
        http("POST", f"{first.url}/payments/refunds", {"operation_id": "op-1"})
        http("POST", f"{first.url}/email/messages", {"to": "a@b.c", "subject": "s"})
        http("POST", f"{first.url}/tickets", {"business_key": "k", "title": "t"})
        before = {name: first.ledger(name) for name in ("payments", "email", "tickets")}
    with ServicesHandle.start_in_thread(state_file=state) as second:
        assert {name: second.ledger(name) for name in before} == before
        status, again = charge(second, "key-1", metadata={"operation_id": "op-1"})
        assert status == 200 and again["charge_id"] == made["charge_id"] and again["refunded"]
        assert charge(second, "key-1", amount_cents=1)[0] == 409
        assert len(http("GET", f"{second.url}/tickets?business_key=k")[1]) == 1
        second.reset()
    assert json.loads(state.read_text())["ledgers"]["payments"] == []


@pytest.mark.slow
def test_module_runs_until_sigterm(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durable_agents_local.services",
            "--port",
            "0",
            "--state-file",
            str(tmp_path / "state.json"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith(f"http://{HOST}:")
        client = ServicesHandle(url)
        client.stop()  # a connected handle does not own the server
        assert http("POST", f"{url}/tickets", {"business_key": "k", "title": "t"})[0] == 201
        assert len(client.ledger("tickets")) == 1
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    assert len(json.loads((tmp_path / "state.json").read_text())["ledgers"]["tickets"]) == 1


# --- the example tools ------------------------------------------------------------------------


@pytest.fixture
def tools_env(services: ServicesHandle, monkeypatch: pytest.MonkeyPatch) -> ServicesHandle:
    for name, value in services.env().items():
        monkeypatch.setenv(name, value)
    return services


def call(n: int = 1, attempt: int = 1) -> ToolCall:
    return ToolCall(
        operation_id=f"run-1:op:{n}", idempotency_key=f"run-1:op:{n}:key", attempt=attempt
    )


def test_charge_card_is_idempotent_found_and_refundable(tools_env: ServicesHandle) -> None:
    request = ChargeRequest(customer="cus_1", amount_cents=500, description="order")
    assert charge_card.lookup is not None and charge_card.compensate is not None
    assert charge_card.lookup(request, call()) == NotFound()
    result = charge_card.fn(request, call())
    assert isinstance(result, ToolResult) and result.external_id == result.value.charge_id
    assert result.value.metadata == {"operation_id": "run-1:op:1"}
    assert charge_card.fn(request, call(attempt=2)) == result
    assert len(events(tools_env, "payments", "charge.created")) == 1
    found = charge_card.lookup(request, call())
    assert isinstance(found, Found) and found.external_id == result.external_id
    charge_card.compensate(request, call())
    charge_card.compensate(request, call())
    assert len(events(tools_env, "payments", "charge.refunded")) == 1
    with pytest.raises(ToolRejectedError):
        charge_card.fn(request.model_copy(update={"amount_cents": 0}), call(2))


def test_charge_card_unclear_outcomes(tools_env: ServicesHandle) -> None:
    request = ChargeRequest(customer="cus_1", amount_cents=500)
    assert charge_card.lookup is not None
    tools_env.set_fault("payments", "charge", "act_then_drop")
    with pytest.raises((OSError, HTTPException)):
        charge_card.fn(request, call())
    assert isinstance(charge_card.lookup(request, call()), Found)
    tools_env.set_fault("payments", "charge", "fail_before_act")
    with pytest.raises(ProviderError):
        charge_card.fn(request, call(2))
    assert charge_card.lookup(request, call(2)) == NotFound()
    tools_env.set_fault("payments", "lookup", "unavailable")
    assert isinstance(charge_card.lookup(request, call()), Unknown)
    tools_env.set_fault("payments", "lookup", "act_then_drop")
    assert isinstance(charge_card.lookup(request, call()), Unknown)


def test_lookups_are_unknown_when_the_service_is_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ServicesHandle.start_in_thread() as gone:
        url = gone.url
    monkeypatch.setenv("PAYMENTS_URL", f"{url}/payments")
    monkeypatch.setenv("TICKETS_URL", f"{url}/tickets")
    assert charge_card.lookup is not None and create_ticket.lookup is not None
    assert isinstance(
        charge_card.lookup(ChargeRequest(customer="c", amount_cents=1), call()), Unknown
    )
    assert isinstance(
        create_ticket.lookup(TicketRequest(business_key="k", title="t"), call()), Unknown
    )
    with pytest.raises(OSError):
        charge_card.fn(ChargeRequest(customer="c", amount_cents=1), call())


def test_send_email_sends_every_time(tools_env: ServicesHandle) -> None:
    request = EmailRequest(to="a@example.com", subject="receipt", body="thanks")
    assert send_email.lookup is None and send_email.compensate is None and not send_email.idempotent
    first, second = send_email.fn(request, call()), send_email.fn(request, call())
    assert isinstance(first, ToolResult) and isinstance(second, ToolResult)
    assert first.external_id != second.external_id
    assert len(events(tools_env, "email", "message.sent")) == 2
    with pytest.raises(ToolRejectedError):
        send_email.fn(EmailRequest(to="nobody", subject="s"), call())


def test_create_ticket_lookup_by_business_key(tools_env: ServicesHandle) -> None:
    request = TicketRequest(business_key="order-7", title="refund")
    assert create_ticket.lookup is not None
    assert create_ticket.lookup(request, call()) == NotFound()
    made = create_ticket.fn(request, call())
    assert isinstance(made, ToolResult)
    found = create_ticket.lookup(request, call())
    assert isinstance(found, Found) and found.external_id == made.external_id
    create_ticket.fn(request, call(attempt=2))
    assert len(events(tools_env, "tickets", "ticket.created")) == 2  # no dedupe: lookup first
    tools_env.set_fault("tickets", "find_ticket", "unavailable")
    assert isinstance(create_ticket.lookup(request, call()), Unknown)
