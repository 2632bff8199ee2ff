"""``ctx.invoke``: a sub-agent as a child run, started exactly once however often it replays.

The child's run id is derived from the parent's operation id, and creating a run is a
conditional write: a replay (or a duplicate invocation) that tries to start it again adopts the
existing child instead of creating a second worker. The parent suspends; when the child
finishes, the runtime publishes ``Step Ready`` for the parent, whose replay records the child's
outcome as this operation's result.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import TYPE_CHECKING, Any

from durable_agents.core.ids import check_run_id
from durable_agents.core.models import Entry, EntryType, OpKind, RunStatus
from durable_agents.core.serde import (
    Serdes,
    canonical_json,
    decode,
    encode,
    encode_value,
    error_info,
    replay_value,
)
from durable_agents.engine import reruns
from durable_agents.engine.events import step_ready
from durable_agents.engine.fingerprints import Fingerprint
from durable_agents.engine.invocation import Invocation, Reason, Suspension
from durable_agents.engine.run_starts import new_header, validate_input
from durable_agents.errors import (
    AgentNotFoundError,
    DurableError,
    EntryConflictError,
    PayloadError,
    RunStateConflictError,
    SuspendExecution,
)
from durable_agents.journal.store import input_hash

if TYPE_CHECKING:
    from durable_agents.agent import AgentDefinition
    from durable_agents.engine.context_scope import OperationScope


class ChildRunFailedError(DurableError):
    """A sub-agent's run failed; carries its id and its error's type and message."""

    recorded_fields = ("child_run_id", "error_type", "error_message")

    def __init__(self, child_run_id: str, error_type: str, error_message: str):
        self.child_run_id = child_run_id
        self.error_type = error_type
        self.error_message = error_message
        super().__init__(f"sub-agent run {child_run_id} failed: {error_type}: {error_message}")


def child_run_id(parent_run_id: str, operation_id: str, name: str) -> str:
    """The child's run id: readable, deterministic, within the run-id alphabet and length."""
    digest = hashlib.sha256(operation_id.encode()).hexdigest()[:12]
    return f"{parent_run_id[:80]}.{name[:30]}.{digest}"


class SubAgentNotDeployedError(DurableError):
    """The sub-agent a run invokes is not deployed here: the run pauses for a person.

    Not the agent's error to handle (it cannot catch it): deploy the sub-agent, then redrive.
    """

    recorded_fields = ("agent", "deployed")

    def __init__(self, agent: str, deployed: list[str]):
        self.agent = agent
        self.deployed = deployed
        super().__init__(
            f"sub-agent {agent!r} is not deployed here (deployed agents: {deployed or 'none'}); "
            "deploy it and redrive the run"
        )


def _output_type(inv: Invocation, agent: str) -> Any:
    try:
        return inv.registry.latest(agent).output_type
    except AgentNotFoundError:
        return None  # replaying a recorded result of a sub-agent no longer deployed: JSON


