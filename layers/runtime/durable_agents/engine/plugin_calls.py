"""How plugins are called: safely, once per fact, on what the journal recorded.

``PluginSet`` is the runtime's list of plugins (``durable_agents.plugins``) and the one place
their hooks are called; ``InvocationSpan`` reports an invocation's start (once it read the run:
``first_invocation`` decides from that read) and end;
``InvocationObserver`` turns the operations an invocation takes up and the writes that landed
into operation and attempt hooks.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from durable_agents.core.clock import Clock
from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    Entry,
    EntryType,
    OpKind,
    RunChange,
    RunHeader,
    RunSnapshot,
    WaitChange,
    WaitRecord,
)
from durable_agents.engine.ports import InvocationStore
from durable_agents.journal.flow_items import FlowItems
from durable_agents.plugins import (
    AttemptEndInfo,
    AttemptStartInfo,
    InvocationEndInfo,
    InvocationStartInfo,
    OperationEndInfo,
    OperationStartInfo,
    Plugin,
)

if TYPE_CHECKING:
    from durable_agents.engine.replay_index import OpRecord

_LOG = logging.getLogger("durable_agents.plugins")


def first_invocation(snapshot: RunSnapshot) -> bool:
    """Whether the invocation that read ``snapshot`` is its run's first (``is_first_invocation``).

    True when the run is in its first generation and its journal, as read, holds no entry of
    its own: nothing but a rerun's copies of the original's records (``copied_from``) and
    migration records (written by an operator, not by an invocation). A later generation's
    journal starts with its opening entry, recorded by the invocation that continued the run
    as new; the header's generation says so first, and is read with the journal.

    ``snapshot`` is what the invocation read at its start: a strongly consistent read (a warm
    tail read equals the whole partition, ADR 0015), never state a warm container kept.
    """
    if snapshot.header.generation:
        return False
    # From the end: a rerun's own entries follow its copies, migration records come last and
    # are few, so the answer is found at once on any run that has recorded something.
    return not any(
        entry.kind is not OpKind.MIGRATION and entry.meta.get("copied_from") is None
        for entry in reversed(snapshot.entries)
    )


def _has_own(plugin: Plugin, hook: str) -> bool:
    method = getattr(plugin, hook, None)
    return method is not None and getattr(method, "__func__", None) is not getattr(
        Plugin, hook, None
    )


class PluginSet:
    """The runtime's plugins, and the one place their hooks are called (safely)."""

    def __init__(self, plugins: Sequence[Plugin] = ()):
        self.plugins = tuple(plugins)

    def __bool__(self) -> bool:
        return bool(self.plugins)

    def listening(self, hook: str) -> bool:
        """Whether some plugin has ``hook`` of its own, not ``Plugin``'s default.

        The default does nothing: if no plugin has its own, building the hook's info and
        calling it changes nothing.
        """
        return any(_has_own(plugin, hook) for plugin in self.plugins)

    def listening_to_replays(self, hook: str) -> bool:
        """Whether some plugin has ``hook`` of its own and wants replayed operations' reports.

        A plugin that sets ``replayed_operations = False`` is not told about operations an
        invocation only replays: with none that wants them, those reports are not even built
        (a cold container replays every operation of a run).
        """
        return any(
            getattr(p, "replayed_operations", True) for p in self.plugins if _has_own(p, hook)
        )

    def emit(self, hook: str, info: object, *, replayed: bool = False) -> None:
        """Calls ``hook`` on every plugin that has it; what a hook raises is logged, not raised.

        With ``replayed``, only plugins that want replayed operations' reports are called.
        """
        for plugin in self.plugins:
            if replayed and not getattr(plugin, "replayed_operations", True):
                continue
            method = getattr(plugin, hook, None)
            if method is None:
                continue
            try:
                method(info)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException:  # even a runtime signal: plugins only listen, never steer
                with contextlib.suppress(Exception):  # a broken log handler changes nothing
                    _LOG.exception("plugin %s raised in %s; ignored", type(plugin).__name__, hook)

    def invocation(
        self, run_id: str, target: str | None, clock: Clock, deadline_ms: int
    ) -> InvocationSpan:
        """The span of one invocation (a context manager that reports its start and end).

        With no plugin, one that reports nothing (``QuietSpan``).
        """
        if not self.plugins:
            return QuietSpan(deadline_ms)
        return InvocationSpan(self, run_id, target, clock, deadline_ms)


