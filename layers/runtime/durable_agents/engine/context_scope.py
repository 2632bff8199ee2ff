"""The replay plumbing under ``DurableContext``: positions, operation ids, divergence checks.

Every operation allocates the next position of its scope (``next_operation``) and is matched
against what the journal recorded there: the same kind and name, and the same input fingerprint
where it has one; anything else is ``ReplayDivergedError``. A child operation gets a nested
scope (``child``), and a scope's end is checked against the journal too (``check_scope_end``).
The operations themselves are on ``DurableContext`` (``durable_agents.engine.context``).
"""

from __future__ import annotations

import random as _random
import uuid as _uuid
from typing import Any, Self

from durable_agents.core.ids import POSITIONS, format_position
from durable_agents.core.log_context import note_operation
from durable_agents.core.models import OpKind
from durable_agents.core.observability import ReplayAwareLogger
from durable_agents.engine.cancellation import stop_point
from durable_agents.engine.fingerprints import NO_ARGS, NO_ARGS_VALUE, Fingerprint
from durable_agents.engine.invocation import Invocation
from durable_agents.engine.replay_index import OpRecord
from durable_agents.errors import NestedOperationError, ReplayDivergedError

_UUID_NAMESPACE = _uuid.UUID("6f1d7a52-8d1c-4d8e-9a57-1f0f4f6b2c11")


