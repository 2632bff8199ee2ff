"""``ctx.parallel`` and ``ctx.map``: fan-out with completion policies, one Lambda per branch.

Each branch is a child scope under the batch operation, so branch ids are deterministic and
independent of scheduling (``<batch op>/branch-<i>:<i+1>``). Within one invocation branches are
visited in index order; when the step budget runs out in several branches, the invocation ends
with one ``Step Ready`` event per ready branch (``target`` = the branch), so their next
operations run in separate StepRunner invocations — really in parallel. An invocation sent to
one branch advances only that branch; when a branch finishes it asks for an untargeted look, and
whichever invocation sees every needed branch finished records the batch result.

Each branch value is serialized once and stored once, in the branch's own record. The batch
record refers to the branches: one letter per branch in index order (``s`` succeeded, ``f``
failed, ``n`` not started) and the completion reason; only a branch with no record of its own
(a ``flat`` branch, or one that failed before it could record) has its value or error in the
batch record. A replay rebuilds the ``BatchResult`` from those records, decoding each branch as
its child scope's replay would, so it returns what the first execution returned. Batch records
written before this format hold every branch's value under ``items``; they replay as they are.

A batch given a batch serializer (``serdes=`` of ``ctx.map`` / ``ctx.parallel``, the AWS SDK's
meaning) is recorded as a whole: ``batch_serdes.serialize(batch_result)``, one text holding the
whole ``BatchResult``, goes into the batch record under ``batch``, beside the branch letters and
the completion reason (kept so timelines count failures without the serializer); the record
then holds no ``values`` or ``errors`` (they are inside that text). A replay returns
``batch_serdes.deserialize(text)`` and reads no branch record. The ``batch`` field is the
marker: a record without it is in the branch-referring form above, written by a batch without a
batch serializer or by code from before batch serializers (when ``serdes=`` meant each branch's
value, as ``item_serdes=`` does now), and replays as it always did. The branch records hold
their values as before (``item_serdes``, else ``serdes``, else tagged JSON), so in the whole
form each value is stored twice, as in the SDK.

A batch that completes with ``failure_tolerance_exceeded`` is recorded FAILED (ADR 0024): the
same outcome as the value, and a ``BatchFailedError`` as the error, which ``ctx.map`` /
``ctx.parallel`` raise, then and on every replay, with the rebuilt ``BatchResult`` on it
(``exc.result``). With ``on_failure="return"`` (the AWS SDK's behaviour) it is recorded
SUCCEEDED and returned, as every batch was before; a replay reads which one the record is and
never asks the policy again, so runs recorded by earlier code replay as they did.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from types import FunctionType
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from durable_agents.core.ids import check_name, format_position
from durable_agents.core.models import Entry, EntryType, ErrorInfo, OpKind
from durable_agents.core.serde import Serdes, decode, decode_value, encode, encode_value, error_info
from durable_agents.core.serde_errors import rebuild_error
from durable_agents.core.serde_values import from_tagged
from durable_agents.core.tracebacks import told_because
from durable_agents.engine.invocation import Invocation, Reason
from durable_agents.engine.operations.batch_result import (
    ALL_SUCCESSFUL,
    BatchFailedError,
    BatchItem,
    BatchResult,
    CompletionPolicy,
)
from durable_agents.engine.operations.child import run_child
from durable_agents.engine.operations.step import return_hint
from durable_agents.errors import (
    PayloadError,
    RunCancelledError,
    SecretSerializationError,
    SuspendExecution,
)

# A branch's outcome in the batch record, one letter per branch (see the module docstring).
_LETTERS = {"succeeded": "s", "failed": "f"}
_CANCELLED = RunCancelledError.__name__  # a branch's recorded error that is the run's cancel
# What a failure recorded without its error reads as (``Invocation.replay``'s fallback).
_UNKNOWN_ERROR = ErrorInfo("StepError", "unknown error")
_EXCEEDED = "failure_tolerance_exceeded"
ON_FAILURE = ("raise", "return")
"""What ``on_failure`` may be: raise ``BatchFailedError``, or return the ``BatchResult``."""
_LOG = logging.getLogger("durable_agents.batches")

__all__ = [
    "ALL_SUCCESSFUL",
    "ON_FAILURE",
    "BatchFailedError",
    "BatchItem",
    "BatchResult",
    "CompletionPolicy",
    "branch_names",
    "map_branches",
    "run_batch",
]

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope

T = TypeVar("T")


@dataclasses.dataclass(slots=True)
class _Branch:
    index: int
    position: str
    name: str = ""  # given by the code; "" for the default ``branch-<i>`` (see ``_label``)
    status: str = "pending"  # pending / succeeded / failed / skipped
    result: Any = None
    error: ErrorInfo | None = None
    started: bool = False
    recorded: bool = False  # its outcome is in its own record, at its position
    payload: str | None = None  # its value's text, when it has no record to hold it (flat)

    def recorded_as(self, entry: Entry) -> None:
        """Takes what ``run_child`` recorded for this branch: the batch refers to it."""
        self.recorded = True
        self.error = entry.error


def run_batch(
    ctx: OperationScope,
    kind: OpKind,
    name: str,
    branches: Sequence[Callable[[OperationScope], Any]],
    policy: CompletionPolicy,
    max_concurrency: int | None,
    serdes: Serdes | None = None,
    names: Sequence[str] | None = None,
    flat: bool = False,
    on_failure: str = "raise",
    batch_serdes: Serdes | None = None,
) -> BatchResult[Any]:
    """Executes, dispatches or replays one batch (see ``DurableContext.parallel``/``map``).

    Item results are recorded like child scope results (tagged JSON, the branch's return
    annotation, or ``serdes``: the per-item serializer), each once, in its branch's record.
    With ``batch_serdes`` the batch record holds the whole ``BatchResult`` as its text (see
    the module docstring), and the batch returns what that text decodes to. ``names`` names
    the branches (``branch-<i>`` by default); positions stay index-based. ``flat`` branches
    write no scope record of their own: one write less per branch, their values go into the
    batch record (into its ``batch`` text, with ``batch_serdes``);
    until the batch records its result, a finished branch is replayed (its operations are
    recorded) to get it. ``on_failure`` says what a batch that completes beyond its policy
    does (``raise`` or ``return``); a recorded batch replays as recorded, whatever it says.

    Raises:
        ValueError: If ``max_concurrency`` is below 1, or ``on_failure`` is not one of
            ``ON_FAILURE``.
        BatchFailedError: If the batch completed (now, or as recorded) with
            ``failure_tolerance_exceeded`` and was recorded FAILED.
        SuspendExecution: While branches are left to run here or elsewhere, or wait.
        PayloadError: If a recorded value cannot be decoded, the batch record names a
            branch result the journal does not hold, ``batch_serdes`` cannot encode the
            batch or decode it to a ``BatchResult``, or the batch was recorded as a whole and
            no ``batch_serdes`` is given to decode it.
    """
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError("max_concurrency must be at least 1")
    if on_failure not in ON_FAILURE:
        raise ValueError(f"on_failure is 'raise' or 'return', not {on_failure!r}")
    inv = ctx.invocation
    position, op_id, record = ctx.next_operation(kind, name)
    if record is not None and record.result is not None:
        return _replayed(ctx, position, op_id, record.result, branches, serdes, batch_serdes)
    if inv.target is not None and not inv.target.startswith(f"{position}/"):
        # This invocation was sent to a branch of an earlier batch, which it saw completed
        # and moved past: this batch is not that branch's, and nobody else was sent to its
        # branches. From here on the invocation is an untargeted one.
        inv.target = None
    scope = ctx.child(op_id, position)
    prefix = f"{position}/"
    if names is None:  # ``branch-<i>``, named only when it runs (``_label``)
        states = [_Branch(i, format_position(prefix, i + 1)) for i in range(len(branches))]
    else:
        states = [_Branch(i, format_position(prefix, i + 1), n) for i, n in enumerate(names)]
    # What the journal already says, in one pass over the records (replaying a batch stays
    # linear in its size: no scan of the journal per branch, no recount per branch).
    scopes = inv.scopes_with_records()
    tally = _Tally(total=len(states))
    records = inv.records
    for state, branch in zip(states, branches, strict=True):
        child = records.get(state.position)
        if child is not None and (result := child.result) is not None:
            state.recorded = True
            if result.type is EntryType.SUCCEEDED:
                state.status = "succeeded"
                # Decoded as the branch's child scope replays it (its return annotation).
                hint = None if flat else return_hint(branch)
                state.result = child.replayed(hint, serdes, _decode_branch_result)
            else:
                state.status, state.error = "failed", result.error
                if result.error is not None and result.error.type == _CANCELLED:
                    # Told inside this branch: as when it ran (``_run_branch``), the cancel
                    # ends the batch; read as a failed branch, a batch that its other
                    # branches complete would go on, told never again.
                    raise rebuild_error(result.error)
        state.started = state.status != "pending" or state.position in scopes
        tally.count(state, +1)

    dispatch: list[str] = []
    wakes: list[int] = []
    waiting: list[str] = []  # what suspended branches wait for (an approval, a callback, …)
    over_budget: SuspendExecution | None = None  # a branch's model call its budget refused
    finished_here = False
    for state, branch in zip(states, branches, strict=True):
        if state.status != "pending":
            continue  # a finished branch changes no count: no need to decide again here
        if tally.decided(policy) is not None:
            break
        if inv.target is not None and not _on_path(inv.target, state.position):
            tally.count(state, -1)
            state.status = "skipped"  # another invocation advances this branch
            continue
        if max_concurrency is not None and not state.started and tally.active >= max_concurrency:
            break  # later branches start when a slot frees up
        tally.count(state, -1)
        state.started = True
        inv.branches.append(state.position)
        try:
            _run_branch(ctx, scope, state, branch, serdes, flat)
            finished_here = True
        except SuspendExecution as signal:
            if inv.fault is not None:
                raise
            if signal.reason == Reason.CONTINUE:
                dispatch.extend(signal.targets or (state.position,))
            elif signal.reason == Reason.DISPATCH:
                dispatch.extend(signal.targets)
            elif signal.wake_at_ms is not None:
                wakes.append(signal.wake_at_ms)  # a timer, a retry delay, a held claim
            elif signal.reason == Reason.CONTENDED:
                # Another invocation holds this branch and may die holding it: look again when
                # its lease would be over. A merely contended branch never leaves the run
                # suspended with nothing to wake it.
                wakes.append(inv.now_ms() + inv.lease_ms)
            if signal.reason in (Reason.TIMER, Reason.EXTERNAL) and signal.detail:
                waiting.append(signal.detail)
            if signal.reason == Reason.BUDGET:
                over_budget = over_budget or signal
            # otherwise: someone else advances it, or it waits on the outside
        finally:
            inv.branches.pop()
            tally.count(state, +1)

    reason = tally.decided(policy)
    if reason is not None and (inv.target is None or _all_known(states)):
        raises = on_failure == "raise"
        return _complete(
            ctx, position, op_id, kind, name, states, reason, serdes, raises, batch_serdes
        )
    if dispatch:
        raise SuspendExecution(
            Reason.DISPATCH,
            targets=tuple(dict.fromkeys(dispatch)),
            detail=f"{len(dispatch)} branch(es) of {op_id}",
        )
    if finished_here and inv.target is not None:
        # This invocation finished a branch; an untargeted look decides the batch.
        raise SuspendExecution(Reason.CONTINUE, detail=f"branch of {op_id} finished")
    detail = f"{op_id} waits for " + _summary(waiting)
    if over_budget is not None and not wakes:
        # Nothing else wakes the run: it waits, BUDGET_EXCEEDED, for its budget (ADR 0030).
        # With a branch's timer too, the timer wakes it and that branch asks again.
        raise over_budget
    if wakes:
        raise SuspendExecution(Reason.TIMER, wake_at_ms=min(wakes), detail=detail)
    raise SuspendExecution(Reason.EXTERNAL, detail=detail)


@dataclasses.dataclass
class _Tally:
    """Running counts of a batch's branches, kept up to date as branches change."""

    total: int
    succeeded: int = 0
    failed: int = 0
    active: int = 0  # started and still pending
    last: tuple[int, int, str | None] | None = None  # (succeeded, failed) -> the decision

    def count(self, state: _Branch, sign: int) -> None:
        if state.status == "succeeded":
            self.succeeded += sign
        elif state.status == "failed":
            self.failed += sign
        elif state.started and state.status == "pending":
            self.active += sign

    def decided(self, policy: CompletionPolicy) -> str | None:
        # Asked before every pending branch; the answer changes only with these counts.
        known = self.last
        if known is not None and known[0] == self.succeeded and known[1] == self.failed:
            return known[2]
        reason = policy.decide(self.succeeded, self.failed, self.total)
        self.last = (self.succeeded, self.failed, reason)
        return reason