class InvocationSpan:
    """One invocation as plugins see it: its start, its operations, its end.

    Its start is timed when the span opens and reported when the runtime hands it what the
    invocation read (``read``): ``is_first_invocation`` is decided by that read. An invocation
    that ends before reading the run (the read failed) reports its start at its end, not first.

    Attributes:
        outcome: Set by the runtime to the invocation's outcome before the span closes.
        agent: Set by the runtime to the run's agent once its header is read.
        deadline_ms: When the invocation must be done.
    """

    def __init__(
        self, plugins: PluginSet, run_id: str, target: str | None, clock: Clock, deadline_ms: int
    ):
        self._plugins = plugins
        self._heard = bool(plugins)  # asked once: three checks an invocation, most with none
        self._run_id = run_id
        self._target = target
        self._clock = clock
        self.deadline_ms = deadline_ms
        self.outcome: Any = None
        self.agent = ""
        self._started = 0
        self._first: bool | None = None  # None until the start is reported
        self._observer: InvocationObserver | None = None

    def observer(self) -> InvocationObserver | None:
        """What watches this invocation's operations (None without plugins: zero overhead)."""
        if self._heard and self._observer is None:
            self._observer = InvocationObserver(self._plugins, self._run_id, self._clock)
        return self._observer

    def read(self, snapshot: RunSnapshot) -> None:
        """The invocation read the run (``snapshot``, at its start): its start is reported.

        Only the first read counts: what the invocation reads later (its own writes among
        them) says nothing about the invocations before it.
        """
        if self._first is not None:
            return
        first = False  # if the check itself fails: True is only said when a read showed it
        with _bookkeeping("invocation start"):
            first = first_invocation(snapshot)
        self._report_start(first)

    def _report_start(self, first: bool) -> None:
        self._first = first
        if self._heard:
            info = InvocationStartInfo(
                self._run_id, self._target, self._started, self.deadline_ms, first
            )
            self._plugins.emit("on_invocation_start", info)

    def __enter__(self) -> InvocationSpan:
        # Timed here, reported by ``read``: the flag it carries is what the read showed.
        self._started = self._clock.now_ms()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._heard:
            return  # what escaped the invocation goes on (the span never swallows it)
        if self._first is None:  # it never read the run (the read raised): no start yet
            self._report_start(False)
        if self._observer is not None:
            self._observer.close()
        with _bookkeeping("invocation end"):
            outcome = self.outcome if exc is None else None
            self._plugins.emit(
                "on_invocation_end",
                InvocationEndInfo(
                    run_id=self._run_id,
                    target=self._target,
                    outcome=outcome.kind.value if outcome is not None else None,
                    executed=tuple(outcome.executed) if outcome is not None else (),
                    detail=outcome.detail if outcome is not None else "",
                    duration_ms=self._clock.now_ms() - self._started,
                    error_type=type(exc).__name__ if exc is not None else None,
                    agent=self.agent,
                    is_first_invocation=bool(self._first),
                ),
            )


class QuietSpan(InvocationSpan):
    """The span of an invocation no plugin listens to: it holds what the runtime sets, only.

    Most runtimes have no plugins; their invocations build no report and read no clock.
    """

    def __init__(self, deadline_ms: int):
        # Nothing of InvocationSpan's own state: every method that would read it is replaced.
        self.deadline_ms = deadline_ms
        self.outcome = None
        self.agent = ""

    def observer(self) -> InvocationObserver | None:
        """None: nothing watches the invocation's operations."""
        return None

    def read(self, snapshot: RunSnapshot) -> None:
        """Nothing: no start to report."""
        return

    def __enter__(self) -> QuietSpan:
        return self

    def __exit__(self, *_: object) -> None:
        return  # what escaped the invocation goes on (the span never swallows it)


@dataclass(slots=True)
class _Open:
    """An operation this invocation took up and has not reported the end of."""

    kind: str
    name: str
    op_id: str
    record: OpRecord | None
    started_ms: int
    attempts: dict[int, int] = field(default_factory=dict)  # attempt -> when it was claimed
    ended: set[int] = field(default_factory=set)  # attempts whose end was reported
    sub_kind: str | None = None


