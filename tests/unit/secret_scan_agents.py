"""An agent and tools that leak their credential through every exception path there is.

Imported by the handlers through ``AGENT_MODULES`` in tests/unit/test_secret_scan_handlers.py.
The credential is revealed where it is used (as a tool that reads it from Secrets Manager
would), and then turns up in:

* an exception message (``f"... {key}"``);
* a chained exception (``raise ... from ConnectionError(key)``: only in tracebacks);
* the repr of an exception's args (``RuntimeError("refused", {"api_key": key})``);
* a lookup that raises (the reconciler's path: the reason of its ``Unknown`` verdict);
* a credential provider that raises for one tool (recorded on the call as a failure to mint
  its credentials, with the key in the reason);
* a tool whose declared credentials — an STS session of a role and a Secrets Manager value,
  minted per call — it reveals and puts into its refusal (``ToolRejectedError``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from durable_agents import DurableContext, RetryPolicy, Secret, agent
from durable_agents.aws.credentials import assume_role, boto3_session, secret
from durable_agents.core.credentials import CredentialProvider
from durable_agents.tools import LookupResult, ToolCall, ToolRejectedError, tool

KEY = "sk-live-3e8d-chained-never-logged"
AGENT = "secret-scan-leaky"
WIRE_TOOL = "secret-scan-wire"
LEDGER_TOOL = "secret-scan-ledger"
VAULT_TOOL = "secret-scan-vault"
MINTED_TOOL = "secret-scan-minted"
MINTED_SECRET = "secret-scan/payments-key"  # created by the test in moto's Secrets Manager
ROLE_ENV = "SECRET_SCAN_ROLE_ARN"
# Big enough to be spilled to S3 (INLINE_LIMIT_BYTES is 350 KB), so the scan reads S3 too.
MEMO_BYTES = 360_000


def api_key() -> str:
    """The credential, revealed for use (``Secret.reveal`` registers it for scrubbing)."""
    return Secret(KEY).reveal()


class Wire(BaseModel):
    to: str
    memo: str = ""


def _refuse(what: str) -> None:
    key = api_key()
    try:
        raise ConnectionError(f"tls alert from the gateway for key {key}")
    except ConnectionError as cause:
        # The key is in the cause (tracebacks only) and in the repr of the args (str(exc)).
        raise RuntimeError(f"{what} refused", {"api_key": key}) from cause


@tool(name=WIRE_TOOL, max_attempts=1)  # neither lookup nor idempotency: an unclear outcome
def wire(request: Wire, call: ToolCall) -> str:  # goes to a person
    _refuse("wire")
    return "unreachable"


def ledger_lookup(request: Wire, call: ToolCall) -> LookupResult:
    _refuse("ledger lookup")
    raise AssertionError("unreachable")


@tool(name=LEDGER_TOOL, lookup=ledger_lookup, stale_after_seconds=1)
def ledger(request: Wire, call: ToolCall) -> str:
    _refuse("ledger")
    return "unreachable"


@tool(name=VAULT_TOOL, stale_after_seconds=1)
def vault(request: Wire, call: ToolCall) -> str:
    return "never called: its credentials cannot be minted"


class RefusingProvider(CredentialProvider):
    """Mints the key for every tool, and fails with the key in the error for the vault."""

    def credentials_for(self, purpose: str) -> dict[str, Secret]:
        if purpose == VAULT_TOOL:
            _refuse("credential for the vault")
        return {"api_key": Secret(KEY)}


@tool(name=MINTED_TOOL, credentials=[assume_role(env=ROLE_ENV), secret(MINTED_SECRET)])
def minted(request: Wire, call: ToolCall) -> str:
    """Uses its minted credentials, then refuses with all of them in the message."""
    session = boto3_session(call.credentials).get_credentials()
    key = call.credentials[MINTED_SECRET].reveal()
    raise ToolRejectedError(
        MINTED_TOOL, f"gateway refused {key} / {session.secret_key} / {session.token}"
    )


@agent(name=AGENT, version="1")
def leaky(ctx: DurableContext, to: str) -> Any:
    def probe(number: str) -> str:
        _refuse(f"probe of {number}")
        return "unreachable"

    try:
        ctx.step(probe, to, name="probe", retry=RetryPolicy(max_attempts=1))
    except RuntimeError as exc:
        ctx.logger.error("probe failed: %s", exc)
    try:
        ctx.tool(minted, Wire(to=to))
    except ToolRejectedError as exc:
        ctx.logger.error("minted call refused: %s", exc)
    return ctx.tool(wire, Wire(to=to, memo="m" * MEMO_BYTES))
