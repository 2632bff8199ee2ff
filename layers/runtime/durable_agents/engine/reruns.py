"""Re-running a finished run from one of its operations, without repeating its side effects.

A rerun is a new run (its own id, header and journal) of the same agent, on the version asked
for (the deployed one by default), with the original's input or a replacement. Its journal
starts with the original's records of every top-level operation *before* the one it re-runs
from, so those replay; from there the agent runs anew. Code that no longer matches the copied
records stops the rerun as any divergence does (``ReplayDivergedError``), never silently.

**The ledger.** Every side effect the original (and each earlier rerun in its chain) made is a
record with its tool, canonical request, idempotency key and result. When the rerun reaches a
tool call it has not made yet (``from_ledger``):

* a COMMITTED call of the chain with the same tool and canonical request, not reused yet by
  this rerun, is **reused**: its recorded result becomes this call's, committed at once with a
  note naming where it came from; the tool does not run. The one at the same position is
  preferred, then the earliest;
* otherwise, a COMMITTED call of the same tool *at the same position* with another request goes
  to **review**: a person reads "the original run already did X; this rerun asks for Y" and
  decides (``retry`` executes Y, ``committed`` records a result without executing, ``abandon``
  fails the call);
* a call of the same tool the chain has not settled (PREPARED, NEEDS_REVIEW; only possible if
  an invocation of a stopped run prepared it after the rerun was checked) goes to review too;
* anything else runs as in any run, under this run's own idempotency keys.

``repeat_effects`` turns reuse and the review of differing requests off: every call runs again
(the request that asked for it was shown the list first, ``RerunPlan.effects_after``).

**Creating it** (``plan``, then ``start``) is crash-safe and idempotent: the header is created
first (conditional on the rerun's idempotency key, so the same request twice makes one run),
then the copy is written in chunks in key order, each entry at most once; the header says how
many entries the copy has, and the run's first invocation finishes a copy a crash cut short
(``complete_copy``) before anything replays. ``Step Ready`` follows the copy.

Refused (``RerunRefusedError``, 409) while the run is not finished, while a run of its chain
has a call that is not settled (the reconciler or a review settles it first), when the chain
is ``MAX_CHAIN`` long, when a run of the chain has expired (its ledger is gone; unless
``repeat_effects``), and when an operation before the chosen one never finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_agents.core.clock import Clock
from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    Entry,
    EntryType,
    RunChange,
    RunHeader,
    RunSnapshot,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.core.serde import canonical_json, error_info
from durable_agents.engine.effects.records import REUSED_FROM
from durable_agents.engine.events import OutgoingEvent
from durable_agents.errors import (
    DurableError,
    EntryConflictError,
    RunNotFoundError,
    RunStateConflictError,
)
from durable_agents.journal.generation_keys import generation_of, id_prefix, pos_prefix

if TYPE_CHECKING:
    from durable_agents.engine.effects.protocol import SideEffectProtocol
    from durable_agents.engine.ports import InvocationStore
    from durable_agents.tools import Tool

RERUNNABLE = frozenset(
    {
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.TIMED_OUT,
        RunStatus.TERMINATED,
    }
)
"""The statuses a run may be re-run from: finished ones."""

MAX_CHAIN = 20
"""At most this many runs in a chain of reruns (the original and every rerun of a rerun)."""

RUN_RERUN_STARTED = "Run Rerun Started"
"""The event a new rerun is announced with (once per rerun: ``event_id`` is its run id)."""

COPY_CHUNK = 25
"""Entries per write of the copy (DynamoDB's transactions hold at most 100 items)."""

START = "start"
FAILED = "failed"
REUSED_CHILD = "reused_child"
"""The meta key of a rerun's sub-agent result taken from its chain: the child's run id."""
SAME_INPUT: Any = object()
"""``Runtime.rerun``'s default input: the original's."""
_UNSETTLED = frozenset({EffectStatus.PREPARED, EffectStatus.NEEDS_REVIEW})


class RerunRefusedError(DurableError):
    """The run cannot be re-run now (409): the message says why and what settles it."""


class UnknownOperationError(DurableError):
    """``from`` names no operation of the run (400)."""


@dataclass(frozen=True)
class RerunPlan:
    """What a rerun of ``original`` from ``label`` would do (also the answer of a dry run).

    Attributes:
        original: The run re-run, as read.
        label: The operation re-run from as the timeline shows it (``charge:1``), ``start``, or
            ``end`` when everything is copied (the agent failed after its last operation).
        position: The top-level position the rerun's own execution starts at (generation 0):
            ``""`` from the start (nothing copied), None when every operation is copied.
        copied: The original's entries the rerun's journal starts with, as recorded.
        chain: The runs whose side effects the rerun may reuse, oldest first.
        effects_after: The chain's COMMITTED calls at or after ``position`` in the original:
            what a rerun reuses when asked again with the same request (or repeats, with
            ``repeat_effects``).
    """

    original: RunHeader
    label: str
    position: str | None
    copied: tuple[Entry, ...]
    chain: tuple[str, ...]
    effects_after: tuple[SideEffectRecord, ...]

    def describe(self) -> dict[str, Any]:
        """The plan as JSON for an answer.

        No result is in it; requests are as recorded: canonical JSON, which never holds a
        secret (the serializer refuses one).
        """
        return {
            "rerun_of": self.original.run_id,
            "rerun_from": self.label,
            "copied_operations": len({top(e.position, 0) for e in self.copied}),
            "chain": list(self.chain),
            "effects_after": [
                {
                    "run_id": r.run_id,
                    "operation_id": r.operation_id,
                    "tool": r.tool,
                    "request": _json(r.canonical_request),
                    "idempotency_key": r.idempotency_key,
                    "external_id": r.external_id,
                }
                for r in self.effects_after
            ],
        }


def top(position: str, generation: int) -> str:
    """The top-level position of an entry of ``generation`` (its prefix removed)."""
    return position.removeprefix(pos_prefix(generation)).split("/", 1)[0]


def plan(
    store: InvocationStore, run_id: str, from_: str, *, repeat_effects: bool = False
) -> RerunPlan:
    """Reads the run (consistently) and decides what its rerun from ``from_`` copies.

    Args:
        store: The journal.
        run_id: The run to re-run.
        from_: ``start``, ``failed``, or an operation as the timeline shows it (``charge:1``,
            ``gather:2/charge:1``: a nested one re-runs its top-level operation), its full id,
            or its name (the first operation of that name).
        repeat_effects: Whether the rerun repeats the chain's calls (an expired run of the
            chain is then no reason to refuse).

    Raises:
        RunNotFoundError: If there is no such run.
        RerunRefusedError: See the module docstring.
        UnknownOperationError: If ``from_`` names no operation of the run.
    """
    snapshot: RunSnapshot = store.load(run_id)
    original = snapshot.header
    if original.status not in RERUNNABLE:
        raise RerunRefusedError(
            f"run {run_id} is {original.status.value}: only a finished run can be re-run "
            "(cancel or terminate it first)"
        )
    chain = (*(original.rerun or {}).get("chain", ()), run_id)
    if len(chain) > MAX_CHAIN:
        raise RerunRefusedError(f"run {run_id} is the {MAX_CHAIN}th rerun in its chain")
    ledgers = _ledgers(store, chain, snapshot, repeat_effects)
    for record in (r for effects in ledgers for r in effects):
        if record.status in _UNSETTLED:
            raise RerunRefusedError(
                f"call {record.operation_id} ({record.tool}) of run {record.run_id} is "
                f"{record.status.value}: the reconciler or a review settles it first"
            )
    generation = original.generation
    ops = _operations(snapshot.entries, generation)
    label, position = _resolve(ops, from_, original, generation)
    copied = tuple(
        e
        for e in snapshot.entries
        if not e.position.startswith("~")
        and (position is None or top(e.position, generation) < position)
    )
    unfinished = [
        name
        for pos, (name, done, _) in ops.items()
        if (position is None or pos < position) and not done
    ]
    if unfinished:
        raise RerunRefusedError(
            f"operation {unfinished[0]} before {label} never finished: re-run from it"
        )
    after = tuple(
        r
        for effects in ledgers
        for r in effects
        if r.status is EffectStatus.COMMITTED
        and r.result is not None
        and (r.run_id != run_id or position is None or top(r.position, generation) >= position)
    )
    return RerunPlan(original, label, position, copied, chain, after)


def _ledgers(
    store: InvocationStore, chain: Sequence[str], snapshot: RunSnapshot, repeat_effects: bool
) -> list[tuple[SideEffectRecord, ...]]:
    out: list[tuple[SideEffectRecord, ...]] = []
    for run in chain:
        if run == snapshot.header.run_id:
            out.append(tuple(snapshot.effects))
            continue
        try:
            out.append(tuple(store.load(run).effects))
        except RunNotFoundError:
            if not repeat_effects:
                raise RerunRefusedError(
                    f"run {run}, earlier in this rerun chain, has expired: its side effects "
                    "can no longer be matched (rerun with repeat_effects to run them again)"
                ) from None
    return out


Ops = dict[str, tuple[str, bool, bool]]
"""Each top-level operation: its position → (its id as shown, finished, failed for good)."""


def _operations(entries: Sequence[Entry], generation: int) -> Ops:
    ops: Ops = {}
    for entry in entries:
        if entry.position.startswith("~") or "/" in entry.position.removeprefix(
            pos_prefix(generation)
        ):
            continue
        pos = top(entry.position, generation)
        shown, done, failed = ops.get(pos, (_shown(entry, generation), False, False))
        ops[pos] = (shown, done or entry.type.is_result, failed or entry.type is EntryType.FAILED)
    return dict(sorted(ops.items()))


def _shown(entry: Entry, generation: int) -> str:
    """An operation's id as the timeline shows it (without its run's prefix)."""
    return entry.op_id.removeprefix(id_prefix(entry.run_id, generation))


def _resolve(ops: Ops, from_: str, original: RunHeader, generation: int) -> tuple[str, str | None]:
    """``from_`` as (label, top-level position); position None: everything is copied.

    Raises:
        UnknownOperationError: If ``from_`` names no top-level operation of the run.
    """
    if from_ == START:
        return START, ""  # every position sorts after "": nothing is copied
    if from_ == FAILED:
        # The first operation that never finished (a stopped run), else the last that failed
        # for good (what failed the run; an earlier one the agent caught is replayed); else
        # the agent failed after its last operation: copy them all.
        for pos, (shown, done, _) in ops.items():
            if not done:
                return shown, pos
        for pos, (shown, _, failed) in reversed(ops.items()):
            if failed:
                return shown, pos
        return "end", None
    # As the timeline shows it (``charge:2``, or ``g1/charge:2`` in a later generation), or
    # the whole operation id; a nested operation names its top-level one.
    wanted = from_.removeprefix(id_prefix(original.run_id, generation))
    wanted = wanted.removeprefix(f"g{generation}/").split("/", 1)[0]
    for pos, (shown, _, _) in ops.items():
        if wanted in (shown, shown.rsplit(":", 1)[0]):
            return shown, pos
    examples = ", ".join(shown for shown, _, _ in list(ops.values())[:3]) or "none"
    raise UnknownOperationError(
        f"run {original.run_id} has no operation {from_!r}: name one as its timeline shows "
        f"it ({examples}), or start, or failed"
    )


def rerun_header(
    plan_: RerunPlan, header: RunHeader, *, repeat_effects: bool, bulk: str | None = None
) -> RunHeader:
    """``header`` (a new run's, from ``new_header``) marked as ``plan_``'s rerun."""
    rerun: dict[str, Any] = {
        "of": plan_.original.run_id,
        "from": plan_.label,
        "position": plan_.position,
        "chain": list(plan_.chain),
        "repeat_effects": repeat_effects,
        "copied": len(plan_.copied),
    }
    if bulk is not None:
        rerun["bulk"] = bulk
    return header.replace(rerun=rerun)


def rerun_key(run_id: str, request: dict[str, Any]) -> str:
    """The idempotency key of a rerun request: the same request twice makes one rerun."""
    digest = hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode())
    return f"rerun:{run_id}:{digest.hexdigest()[:32]}"