_SUMMARY_IDS = 3


def _summary(waiting: list[str]) -> str:
    """What suspended branches wait for: a count and a few of them, never all.

    The summary goes into the run header (``waiting_on``); a map of thousands of branches
    waiting for approvals must still fit in one item.
    """
    if not waiting:
        return "its branches"
    shown = "; ".join(waiting[:_SUMMARY_IDS])
    more = len(waiting) - _SUMMARY_IDS
    return f"{len(waiting)} branch wait(s): {shown}" + (f"; and {more} more" if more > 0 else "")


def _label(state: _Branch) -> str:
    """The branch's operation name: the one given, or ``branch-<i>``."""
    return state.name or f"branch-{state.index}"


def _on_path(target: str, branch_position: str) -> bool:
    return target == branch_position or target.startswith(f"{branch_position}/")


def _all_known(states: list[_Branch]) -> bool:
    return all(s.status in ("succeeded", "failed") for s in states)


def _run_branch(
    ctx: OperationScope,
    scope: OperationScope,
    state: _Branch,
    branch: Callable[..., Any],
    serdes: Serdes | None,
    flat: bool,
) -> None:

    scope._counter = state.index
    try:
        if flat:
            value = _run_flat(scope, branch, state, serdes)
        else:
            value = run_child(
                scope, branch, _label(state), None, serdes=serdes, on_recorded=state.recorded_as
            )
    except SuspendExecution:
        raise
    except Exception as exc:
        # A cancel is not one branch's failure: it ends the batch
        # (durable_agents.engine.cancellation).
        if ctx.invocation.fault is not None or isinstance(exc, RunCancelledError):
            raise
        state.status = "failed"
        if not state.recorded:  # else: the error as its record holds it (``recorded_as``)
            state.error = error_info(exc)
        return
    state.status, state.result = "succeeded", value