class OperationScope:
    """One scope of operation positions (the run, or a child operation) in an invocation.

    Attributes:
        run_id: The id of the run being executed.
        logger: A logger that stays quiet while recorded operations are being replayed.
    """

    __slots__ = (
        "_counter",
        "_id_prefix",
        "_inv",
        "_n_random",
        "_n_uuid",
        "_plan",
        "_pos_prefix",
        "logger",
        "run_id",
    )

    def __init__(self, invocation: Invocation, *, id_prefix: str, pos_prefix: str, logger: Any):
        self._inv = invocation
        self._id_prefix = id_prefix
        self._pos_prefix = pos_prefix
        self._counter = 0
        # The records at this scope's positions by counter, looked up at once: replay's fast
        # path keeps it (``durable_agents.engine.replay_fast_path``), with ``_counter``.
        self._plan: list[OpRecord | None] | None = None
        self._n_uuid = 0
        self._n_random = 0
        self.run_id = invocation.run_id
        self.logger: ReplayAwareLogger = logger

    # -- plumbing for operation modules ------------------------------------------------------

    @property
    def invocation(self) -> Invocation:
        """The invocation this context belongs to (for operation modules)."""
        return self._inv

    def next_operation(
        self,
        kind: OpKind,
        name: str,
        fingerprint: Fingerprint | None = None,
        *,
        sub_kind: str | None = None,
    ) -> tuple[str, str, OpRecord | None]:
        """Allocates the next position and checks the journal's record at it.

        Args:
            kind: The operation kind the code asks for.
            name: Its name.
            fingerprint: Its input's fingerprint, compared with the recorded one (if the record
                has one) so that a same-named operation with another input cannot take the
                recorded result. None for operations without an input.
            sub_kind: What a composite operation recorded under ``kind`` is
                (``wait_for_callback``, a ``child`` scope), told to plugins with the kind.
                Never compared with the record.

        Returns:
            The position path, the operation id and the record at that position (if any).

        Raises:
            ReplayDivergedError: If another kind or name, or another input, is recorded at
                this position.
            NestedOperationError: If called from inside a step function.
        """
        inv = self._inv
        if inv.fault is not None:
            raise inv.fault
        if inv.in_step:
            raise NestedOperationError(
                f"{kind} {name!r} was called inside a step; steps are leaves — call it from "
                "the agent function or a child context"
            )
        counter = self._counter = self._counter + 1
        position = format_position(self._pos_prefix, counter)
        op_id = f"{self._id_prefix}{name}:{counter}"
        record = inv.records.get(position)
        if inv.stop is not None or (record is not None and record.kind is OpKind.CANCEL):
            stop_point(inv, position, op_id, kind, name, record)  # a cancel is seen (and replayed)
        if record is not None and (record.kind is not kind or record.name != name):
            inv.fault = ReplayDivergedError(
                record.op_id,
                recorded_kind=str(record.kind),
                recorded_name=record.name,
                requested_kind=str(kind),
                requested_name=name,
            )
            raise inv.fault
        mismatch = None
        if record is not None and fingerprint is not None:
            mismatch = fingerprint.mismatch(record)
        if record is not None and mismatch is not None:
            # Same kind and name, another input: a loop whose items changed would otherwise
            # hand this position another item's recorded result.
            inv.fault = ReplayDivergedError(
                record.op_id,
                recorded_kind=str(record.kind),
                recorded_name=record.name,
                requested_kind=str(kind),
                requested_name=name,
                recorded_fingerprint=mismatch[0],
                requested_fingerprint=mismatch[1],
            )
            raise inv.fault
        if record is None or record.result is None:
            inv.live = True
        if inv.live:
            # The lines written from here on name this operation. A replayed one writes none
            # (replay is quiet), and keeping the keys current per replayed operation was a
            # measurable part of replaying a long run.
            note_operation(op_id, name)
        if inv.observer is not None:
            inv.observer.operation(str(kind), name, op_id, position, record, sub_kind)
        return position, op_id, record

    def replayed_record(self, kind: OpKind, name: str, fingerprint: Fingerprint) -> OpRecord | None:
        """The next operation's record if replaying it is nothing but returning its result.

        The fast path of replay: the next position holds a finished operation of this kind and
        name whose recorded fingerprint (if any) is ``fingerprint``'s, and nothing else is
        going on (no fault, no cancel, not yet live, not inside a step). Then the position is
        taken and the record returned, having done exactly what ``next_operation`` does for
        it — which, for such a record, is the checks and telling the plugins. In every
        other case nothing is taken and None is returned: the caller goes through
        ``next_operation``, which raises, records or goes live as it always did.
        """
        inv = self._inv
        if not inv.replaying:
            return None
        counter = self._counter + 1
        prefix = self._pos_prefix
        if not prefix and counter < len(POSITIONS):  # format_position, inlined
            position = POSITIONS[counter]
        else:
            position = format_position(prefix, counter)
        record = inv.records.get(position)
        if (
            record is None
            or record.result is None
            or record.kind is not kind
            or record.name != name
            or (
                (recorded := record.fingerprint) is not None
                and not (fingerprint is NO_ARGS and recorded is NO_ARGS_VALUE)
                # A subclass compares otherwise (a tool's, against its side-effect record).
                and (type(fingerprint) is not Fingerprint or fingerprint.value != recorded)
            )
        ):
            return None
        self._counter = counter
        # Plugins hear of a replayed operation as before, unless none wants to.
        if inv.observer is not None and inv.observer.hears_replays:
            op_id = f"{self._id_prefix}{name}:{counter}"
            inv.observer.operation(str(kind), name, op_id, position, record)
        return record

    def uuid(self) -> _uuid.UUID:
        """Returns a UUID that is the same on every replay (derived from the position)."""
        self._n_uuid += 1
        return _uuid.uuid5(_UUID_NAMESPACE, f"{self._id_prefix}uuid:{self._n_uuid}")

    def random(self) -> float:
        """Returns a float in [0, 1) that is the same on every replay (seeded by position)."""
        self._n_random += 1
        return _random.Random(f"{self._id_prefix}random:{self._n_random}").random()

    def child(self, op_id: str, position: str) -> Self:
        """Returns the nested context of a child operation."""
        return type(self)(
            self._inv, id_prefix=f"{op_id}/", pos_prefix=f"{position}/", logger=self.logger
        )

    def check_scope_end(self) -> None:
        """Verifies that the code did not stop short of operations recorded in this scope.

        Raises:
            ReplayDivergedError: If the journal has an operation after the last one the code
                asked for (an operation was removed from the code while the run was in flight).
        """
        inv = self._inv
        if inv.fault is not None:
            raise inv.fault
        record = inv.records.get(format_position(self._pos_prefix, self._counter + 1))
        if record is not None:
            inv.fault = ReplayDivergedError(
                record.op_id,
                recorded_kind=str(record.kind),
                recorded_name=record.name,
                requested_kind="end",
                requested_name="(no further operation)",
            )
            raise inv.fault