def copy_entries(store: InvocationStore, header: RunHeader, copied: Sequence[Entry]) -> None:
    """Writes the rerun's copy of ``copied`` (idempotent: each entry at most once).

    Raises:
        InfrastructureError: If a write fails (the next invocation finishes the copy).
    """
    source = (header.rerun or {}).get("of", "")
    generation = _generation_of(copied)
    rewritten = [_rewrite(e, source, header.run_id, generation) for e in copied]
    for start in range(0, len(rewritten), COPY_CHUNK):
        chunk = rewritten[start : start + COPY_CHUNK]
        try:
            store.commit(header.run_id, chunk)
        except EntryConflictError:
            # A copy before this one (cut short, or racing) wrote some: write the rest alone.
            for entry in chunk:
                try:
                    store.commit(header.run_id, [entry])
                except EntryConflictError:
                    continue


def _generation_of(entries: Sequence[Entry]) -> int:
    return generation_of(entries[0].position) if entries else 0


def _rewrite(entry: Entry, source: str, run_id: str, generation: int) -> Entry:
    """``entry`` of ``source`` as an entry of the rerun (generation 0, its own ids)."""
    meta = {k: v for k, v in entry.meta.items() if k != "outbox"}  # sent once, by the original
    meta["copied_from"] = entry.op_id
    return dataclasses.replace(
        entry,
        run_id=run_id,
        position=entry.position.removeprefix(pos_prefix(generation)),
        op_id=id_prefix(run_id, 0) + entry.op_id.removeprefix(id_prefix(source, generation)),
        meta=meta,
    )