def _run_flat(
    scope: OperationScope, branch: Callable[..., Any], state: _Branch, serdes: Serdes | None
) -> Any:
    """Runs a branch in its own id space, with no record of its own.

    Its value's text is kept for the batch record (``state.payload``); it returns the value
    read back from that text, what a replay will return.
    """
    position, op_id, _ = scope.next_operation(OpKind.CHILD, _label(state))
    child = scope.child(op_id, position)
    value = branch(child)
    child.check_scope_end()
    payload = encode_value(value, None, serdes)
    state.payload = payload
    return decode_value(payload, None, serdes)


def _complete(
    ctx: OperationScope,
    position: str,
    op_id: str,
    kind: OpKind,
    name: str,
    states: list[_Branch],
    reason: str,
    serdes: Serdes | None,
    raises: bool,
    batch_serdes: Serdes | None,
) -> BatchResult[Any]:
    """Records the batch's outcome, referring to its branches' records, and returns it.

    What it returns is what ``_replayed`` rebuilds from the journal: each branch's value as
    its branch already decoded it (no second serialization), errors as recorded. With
    ``batch_serdes``, the whole ``BatchResult`` is serialized once, recorded under ``batch``,
    and what that text decodes to is returned. Beyond its policy
    (``failure_tolerance_exceeded``) and ``raises``, the batch is recorded FAILED.

    Raises:
        BatchFailedError: If it is recorded FAILED: the error as a replay rebuilds it.
        PayloadError: If ``batch_serdes`` cannot encode the batch, or its text does not decode
            to a ``BatchResult``.
    """
    inv = ctx.invocation
    values: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    items: list[dict[str, Any]] = []
    for s in states:
        index, status = s.index, s.status
        if status == "succeeded":
            if not s.recorded:  # a flat branch: the batch record is the only one
                values[str(index)] = _embedded(s.payload, serdes)
            items.append({"index": index, "status": status, "result": s.result})
        elif status == "failed":
            error = _error_dict(s.error or _UNKNOWN_ERROR)
            if not s.recorded:
                errors[str(index)] = error
            items.append({"index": index, "status": status, "error": error})
        else:  # started and unfinished ones are abandoned: not started, as far as it goes
            items.append({"index": index, "status": "not_started"})
    outcome: dict[str, Any] = {
        "branches": "".join(_LETTERS.get(s.status, "n") for s in states),
        "completion_reason": reason,
    }
    batch = _batch(items, reason)
    whole = (
        None
        if batch_serdes is None
        else _encode_whole(batch, batch_serdes, op_id, alone=batch_serdes is serdes)
    )
    if whole is not None:
        # The whole batch, in one text: flat branches' values and unrecorded errors are in it,
        # so ``values`` / ``errors`` would only store them a second time in this record.
        outcome["batch"], batch = whole
    else:
        if values:
            outcome["values"] = values
        if errors:
            outcome["errors"] = errors
    label = f"{kind.value} {name!r}"
    if reason == _EXCEEDED and raises:
        # Recorded with the outcome as its value too, so a replay rebuilds ``exc.result``.
        names = [_label(s) for s in states]
        info = _recorded(BatchFailedError.of_batch(label, batch, names), label)
        failed = inv.entry(
            position, op_id, kind, name, EntryType.FAILED, value=encode(outcome), error=info
        )
        inv.record(op_id, [failed])
        _warn(label, batch, op_id)
        # The error as recorded (scrubbed), so the first execution sees what replays see.
        raise _failed(info, batch)
    entry = inv.entry(position, op_id, kind, name, EntryType.SUCCEEDED, value=encode(outcome))
    inv.record(op_id, [entry])
    _warn(label, batch, op_id)
    return batch