class InvocationObserver:
    """Turns an invocation's operations and recorded writes into plugin hooks."""

    def __init__(self, plugins: PluginSet, run_id: str, clock: Clock):
        self._plugins = plugins
        self._run_id = run_id
        self._clock = clock
        self._open: dict[str, _Open] = {}  # by position, in the order they were taken up
        # What ``close`` reported ``pending``: a parked agent is still inside them (sticky
        # continuation), and the invocation that goes on with it takes them up again.
        self._left_open: list[tuple[str, _Open]] = []
        # Asked once per invocation: every replayed operation reports its start and end, and
        # building those reports for nobody was most of what replaying one cost with plugins.
        self._hears_start = plugins.listening("on_operation_start")
        self._hears_end = plugins.listening("on_operation_end")
        self._hears_replayed_start = plugins.listening_to_replays("on_operation_start")
        self._hears_replayed_end = plugins.listening_to_replays("on_operation_end")

    @property
    def hears_replays(self) -> bool:
        """Whether any plugin wants to hear of operations this invocation only replays."""
        return self._hears_replayed_start or self._hears_replayed_end

    def watch(self, store: InvocationStore) -> InvocationStore:
        """``store``, reporting every write of this invocation once it has landed."""
        return _ObservedStore(store, self)

    def operation(
        self,
        kind: str,
        name: str,
        op_id: str,
        position: str,
        record: OpRecord | None,
        sub_kind: str | None = None,
    ) -> None:
        """The invocation takes up the operation at ``position`` (``record``: what is recorded).

        ``sub_kind`` is what a composite operation recorded under ``kind`` is (the hooks'
        ``sub_kind``).
        """
        try:  # _bookkeeping("operation"), without a generator per operation
            self._operation(kind, name, op_id, position, record, sub_kind)
        except Exception:
            with contextlib.suppress(Exception):
                _LOG.exception("plugin bookkeeping failed in %s; ignored", "operation")

    def recorded(self, entries: Sequence[Entry], effect: EffectChange | None) -> None:
        """Reports what a write that landed recorded (its entries, a tool's claim)."""
        with _bookkeeping("recorded"):
            self._recorded(entries, effect)

    def close(self) -> None:
        """The invocation ended: what it did not finish is reported ``pending``."""
        with _bookkeeping("close"):
            self._left_open = list(self._open.items())
            for position in list(self._open):
                self._report_end(position, "pending", None)

    def take_up_parked(self, previous: InvocationObserver) -> None:
        """This invocation goes on with a parked agent: it takes up what ``previous`` left open.

        The agent parked inside its next operation, which ``previous`` reported ``pending``
        when its invocation ended. An invocation that replays the run takes that operation
        up again and reports its end; so does this one, without the replay.
        """
        with _bookkeeping("take up parked"):
            for position, state in previous._left_open:
                if self._hears_start:
                    info = OperationStartInfo(
                        self._run_id, state.op_id, state.kind, state.name, False, state.sub_kind
                    )
                    self._plugins.emit("on_operation_start", info)
                now = self._clock.now_ms()
                self._open[position] = _Open(state.kind, state.name, state.op_id, state.record, now)

    def _operation(
        self,
        kind: str,
        name: str,
        op_id: str,
        position: str,
        record: OpRecord | None,
        sub_kind: str | None,
    ) -> None:
        result = record.result if record is not None else None
        replayed = result is not None
        if self._hears_replayed_start if replayed else self._hears_start:
            self._plugins.emit(
                "on_operation_start",
                OperationStartInfo(self._run_id, op_id, kind, name, replayed, sub_kind),
                replayed=replayed,
            )
        if record is None or result is None:
            self._open[position] = _Open(
                kind, name, op_id, record, self._clock.now_ms(), sub_kind=sub_kind
            )
            return
        if not self._hears_replayed_end:
            return
        self._plugins.emit(
            "on_operation_end",
            OperationEndInfo(
                run_id=self._run_id,
                op_id=op_id,
                kind=kind,
                name=name,
                replayed=True,
                outcome=_outcome(result),
                attempts=record.attempts,
                duration_ms=None,
                error_type=result.error.type if result.error is not None else None,
                sub_kind=sub_kind,
            ),
            replayed=True,
        )

    def _recorded(self, entries: Sequence[Entry], effect: EffectChange | None) -> None:
        for entry in entries:
            state = self._open.get(entry.position) if entry.run_id == self._run_id else None
            if state is None:
                continue  # another run's, or an operation this invocation did not take up
            if entry.type is EntryType.STARTED:
                self._attempt_started(entry.position, state, entry.attempt)
            elif entry.type is EntryType.ATTEMPT_FAILED:
                outcome = "interrupted" if entry.meta.get("interrupted") else "failed"
                self._attempt_ended(state, entry.attempt, outcome, entry, entry.due_at_ms)
            elif entry.type.is_result:
                if entry.attempt >= 1:  # an operation with attempts: its last one ended
                    self._attempt_ended(state, entry.attempt, _outcome(entry), entry, None)
                error = entry.error.type if entry.error is not None else None
                self._report_end(entry.position, _outcome(entry), error, entry.attempt, entry)
        if effect is None:
            return
        record = effect.record
        state = self._open.get(record.position)
        if state is not None and record.run_id == self._run_id:
            claimed = effect.expected_status is None or record.attempt != effect.expected_attempt
            if record.status is EffectStatus.PREPARED and claimed:  # a tool's attempt claimed
                self._attempt_started(record.position, state, record.attempt)

    def _attempt_started(self, position: str, state: _Open, attempt: int) -> None:
        previous, record = attempt - 1, state.record
        if (
            previous >= 1
            and previous not in state.ended
            and record is not None
            and record.last_started is not None
            and record.last_started.attempt == previous
            and (record.last_failed is None or record.last_failed.attempt < previous)
        ):
            # The previous attempt's claimant died and nothing recorded it: claiming the next
            # one is what says it was interrupted.
            self._attempt_ended(state, previous, "interrupted", None, None)
        state.attempts[attempt] = self._clock.now_ms()
        self._plugins.emit(
            "on_operation_attempt_start",
            AttemptStartInfo(self._run_id, state.op_id, state.kind, state.name, attempt),
        )

    def _attempt_ended(
        self, state: _Open, attempt: int, outcome: str, entry: Entry | None, next_at: int | None
    ) -> None:
        error = entry.error if entry is not None else None
        claimed = state.attempts.get(attempt)
        state.ended.add(attempt)
        self._plugins.emit(
            "on_operation_attempt_end",
            AttemptEndInfo(
                run_id=self._run_id,
                op_id=state.op_id,
                kind=state.kind,
                name=state.name,
                attempt=attempt,
                outcome=outcome,
                error_type=error.type if error is not None and outcome != "succeeded" else None,
                duration_ms=self._clock.now_ms() - claimed if claimed is not None else None,
                next_attempt_at_ms=next_at,
            ),
        )

    def _report_end(
        self,
        position: str,
        outcome: str,
        error: str | None,
        attempt: int = 0,
        entry: Entry | None = None,
    ) -> None:
        state = self._open.pop(position)
        recorded = state.record.attempts if state.record is not None else 0
        model_id, tokens_in, tokens_out = _model_usage(entry)
        self._plugins.emit(
            "on_operation_end",
            OperationEndInfo(
                run_id=self._run_id,
                op_id=state.op_id,
                kind=state.kind,
                name=state.name,
                replayed=False,
                outcome=outcome,
                attempts=max(attempt, recorded, *state.attempts, 0),
                duration_ms=self._clock.now_ms() - state.started_ms,
                error_type=error,
                model_id=model_id,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                sub_kind=state.sub_kind,
            ),
        )