def copy_complete(snapshot: RunSnapshot) -> bool:
    """Whether a rerun's journal holds its whole copy (always, for any other run)."""
    rerun = snapshot.header.rerun
    if not rerun or not rerun.get("copied"):
        return True
    position = rerun.get("position")
    have = sum(
        1
        for e in snapshot.entries
        if e.meta.get("copied_from") is not None
        and (position is None or top(e.position, 0) < position)
    )
    return have >= int(rerun["copied"])


def complete_copy(store: InvocationStore, clock: Clock, snapshot: RunSnapshot) -> RunSnapshot:
    """Finishes a rerun's copy a crash cut short, and reads the run again (else: as it is).

    When the original expired before its copy was made, the rerun cannot start as asked: it
    is failed (``RerunRefusedError`` as its error), visibly, instead of being retried forever.

    Raises:
        RunNotFoundError: If the rerun itself is gone.
    """
    if copy_complete(snapshot):
        return snapshot
    rerun = snapshot.header.rerun or {}
    try:
        source = store.load(rerun["of"])
    except RunNotFoundError:
        gone = RerunRefusedError(
            f"run {rerun['of']} expired before this rerun's copy of it was made: re-run it "
            "from a run that still exists"
        )
        failed = RunChange(
            expected=frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED}),
            status=RunStatus.FAILED,
            updated_at_ms=clock.now_ms(),
            error=error_info(gone),
            wake_at_ms=None,
            waiting_on=None,
        )
        with contextlib.suppress(RunStateConflictError):  # another delivery failed it first
            store.commit(snapshot.header.run_id, [], failed)
        loaded: RunSnapshot = store.load(snapshot.header.run_id)
        return loaded
    position = rerun.get("position")
    generation = source.header.generation
    copied = [
        e
        for e in source.entries
        if not e.position.startswith("~")
        and (position is None or top(e.position, generation) < position)
    ]
    copy_entries(store, snapshot.header, copied)
    reloaded: RunSnapshot = store.load(snapshot.header.run_id)
    return reloaded