def run_invoke(
    ctx: OperationScope,
    agent: AgentDefinition[Any, Any] | str,
    value: Any,
    name: str,
    tenant: str | None = None,
    *,
    payload_serdes: Serdes | None = None,
    result_serdes: Serdes | None = None,
) -> Any:
    """Starts, awaits or replays one sub-agent run (see ``DurableContext.invoke``).

    Raises:
        PayloadError: If ``payload_serdes`` does not produce JSON text (the child's input).
    """
    inv = ctx.invocation
    agent_name = agent if isinstance(agent, str) else agent.name
    if payload_serdes is not None:
        value = _serialized_input(value, payload_serdes)
    fingerprint = Fingerprint.of_value({"agent": agent_name, "input": value})
    position, op_id, record = ctx.next_operation(OpKind.INVOKE, name, fingerprint)
    output_type = _output_type(inv, agent_name) if isinstance(agent, str) else agent.output_type
    if record is not None and record.result is not None:
        return _replay(inv, record.result, output_type, result_serdes)
    child_id = child_run_id(inv.run_id, op_id, name)
    if record is None or record.scheduled is None:
        if agent_name not in inv.registry.names():
            inv.fault = SubAgentNotDeployedError(agent_name, inv.registry.names())
            raise inv.fault
        inv.take_budget(op_id)
        inv.hooks.before_claim(op_id)
        if inv.header.rerun is not None:
            reused = _reused_child(inv, agent_name, value, position, op_id, name, fingerprint)
            if reused is not None:
                return _replay(inv, reused, output_type, result_serdes)
        # Creating the child is idempotent by id: a second attempt adopts the existing run.
        # Its Step Ready goes out with this invocation's commit (pending_events, below).
        with contextlib.suppress(EntryConflictError):
            # A sub-agent's run is its parent's tenant's (unless the agent's code names
            # another: agent code is the deployment's own, trusted code).
            header = new_header(
                inv.registry,
                inv.clock,
                agent_name,
                value,
                run_id=check_run_id(child_id),
                parent_run_id=inv.run_id,
                idempotency_key=None,
                tenant=tenant or inv.header.tenant,
                execution_timeout=None,
                parent=inv.header,  # its priority, and its tree's budget (ADR 0030)
            )
            inv.store.create_run(header)
        inv.pending_events.append(step_ready(child_id, "started"))
        started = inv.entry(
            position,
            op_id,
            OpKind.INVOKE,
            name,
            EntryType.SCHEDULED,
            value=canonical_json({"child_run_id": child_id}),
            meta=fingerprint.meta(),
        )
        try:
            inv.commit(
                [started],
                Suspension(None, {"kind": "invoke", "op_id": op_id, "child_run_id": child_id}),
            )
        except EntryConflictError as exc:
            raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
        inv.executed.append(op_id)
        inv.hooks.after_record(op_id)
        raise SuspendExecution(Reason.EXTERNAL, detail=f"sub-agent {child_id}")
    child = inv.store.get_run(child_id)
    if child.status is RunStatus.RUNNING:
        # The child's first Step Ready may have been lost with a crashed parent invocation:
        # nudging it again is harmless (its claims make duplicates no-ops).
        inv.pending_events.append(step_ready(child_id, "parent-replayed"))
    if not child.status.terminal:
        if inv.header.status is not RunStatus.SUSPENDED:
            try:  # a replay found the child still running: sleep again
                inv.commit(
                    [],
                    Suspension(None, {"kind": "invoke", "op_id": op_id, "child_run_id": child_id}),
                )
            except RunStateConflictError as exc:
                raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
        raise SuspendExecution(Reason.EXTERNAL, detail=f"sub-agent {child_id}")
    if child.status is RunStatus.SUCCEEDED:
        done = inv.entry(
            position,
            op_id,
            OpKind.INVOKE,
            name,
            EntryType.SUCCEEDED,
            value=child.result,
            meta={"child_run_id": child_id, **fingerprint.meta()},
        )
    else:
        error = child.error
        failure = ChildRunFailedError(
            child_id, error.type if error else "Unknown", error.message if error else ""
        )
        done = inv.entry(
            position,
            op_id,
            OpKind.INVOKE,
            name,
            EntryType.FAILED,
            error=error_info(failure),
            meta={"child_run_id": child_id, **fingerprint.meta()},
        )
    try:
        inv.commit([done])
    except EntryConflictError as exc:
        raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
    return _replay(inv, done, output_type, result_serdes)


def _reused_child(
    inv: Invocation,
    agent_name: str,
    value: Any,
    position: str,
    op_id: str,
    name: str,
    fingerprint: Fingerprint,
) -> Entry | None:
    """A rerun's sub-agent call, answered by its chain's child that SUCCEEDED on this input.

    The child is not started again (``durable_agents.engine.reruns``): its result is recorded
    as this operation's, naming the child, in one write.

    Raises:
        SuspendExecution: If another invocation recorded the operation meanwhile.
    """
    definition = inv.registry.latest(agent_name)
    encoded = encode(validate_input(definition, value), definition.input_type)
    found = reruns.reusable_child(
        inv.store, inv.header, agent_name, input_hash(definition.name, encoded), position
    )
    if found is None:
        return None
    child_id, original = found
    done = inv.entry(
        position,
        op_id,
        OpKind.INVOKE,
        name,
        EntryType.SUCCEEDED,
        value=original.value,
        meta={
            "child_run_id": child_id,
            reruns.REUSED_CHILD: child_id,
            "reused_from": original.op_id,
            **fingerprint.meta(),
        },
    )
    try:
        inv.commit([done])
    except EntryConflictError as exc:
        raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
    inv.executed.append(op_id)
    inv.hooks.after_record(op_id)
    return done


def _serialized_input(value: Any, serdes: Serdes) -> Any:
    """The child's input: the JSON that ``serdes`` makes of ``value``."""
    text = encode_value(value, None, serdes)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise PayloadError(f"payload_serdes must produce JSON (the child's input): {exc}") from exc


def _replay(inv: Invocation, entry: Entry, output_type: Any, serdes: Serdes | None) -> Any:
    # The child's output is the plain JSON its run recorded: without a serdes it is decoded as
    # the run output is (by the agent's output type), never as tagged JSON.
    if serdes is not None:
        return replay_value(entry, None, serdes)
    if entry.type is EntryType.FAILED:
        return inv.replay(entry, output_type)
    return decode(entry.value, output_type)
