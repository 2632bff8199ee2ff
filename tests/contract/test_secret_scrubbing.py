"""Security finding 6: a revealed secret never reaches the journal, a log line or an event.

Credentials can leak through an exception message (``f"auth failed for {key}"``): the values of
secrets revealed in this process are scrubbed from every recorded error and note, every log
line and every event. pydantic's ``SecretStr``/``SecretBytes`` are refused like ``Secret``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from durable_agents import (
    AgentRegistry,
    DurableContext,
    RetryPolicy,
    Secret,
    ToolCall,
    agent,
    tool,
)
from durable_agents.core.models import WaitStatus
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolRegistry
from durable_agents_local.testing import AgentTestRunner

VALUE = "sk-live-4f9a-very-secret"


class Keys:
    def credentials_for(self, purpose: str) -> dict[str, Secret]:
        return {"api_key": Secret(VALUE)}


class Mail(BaseModel):
    to: str


def everything_recorded(journal: JournalStore, runner: AgentTestRunner, run_id: str) -> str:
    snapshot = journal.load(run_id)
    waits = [
        w for kind in ("approval", "callback") for w in journal.list_waits(kind, WaitStatus.PENDING)
    ]
    return repr((snapshot, journal.effects_in_review(), waits, runner.publisher.events))


def test_a_secret_in_an_exception_message_is_scrubbed_everywhere(
    journal: JournalStore, caplog: pytest.LogCaptureFixture
) -> None:
    @tool(name="mailer", registry=ToolRegistry(), max_attempts=2)
    def mailer(request: Mail, call: ToolCall) -> str:
        key = call.credentials["api_key"].reveal()
        raise RuntimeError(f"provider refused key {key} for {request.to}")

    @agent(name="leaks", version="1", registry=AgentRegistry())
    def leaks(ctx: DurableContext, _: Any) -> str:
        def login() -> str:
            key = Keys().credentials_for("x")["api_key"].reveal()
            raise PermissionError(f"login refused for key {key}")

        try:
            ctx.step(login, retry=RetryPolicy(max_attempts=2, initial_delay_seconds=1, jitter=0))
        except PermissionError as exc:
            ctx.logger.warning("login failed: %s", exc, detail=str(exc))
        return str(ctx.tool(mailer, Mail(to="a@example.com")))

    runner = AgentTestRunner(leaks, journal=journal)
    runner.runtime.credentials = Keys()
    with caplog.at_level(logging.DEBUG):
        result = runner.run(None)
    assert result.status in ("PAUSED", "FAILED")  # the mail went to review (or gave up)
    recorded = everything_recorded(journal, runner, result.run_id)
    assert "provider refused key" in recorded or "refused" in recorded  # the error is kept
    assert VALUE not in recorded
    assert VALUE not in repr(journal.get_run(result.run_id))
    assert "login failed: login refused for key ***" in caplog.text
    assert VALUE not in caplog.text


def test_pydantic_secret_fields_are_refused_not_masked(journal: JournalStore) -> None:
    class Login(BaseModel):
        user: str
        password: SecretStr

    @agent(name="masks", version="1", registry=AgentRegistry())
    def masks(ctx: DurableContext, _: Any) -> Any:
        return ctx.step(lambda: Login(user="u", password=SecretStr(VALUE)), name="login")

    result = AgentTestRunner(masks, journal=journal).run(None)
    assert result.status == "FAILED"
    assert result.error is not None and result.error.type == "SecretSerializationError"
    assert "**********" not in repr(journal.load(result.run_id))


def test_a_secret_is_refused_as_a_published_status_or_a_sent_event(journal: JournalStore) -> None:
    from durable_agents.engine.inbox import send_event
    from durable_agents.errors import SecretSerializationError

    @agent(name="publishes", version="1", registry=AgentRegistry())
    def publishes(ctx: DurableContext, _: Any) -> str:
        ctx.set_status({"key": Keys().credentials_for("x")["api_key"]})
        return "published"

    runner = AgentTestRunner(publishes, journal=journal)
    result = runner.run(None)
    assert result.status == "FAILED"
    assert result.error is not None and result.error.type == "SecretSerializationError"
    with pytest.raises(SecretSerializationError):
        send_event(journal, runner.clock, result.run_id, "note", {"key": Secret(VALUE)})
    recorded = everything_recorded(journal, runner, result.run_id)
    assert VALUE not in recorded
    assert journal.list_waits("event", WaitStatus.PENDING) == []  # nothing was recorded