def started_event(header: RunHeader) -> OutgoingEvent:
    """``Run Rerun Started``: a rerun was created (once: consumers dedupe on ``event_id``)."""
    rerun = header.rerun or {}
    return OutgoingEvent(
        RUN_RERUN_STARTED,
        {
            "event_id": f"{header.run_id}:rerun-started",
            "run_id": header.run_id,
            "agent": header.agent,
            "tenant": header.tenant,
            "rerun_of": rerun.get("of"),
            "rerun_from": rerun.get("from"),
            "repeat_effects": bool(rerun.get("repeat_effects")),
        },
    )


# -- the ledger, at a tool call -----------------------------------------------------------------


@dataclass(frozen=True)
class LedgerMatch:
    """What the chain's ledger says about a call the rerun is about to make.

    Attributes:
        reuse: A COMMITTED call with the same tool and request, to reuse.
        review: Why a person must decide first (a differing or unsettled call), else None.
        original: The chain's call the review is about.
    """

    reuse: SideEffectRecord | None = None
    review: str | None = None
    original: SideEffectRecord | None = None


def match(
    store: InvocationStore,
    header: RunHeader,
    tool: Tool[Any, Any],
    request: Any,
    position: str,
) -> LedgerMatch | None:
    """Looks the call up in the chain's ledger (consistent reads; None: run it as usual).

    Args:
        store: The journal (reads the chain's runs and this run's own calls).
        header: The rerun's header.
        tool: The tool called.
        request: The call's request.
        position: The call's position in the rerun.
    """
    rerun = header.rerun
    if not rerun or rerun.get("repeat_effects"):
        return None
    canonical = canonical_json(tool.request_model.model_validate(request))
    own = store.load(header.run_id).effects
    used = {
        ((r.note or {}).get(REUSED_FROM) or {}).get("operation_id")
        for r in own
        if (r.note or {}).get(REUSED_FROM)
    }
    same_tool: list[SideEffectRecord] = []
    for run in rerun.get("chain", ()):
        try:
            snapshot = store.load(run)
        except RunNotFoundError:
            return LedgerMatch(
                review=f"run {run}, earlier in this rerun chain, has expired: whether it "
                f"already made this {tool.name} call can no longer be told"
            )
        generation = snapshot.header.generation
        for r in snapshot.effects:
            if r.tool == tool.name:
                same_tool.append(dataclasses.replace(r, position=_rebased(r, generation)))
    for r in same_tool:
        if r.status in _UNSETTLED:
            return LedgerMatch(
                review=f"run {r.run_id}'s {r.tool} call {r.operation_id} is not settled "
                f"({r.status.value}): whether it happened is not known yet",
                original=r,
            )
    reusable = [
        r
        for r in same_tool
        if r.status is EffectStatus.COMMITTED
        and r.result is not None
        and r.operation_id not in used
    ]
    exact = [r for r in reusable if r.canonical_request == canonical]
    if exact:
        exact.sort(key=lambda r: (r.position != position, r.run_id != header.run_id))
        return LedgerMatch(reuse=exact[0])
    here = [r for r in reusable if r.position == position]
    if here:
        r = here[-1]  # the latest run of the chain made it last
        return LedgerMatch(
            review=f"the original run {r.run_id} already did {r.tool} {r.canonical_request} "
            f"(call {r.operation_id}); this rerun asks for {canonical}",
            original=r,
        )
    return None