def _warn(label: str, batch: BatchResult[Any], op_id: str) -> None:
    """Logs a batch that completed with failed branches, tolerated or not.

    Once, when its outcome is recorded (never on replay): a tolerated failure is easy to miss
    in a ``BatchResult`` nobody inspects.
    """
    failures = batch.failures
    if not failures:
        return
    first = failures[0].error or {}
    _LOG.warning(
        "%s (%s) completed with %s: %d of %d branch(es) failed; first error %s: %s",
        label,
        op_id,
        batch.completion_reason,
        len(failures),
        batch.branch_count,
        first.get("type", "unknown"),
        first.get("message", ""),
    )


def _recorded(exc: BatchFailedError, label: str) -> ErrorInfo:
    """The batch's error as recorded, with its first failed branch's story as its traceback.

    The error is built, not raised, where the batch ends: its own frames would tell nothing.
    """
    info = error_info(exc)
    story = exc.errors[0].get("traceback") if exc.errors else None
    what = f"{exc.failed_branches[0]} of {label}" if exc.failed_branches else label
    return dataclasses.replace(
        info, traceback=told_because(exc, what, story if isinstance(story, str) else None)
    )


def _failed(info: ErrorInfo, batch: BatchResult[Any] | None) -> Exception:
    """The recorded ``BatchFailedError``, rebuilt, carrying the batch's ``BatchResult``."""
    exc = rebuild_error(info)
    if isinstance(exc, BatchFailedError):
        exc.result = batch
    return exc