@contextlib.contextmanager
def _bookkeeping(step: str) -> Iterator[None]:
    """Logs and swallows a failure of the observer's own code.

    It runs between a write that landed and the code that goes on from it: a bug here must not
    turn into a failed invocation (or a lost outcome) — instrumentation only listens.
    """
    try:
        yield
    except Exception:
        with contextlib.suppress(Exception):
            _LOG.exception("plugin bookkeeping failed in %s; ignored", step)


def _model_usage(entry: Entry | None) -> tuple[str | None, int | None, int | None]:
    """The model and token counts a recorded model answer carries (Nones if it has none).

    Read from the recorded ``LlmResponse`` itself, so the counts are those of the answer the
    journal kept. A payload stored out of line (a pointer) is not fetched for this.
    """
    if entry is None or entry.kind is not OpKind.LLM or entry.type is not EntryType.SUCCEEDED:
        return None, None, None
    try:
        answer = json.loads(entry.value or "")
        usage = answer["usage"]
        return str(answer["model_id"]), int(usage["input_tokens"]), int(usage["output_tokens"])
    except (ValueError, TypeError, KeyError):
        return None, None, None


def _outcome(result: Entry) -> str:
    return "failed" if result.type is EntryType.FAILED else "succeeded"


class _ObservedStore(InvocationStore):
    """A journal store whose successful ``commit`` calls are reported to an observer.

    Every other method of the port is the store's own, passed on unchanged.
    """

    def __init__(self, store: InvocationStore, observer: InvocationObserver):
        self._store = store
        self._observer = observer

    def flow_items(self) -> FlowItems:
        """The store's own flow items (their writes are not journal commits)."""
        return self._store.flow_items()

    def commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None = None,
        effect: EffectChange | None = None,
        wait: WaitChange | Sequence[WaitChange] | None = None,
    ) -> None:
        """Commits through the real store, then reports what landed (never before).

        Raises:
            Exception: Whatever the store raises; nothing is reported then.
        """
        self._store.commit(run_id, entries, change, effect=effect, wait=wait)
        self._observer.recorded(entries, effect)

    def create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        """The store's ``create_run`` (a run's creation is no operation's write to report).

        Raises:
            Exception: Whatever the store raises.
        """
        return self._store.create_run(header)

    def get_run(self, run_id: str) -> RunHeader:
        """The store's ``get_run``.

        Raises:
            Exception: Whatever the store raises.
        """
        return self._store.get_run(run_id)

    def load(self, run_id: str) -> RunSnapshot:
        """The store's ``load``.

        Raises:
            Exception: Whatever the store raises.
        """
        return self._store.load(run_id)

    def get_wait(self, wait_id: str) -> WaitRecord:
        """The store's ``get_wait``.

        Raises:
            Exception: Whatever the store raises.
        """
        return self._store.get_wait(wait_id)