def reusable_child(
    store: InvocationStore, header: RunHeader, agent: str, input_hash_: str, position: str
) -> tuple[str, Entry] | None:
    """A sub-agent run of the chain that SUCCEEDED with the same agent and input, not reused yet.

    Args:
        store: The journal (consistent reads of the chain's runs and their children).
        header: The rerun's header.
        agent: The sub-agent's name.
        input_hash_: The fingerprint of its input (``journal.store.input_hash``).
        position: Where the rerun invokes it (the same position in the chain is preferred).

    Returns:
        The child's run id and the chain's result entry recording it, or None.
    """
    rerun = header.rerun
    if not rerun or rerun.get("repeat_effects"):
        return None
    used = {
        e.meta.get(REUSED_CHILD)
        for e in store.load(header.run_id).entries
        if e.meta.get(REUSED_CHILD) is not None
    }
    found: list[tuple[bool, str, Entry]] = []
    for run in rerun.get("chain", ()):
        try:
            snapshot = store.load(run)
        except RunNotFoundError:
            continue  # its children are found through it only: nothing to reuse from it
        generation = snapshot.header.generation
        for entry in snapshot.entries:
            child = entry.meta.get("child_run_id")
            if entry.type is not EntryType.SUCCEEDED or not isinstance(child, str):
                continue
            if child in used:
                continue
            try:
                child_header = store.get_run(child)
            except RunNotFoundError:
                continue
            if (
                child_header.status is RunStatus.SUCCEEDED
                and child_header.agent == agent
                and child_header.input_hash == input_hash_
            ):
                here = entry.position.removeprefix(pos_prefix(generation)) == position
                found.append((not here, child, entry))
    if not found:
        return None
    found.sort(key=lambda f: f[0])
    return found[0][1], found[0][2]


def _rebased(record: SideEffectRecord, generation: int) -> str:
    return record.position.removeprefix(pos_prefix(generation))


def reuse(
    protocol: SideEffectProtocol,
    run_id: str,
    position: str,
    op_id: str,
    tool: Tool[Any, Any],
    request: Any,
    original: SideEffectRecord,
) -> tuple[Entry, SideEffectRecord]:
    """Commits ``original``'s result as this call's (one transaction; the tool never runs).

    Raises:
        EffectConflictError: If this call was prepared meanwhile (another invocation).
        EntryConflictError: If its result was recorded meanwhile.
    """
    new = protocol.new_record(run_id, position, op_id, tool, request)
    record = new.replace(
        status=EffectStatus.COMMITTED,
        lease_expires_at_ms=new.prepared_at_ms,
        stale_at_ms=new.prepared_at_ms,
        external_id=original.external_id,
        result=original.result,
        note={
            REUSED_FROM: {
                "run_id": original.run_id,
                "operation_id": original.operation_id,
                "key": original.idempotency_key,
            }
        },
    )
    entry = protocol.entry(
        record,
        EntryType.SUCCEEDED,
        value=original.result,
        meta={"via": "reused", "external_id": original.external_id},
    )
    protocol.store.commit(run_id, [entry], protocol.resume(), EffectChange(record))
    return entry, record


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


__all__ = [
    "COPY_CHUNK",
    "MAX_CHAIN",
    "RERUNNABLE",
    "RUN_RERUN_STARTED",
    "LedgerMatch",
    "RerunPlan",
    "RerunRefusedError",
    "UnknownOperationError",
    "complete_copy",
    "copy_complete",
    "copy_entries",
    "match",
    "plan",
    "rerun_header",
    "rerun_key",
    "reuse",
    "started_event",
]