def _replayed(
    ctx: OperationScope,
    position: str,
    op_id: str,
    recorded: Entry,
    branches: Sequence[Callable[..., Any]],
    serdes: Serdes | None,
    batch_serdes: Serdes | None,
) -> BatchResult[Any]:
    """The recorded batch, rebuilt from its record and its branches' records.

    Raises:
        BatchFailedError: If the batch was recorded FAILED (its ``result`` rebuilt too).
        PayloadError: If a value cannot be decoded, the batch record names a branch result
            that is not in the journal, or it holds the batch as a whole and no
            ``batch_serdes`` is given.
    """
    inv = ctx.invocation
    if recorded.type is EntryType.FAILED:
        outcome = decode(recorded.value) if recorded.value is not None else None
        batch = None
        if isinstance(outcome, dict):
            batch = _rebuilt(inv, position, op_id, outcome, branches, serdes, batch_serdes)
        raise _failed(recorded.error or _UNKNOWN_ERROR, batch)
    outcome = inv.replay(recorded, None)
    return _rebuilt(inv, position, op_id, outcome, branches, serdes, batch_serdes)


def _rebuilt(
    inv: Invocation,
    position: str,
    op_id: str,
    outcome: dict[str, Any],
    branches: Sequence[Callable[..., Any]],
    serdes: Serdes | None,
    batch_serdes: Serdes | None,
) -> BatchResult[Any]:
    """The ``BatchResult`` a batch record's outcome and its branches' records describe.

    Raises:
        PayloadError: If a value cannot be decoded, the outcome names a branch result that
            is not in the journal, or it holds the batch as a whole and no ``batch_serdes``
            is given.
    """
    if "batch" in outcome:  # recorded as a whole: the text alone says what the batch is
        return _whole(outcome["batch"], batch_serdes, op_id)
    if "items" in outcome:  # recorded before batch records referred to their branches
        return _decoded(BatchResult[Any].model_validate(outcome), serdes)
    values: dict[str, Any] = outcome.get("values") or {}
    errors: dict[str, Any] = outcome.get("errors") or {}
    records = inv.records
    prefix = f"{position}/"
    items: list[dict[str, Any]] = []
    for index, letter in enumerate(outcome["branches"]):
        if letter == "n":
            items.append({"index": index, "status": "not_started"})
            continue
        key = str(index)
        if letter == "s" and key in values:
            value = _unembedded(values[key], serdes)
            items.append({"index": index, "status": "succeeded", "result": value})
            continue
        if letter == "f" and key in errors:
            items.append({"index": index, "status": "failed", "error": errors[key]})
            continue
        branch_position = format_position(prefix, index + 1)
        child = records.get(branch_position)
        result = child.result if child is not None else None
        if result is None or (result.type is EntryType.SUCCEEDED) != (letter == "s"):
            raise PayloadError(
                f"batch {op_id} recorded branch {index} as {letter!r}, but the journal holds "
                f"no such result at {branch_position}"
            )
        if letter == "f":
            error = _error_dict(result.error or _UNKNOWN_ERROR)
            items.append({"index": index, "status": "failed", "error": error})
            continue
        hint = return_hint(branches[index]) if index < len(branches) else None
        value = child.replayed(hint, serdes, _decode_branch_result)  # type: ignore[union-attr]
        items.append({"index": index, "status": "succeeded", "result": value})
    return _batch(items, outcome["completion_reason"])


