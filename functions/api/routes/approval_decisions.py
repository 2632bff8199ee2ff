"""Deciding an approval: who may, whether it is still open, and recording the decision once.

The one code path of every decision: ``POST /approvals/{id}`` (IAM), ``/people/approvals/{id}``
(JWT), ``/links/approvals/{id}`` (signed link) in ``routes.approvals``, and the console's form
(``routes.console``). ``approval.record_decision`` records a decision once: the first one wins,
a second gets 409 with the first, one after the deadline gets 410, and so does one after the
approval's run finished (the approval is closed instead).
"""

from __future__ import annotations

from typing import Literal

from aws_lambda_powertools import Logger
from pydantic import BaseModel, ConfigDict, Field

from api.routes.common import wake
from api.services import get_runtime
from durable_agents.auth.tokens import NotAnApproverError
from durable_agents.core.models import WaitRecord, WaitStatus
from durable_agents.core.principals import Principal, may_decide
from durable_agents.engine.operations.approval import expire_approval, record_decision
from durable_agents.engine.wait_records import WaitGoneError, closed_for_finished_run

logger = Logger(child=True)


class DecisionRequest(BaseModel):
    """Body of a decision: ``POST /approvals/{id}`` and ``POST /people/approvals/{id}``."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject"]
    comment: str = Field(default="", max_length=2000)


def authorize(principal: Principal, record: WaitRecord) -> None:
    """Refuses a caller who is not among the approval's approvers.

    Raises:
        NotAnApproverError: If no approver pattern of the approval matches ``principal`` (403).
    """
    if not may_decide(principal, record.details.get("approvers", [])):
        who = (
            f"the link's approver {principal.identity}"
            if principal.via == "link"
            else principal.display
        )
        raise NotAnApproverError(f"{who} is not among the approvers of {record.wait_id}")


def ensure_open(record: WaitRecord) -> None:
    """Raises WaitGoneError if the approval was decided or its deadline passed (expiring it)."""
    if record.status is not WaitStatus.PENDING:
        raise WaitGoneError(record)
    rt = get_runtime()
    if record.deadline_ms is not None and rt.clock.now_ms() >= record.deadline_ms:
        try:
            record = expire_approval(rt.store, rt.clock, record)
        except WaitGoneError as exc:
            record = exc.record
        if record.status is WaitStatus.EXPIRED:
            wake(record.run_id, "approval-expired")
        raise WaitGoneError(record)


def decide(
    record: WaitRecord,
    request: DecisionRequest,
    *,
    decided_by: str,
    via: str,
    minted_by: str | None = None,
) -> WaitRecord:
    """Records the decision, once, and wakes the run.

    Raises:
        WaitGoneError: If it was already decided (409), expired or closed (410).
    """
    ensure_open(record)
    rt = get_runtime()
    try:
        settled = record_decision(
            rt.store,
            rt.clock,
            record,
            approved=request.decision == "approve",
            decided_by=decided_by,
            comment=request.comment,
            via=via,
            minted_by=minted_by,
        )
    except WaitGoneError as exc:
        # Closed because its run had finished: there is no run to wake.
        if exc.record.status is WaitStatus.EXPIRED and not closed_for_finished_run(exc.record):
            wake(exc.record.run_id, "approval-expired")
        raise
    wake(settled.run_id, "approval-decided")
    logger.info(
        "approval decided",
        extra={
            "approval_id": settled.wait_id,
            "run_id": settled.run_id,
            "approved": request.decision == "approve",
            "via": via,
            "decided_by": decided_by,
            "minted_by": minted_by,
        },
    )
    return settled