def _encode_whole(
    batch: BatchResult[Any], batch_serdes: Serdes, op_id: str, *, alone: bool
) -> tuple[str, BatchResult[Any]] | None:
    """The batch serializer's text of the whole ``BatchResult``, and what a replay reads of it.

    Returns:
        ``(text, batch as decoded)``: a replay returns the decoded batch, so the first
        execution returns the same. None when ``serdes=`` was given alone and cannot write or
        read a ``BatchResult``: code written when ``serdes=`` meant each branch's value only
        (a run in flight when this version was deployed, whose batch completes now) keeps that
        meaning instead of failing its run; the batch is recorded as it was before (each value
        with the serializer), which replays as before, and a warning says what to change.

    Raises:
        PayloadError: If a batch serializer given as such (with ``item_serdes=``) cannot
            write or read the batch.
        SecretSerializationError: If the batch holds a credential (whatever was given).
    """
    try:
        text = encode_value(batch, None, batch_serdes)
        return text, _whole(text, batch_serdes, op_id)
    except PayloadError as exc:
        if not alone or isinstance(exc, SecretSerializationError):
            raise  # a credential is refused whatever the serializer: no fallback for it
        _LOG.warning(
            "batch %s: its serdes= cannot serialize the whole BatchResult (%s); each branch's "
            "value was recorded with it, as before serdes= also meant the batch (the AWS SDK's "
            "meaning). Pass item_serdes= for that, or a serializer that handles a BatchResult",
            op_id,
            exc,
        )
        return None


def _whole(text: Any, batch_serdes: Serdes | None, op_id: str) -> BatchResult[Any]:
    """The ``BatchResult`` a batch recorded as a whole holds: ``batch_serdes``'s decoding.

    A ``BatchResult`` is returned as the serializer gives it; anything else (a dict, say) is
    validated into one.

    Raises:
        PayloadError: If no ``batch_serdes`` is given (the code no longer passes the
            ``serdes=`` the batch was recorded with), it cannot decode the text, or what it
            gives is not a ``BatchResult``.
    """
    if batch_serdes is None:
        raise PayloadError(
            f"batch {op_id} was recorded as a whole with a batch serializer (serdes=); "
            "replaying it needs that serializer, and none is given"
        )
    if not isinstance(text, str):
        raise PayloadError(f"batch {op_id}: its record holds no serializer text")
    value = decode_value(text, None, batch_serdes)
    if isinstance(value, BatchResult):
        return value
    try:
        return BatchResult[Any].model_validate(value)
    except ValidationError as exc:
        raise PayloadError(
            f"batch {op_id}: serdes.deserialize gave {type(value).__name__}, not a BatchResult"
            f": {exc}"
        ) from exc


def _batch(items: list[dict[str, Any]], reason: str) -> BatchResult[Any]:
    """The ``BatchResult`` of these items, their results kept as they are (not copied).

    Validated in one call: for thousands of branches, much cheaper than a ``BatchItem`` each.
    """
    return BatchResult[Any].model_validate({"items": items, "completion_reason": reason})


def _embedded(payload: str | None, serdes: Serdes | None) -> Any:
    """A value's text as the batch record holds it.

    The serdes text, or the tagged JSON tree (embedded, not a string of JSON inside JSON).
    """
    return payload if serdes is not None or payload is None else json.loads(payload)


def _unembedded(held: Any, serdes: Serdes | None) -> Any:
    """The value ``_embedded`` put into the batch record (``_decoded`` for one item)."""
    if held is None:
        return None
    return decode_value(held, None, serdes) if serdes is not None else from_tagged(held)


def _error_dict(info: ErrorInfo) -> dict[str, Any]:
    """A branch's error as the batch result gives it: a fresh JSON dict.

    The recorded ``ErrorInfo`` is shared by every replay of a warm container, and agent code
    may change what it is given.
    """
    error: dict[str, Any] = decode(encode(info.to_dict()))
    return error


def _decoded(batch: BatchResult[Any], serdes: Serdes | None) -> BatchResult[Any]:
    """A batch recorded with its items' values, those values decoded.

    Batch records written before records referred to their branches hold each item's result
    as the serdes text, or as tagged JSON.
    """
    for item in batch.items:
        if item.status != "succeeded" or item.result is None:
            continue
        if serdes is not None:
            item.result = decode_value(item.result, None, serdes)
        else:
            item.result = from_tagged(item.result)
    return batch


def branch_names(
    branches: Sequence[Callable[..., Any]] | Mapping[str, Callable[..., Any]],
) -> tuple[list[Callable[..., Any]], list[str] | None]:
    """The branches of ``ctx.parallel``, and their names when given as a mapping.

    Raises:
        InvalidNameError: If a branch name is not a valid operation name.
    """
    if isinstance(branches, Mapping):
        return list(branches.values()), [check_name(n, "branch") for n in branches]
    return list(branches), None


def _decode_branch_result(entry: Entry, hint: Any, serdes: Serdes | None) -> Any:
    return decode_value(entry.value, hint, serdes)


def map_branches(
    items: Sequence[Any],
    fn: Callable[..., Any],
    item_namer: Callable[[Any, int], str] | None,
) -> tuple[list[Callable[..., Any]], list[str] | None]:
    """The branches of ``ctx.map``: ``fn(ctx, item, index)`` or ``fn(ctx, item, index, items)``.

    Raises:
        InvalidNameError: If ``item_namer`` gives a name that is not a valid operation name.
    """
    whole = list(items)
    with_items = _takes_items(fn)
    branches = [
        (lambda child, item=item, index=index: fn(child, item, index, whole))
        if with_items
        else (lambda child, item=item, index=index: fn(child, item, index))
        for index, item in enumerate(whole)
    ]
    if item_namer is None:
        return branches, None
    return branches, [check_name(item_namer(item, i), "item") for i, item in enumerate(whole)]


def _takes_items(fn: Callable[..., Any]) -> bool:
    if (
        type(fn) is FunctionType
        and not hasattr(fn, "__wrapped__")
        and not hasattr(fn, "__signature__")
    ):
        # What ``inspect.signature`` reads for a plain function, straight from its code: the
        # batch's replay asked for a whole signature on every invocation.
        code = fn.__code__
        return code.co_argcount >= 4 or bool(code.co_flags & inspect.CO_VARARGS)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 4 or any(p.kind is p.VAR_POSITIONAL for p in params)
