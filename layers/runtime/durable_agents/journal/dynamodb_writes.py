"""The conditional writes of the DynamoDB journal: their requests, and sending them.

Every request carries the condition that fences it: an item written once must not exist yet, a
mutable record (side effect, wait) must still be as its writer read it, and a run header must
still be in an expected status (and, for a change decided on a read, at that read's revision).
A condition that fails becomes the conflict error that says which item, with what it holds now.
See docs/adr/0001-journal-layout.md for the table layout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from durable_agents.core.faults import GuardedClient, cancellation_reasons, error_code
from durable_agents.core.models import (
    UNSET,
    EffectChange,
    Entry,
    RunChange,
    RunHeader,
    WaitChange,
)
from durable_agents.errors import (
    EffectConflictError,
    EntryConflictError,
    IdempotencyConflictError,
    InfrastructureError,
    RunNotFoundError,
    RunRevisionConflictError,
    RunStateConflictError,
    WaitConflictError,
)
from durable_agents.journal.dynamodb_items import HEADER_SK, IDEM_SK, ItemCodec, idem_pk, pk
from durable_agents.journal.dynamodb_loads import RunLoader
from durable_agents.journal.header_echo import ECHO_ATTR, echo_put, new_token
from durable_agents.journal.index_keys import run_slot
from durable_agents.journal.item_size import ITEM_BUDGET_BYTES, transaction_put_budget
from durable_agents.journal.retention import DEFAULT_RETENTION_S

logger = logging.getLogger(__name__)

# The item must not exist yet: every entry key is deterministic, so a second writer of the same
# transition (a duplicate event, a zombie invocation) collides here instead of writing twice.
NOT_EXISTS = "attribute_not_exists(pk)"


def effect_put(
    table: str, items: ItemCodec, effect: EffectChange, budget: int = ITEM_BUDGET_BYTES
) -> dict[str, Any]:
    """The conditional Put of a side-effect record (created, or moved on from what was read).

    Raises:
        ItemTooLargeError: If the record cannot be made to fit ``budget``.
    """
    # The record must still be in the state this writer read: a second recoverer, a
    # reconciler racing the StepRunner, or a late zombie loses here instead of acting twice.
    expected = None if effect.expected_status is None else {s.value for s in effect.expected_status}
    extra = None if effect.expected_attempt is None else ("attempt", effect.expected_attempt)
    item = items.effect_item(effect.record, budget)
    return conditional_put(table, item, expected, extra)


def wait_put(
    table: str, items: ItemCodec, wait: WaitChange, budget: int = ITEM_BUDGET_BYTES
) -> dict[str, Any]:
    """The conditional Put of an approval or callback record (created, or settled once).

    Raises:
        ItemTooLargeError: If the record cannot be made to fit ``budget``.
    """
    # Settled exactly once: the stored status must still be one this writer expects (a
    # second decision, a decision racing the timeout, or a late heartbeat loses here).
    expected = None if wait.expected is None else {s.value for s in wait.expected}
    extra = (
        None
        if wait.expected_updated_at_ms is None
        else ("updated_at_ms", wait.expected_updated_at_ms)
    )
    return conditional_put(table, items.wait_item(wait.record, budget), expected, extra)


def conditional_put(
    table: str,
    item: dict[str, Any],
    expected_statuses: set[str] | None,
    expected_number: tuple[str, int] | None,
) -> dict[str, Any]:
    """A conditional Put of a mutable record (side effect, wait).

    With ``expected_statuses=None`` the item must not exist yet; otherwise it must still be
    in one of those statuses (and hold ``expected_number``).
    """
    put: dict[str, Any] = {
        "TableName": table,
        "Item": item,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if expected_statuses is None:
        put["ConditionExpression"] = NOT_EXISTS
        return put
    values: dict[str, Any] = {}
    placeholders = []
    for i, status in enumerate(sorted(expected_statuses)):
        values[f":st{i}"] = {"S": status}
        placeholders.append(f":st{i}")
    condition = f"attribute_exists(pk) AND #st IN ({', '.join(placeholders)})"
    names = {"#st": "status"}
    if expected_number is not None:
        condition += " AND #num = :num"
        names["#num"] = expected_number[0]
        values[":num"] = {"N": str(expected_number[1])}
    put["ConditionExpression"] = condition
    put["ExpressionAttributeNames"] = names
    put["ExpressionAttributeValues"] = values
    return put


def update_request(
    table: str, items: ItemCodec, run_id: str, change: RunChange, echo_token: str | None = None
) -> dict[str, Any]:
    """The conditional Update of a run header that applies ``change``.

    ``echo_token`` is the header's new echo token (``header_echo``): the echo item written
    with this change holds the same one.

    Raises:
        ItemTooLargeError: If a value must be spilled and no payload bucket is configured, or
            the header's values would be over their budget.
    """
    # The run's one listing (ADR 0029): a status change moves the header in gsi1 only. A
    # finished run is listed for the stamping passes (durable_agents.journal.retention),
    # due now.
    stamp_due = change.updated_at_ms if change.status.terminal else None
    # A change to SUSPENDED always says when it wakes (RunChange); any other status: unlisted.
    wake = None if change.wake_at_ms is UNSET else change.wake_at_ms
    slot = run_slot(
        change.status,
        run_id,
        updated_at_ms=change.updated_at_ms,
        wake_at_ms=wake,
        stamp_due_at_ms=stamp_due,
    )
    assert slot is not None  # an unfinished run, or a finished one not stamped yet
    listing, key = slot
    sets: dict[str, dict[str, Any]] = {
        "status": {"S": change.status.value},
        "updated_at_ms": {"N": str(change.updated_at_ms)},
        "gsi1pk": {"S": items.shards.key(listing, run_id)},
        "gsi1sk": {"S": key},
    }
    # Keys of the layout before ADR 0029 leave with the header's first change: gsi2 held
    # WAKE and EXPIRING, gsi3 a tenant's runs by status (no reader left).
    removes: list[str] = ["gsi2pk", "gsi2sk", "gsi3pk", "gsi3sk"]
    if echo_token is not None:
        sets[ECHO_ATTR] = {"S": echo_token}
    if change.result is not UNSET:
        removes += ["result", "result_ref"]
        if change.result is not None:
            for attr, value in items.value_attrs(run_id, "result", change.result).items():
                sets[attr] = value
                removes.remove(attr)
    if change.error is not UNSET:
        removes += ["error", "error_ref"]
        if change.error is not None:
            text = json.dumps(change.error.to_dict())
            for attr, value in items.value_attrs(run_id, "error", text).items():
                sets[attr] = value
                removes.remove(attr)
    if change.input is not UNSET:  # continue-as-new (durable_agents.engine.generations)
        removes += ["input", "input_ref"]
        for attr, value in items.value_attrs(run_id, "input", change.input).items():
            sets[attr] = value
            removes.remove(attr)
    if change.generation is not UNSET:
        sets["generation"] = {"N": str(change.generation)}
    if change.versions is not UNSET:  # a migration re-pins the run
        sets["versions"] = {"M": {k: {"S": v} for k, v in change.versions.items()}}
    if change.waiting_on is not UNSET:
        if change.waiting_on is None:
            removes.append("waiting_on")
        else:
            sets["waiting_on"] = {"S": json.dumps(change.waiting_on, sort_keys=True)}
    if change.cancel_requested is not UNSET:  # a stop request (durable_agents.engine.cancellation)
        if change.cancel_requested is None:
            removes.append("cancel_requested")
        else:
            sets["cancel_requested"] = {"S": json.dumps(change.cancel_requested, sort_keys=True)}
    if change.wake_at_ms is not UNSET:
        if change.wake_at_ms is None:
            removes.append("wake_at_ms")
        else:
            sets["wake_at_ms"] = {"N": str(change.wake_at_ms)}
    if stamp_due is not None:
        sets["stamp_due_at_ms"] = {"N": str(stamp_due)}
    items.check_header_update(run_id, sets)
    # Attribute names go through placeholders: "status", "result" and "error" are
    # reserved words in DynamoDB expressions.
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    set_parts = []
    for i, (attr, value) in enumerate(sets.items()):
        names[f"#s{i}"] = attr
        values[f":s{i}"] = value
        set_parts.append(f"#s{i} = :s{i}")
    remove_parts = []
    for i, attr in enumerate(dict.fromkeys(removes)):
        names[f"#r{i}"] = attr
        remove_parts.append(f"#r{i}")
    names["#status"] = "status"
    placeholders = []
    for i, status in enumerate(sorted(s.value for s in change.expected)):
        values[f":expected{i}"] = {"S": status}
        placeholders.append(f":expected{i}")
    # Every in-place change moves the revision on (headers written before revisions
    # existed start from 0), so a writer that decided on an earlier read can be refused.
    names["#rev"] = "revision"
    values[":zero"] = {"N": "0"}
    values[":one"] = {"N": "1"}
    set_parts.append("#rev = if_not_exists(#rev, :zero) + :one")
    if change.status.terminal:
        # The expiry, in the write that finishes the run: whoever finishes it (the run, a
        # stop, a time limit, the reconciler), its header can never be left without one.
        names |= {"#ttl": "ttl", "#ret": "retention_s"}
        values[":dret"] = {"N": str(DEFAULT_RETENTION_S)}
        values[":fin"] = {"N": str(change.updated_at_ms // 1000)}
        set_parts.append("#ttl = if_not_exists(#ret, :dret) + :fin")
    expression = "SET " + ", ".join(set_parts)
    if remove_parts:
        expression += " REMOVE " + ", ".join(remove_parts)
    if change.add_event_name is not None:
        # ADD to a string set: a name already there is no change (the run inbox bounds it).
        names["#events"] = "event_names"
        values[":event"] = {"SS": [change.add_event_name]}
        expression += " ADD #events :event"
    # The header must exist and be in one of the statuses this change starts from: a run
    # that was paused or finished meanwhile is never overwritten. A change decided on a read
    # (a suspension: what the run waits for, when it wakes) also needs the header still at
    # that read's revision — a delayed write from an earlier invocation then loses instead
    # of erasing the timer a later invocation set.
    condition = f"attribute_exists(pk) AND #status IN ({', '.join(placeholders)})"
    if change.expected_revision is not None:
        values[":rev"] = {"N": str(change.expected_revision)}
        if change.expected_revision == 0:
            condition += " AND (attribute_not_exists(#rev) OR #rev = :rev)"
        else:
            condition += " AND #rev = :rev"
    return {
        "TableName": table,
        "Key": {"pk": pk(run_id), "sk": {"S": HEADER_SK}},
        "UpdateExpression": expression,
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def with_ttl(request: dict[str, Any], ttl_s: int | None) -> dict[str, Any]:
    """A Put request whose item carries ``ttl`` (unchanged when ``ttl_s`` is None)."""
    if ttl_s is not None:
        request["Item"] = {**request["Item"], "ttl": {"N": str(ttl_s)}}
    return request


class JournalWriter:
    """Sends the conditional writes of ``DynamoDBJournal`` and explains the ones refused.

    Args:
        client: The journal's guarded DynamoDB client.
        table: The journal table.
        items: The journal's item codec.
        loader: Reads what a refused write met (the run header, for a conflict's evidence).
    """

    def __init__(self, client: GuardedClient, table: str, items: ItemCodec, loader: RunLoader):
        self._client = client
        self._table = table
        self._items = items
        self._loader = loader

    def create_run(self, header: RunHeader, echo_token: str) -> tuple[RunHeader, bool]:
        """Writes a new run: header (stamped with ``echo_token``), listing item, idempotency key.

        One transaction: a run is never without its listing item (ADR 0029).

        Returns:
            The stored header and whether it was created by this call (False: the run the
            idempotency key maps to, for the same input).

        Raises:
            IdempotencyConflictError: If the key maps to a run of another input.
            EntryConflictError: If a run with this id already exists (and no key matched).
            ItemTooLargeError: If the header cannot be made to fit.
        """
        header_put = {
            "TableName": self._table,
            "Item": {**self._items.header_item(header), ECHO_ATTR: {"S": echo_token}},
            "ConditionExpression": NOT_EXISTS,
        }
        listing_put = {
            "TableName": self._table,
            "Item": self._items.listing_item(header),
            "ConditionExpression": NOT_EXISTS,
        }
        if header.idempotency_key is None:
            try:
                self._client.transact_write_items(
                    TransactItems=[{"Put": header_put}, {"Put": listing_put}]
                )
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                if any(
                    r.get("Code") == "ConditionalCheckFailed" for r in cancellation_reasons(exc)
                ):
                    raise EntryConflictError(HEADER_SK) from exc
                raise
            return header, True
        idem_key = {
            "pk": {"S": idem_pk(header.tenant, header.agent, header.idempotency_key)},
            "sk": {"S": IDEM_SK},
        }
        idem_put = {
            "TableName": self._table,
            "Item": {
                **idem_key,
                "run_id": {"S": header.run_id},
                "input_hash": {"S": header.input_hash},
            },
            "ConditionExpression": NOT_EXISTS,
        }
        try:
            self._client.transact_write_items(
                TransactItems=[{"Put": header_put}, {"Put": idem_put}, {"Put": listing_put}]
            )
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = cancellation_reasons(exc)
            if len(reasons) > 1 and reasons[1].get("Code") == "ConditionalCheckFailed":
                existing = self._client.get_item(
                    TableName=self._table, Key=idem_key, ConsistentRead=True
                ).get("Item")
                if existing is None:  # pragma: no cover - the key item is never deleted
                    raise
                existing_id = existing["run_id"]["S"]
                if existing["input_hash"]["S"] != header.input_hash:
                    raise IdempotencyConflictError(header.idempotency_key, existing_id) from exc
                return self._loader.get_run(existing_id), False
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                raise EntryConflictError(HEADER_SK) from exc
            raise
        return header, True

    def start_echo(self, run_id: str, token: str, at_ms: int) -> None:
        """Writes a new run's header echo, only where none is yet (``header_echo``).

        A storage failure is logged, not raised: the run exists (its header landed).
        """
        try:
            self._client.put_item(
                **echo_put(self._table, run_id, token, at_ms, only_if_absent=True)
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            # A later change wrote the echo first (this Put came late): that one is current.
        except InfrastructureError:
            # The run exists (its header landed): failing its start now would make the caller
            # start it again. Without an echo, every load reads its header (correct, one
            # request more) until its first header change writes one.
            logger.warning("run %s: its header echo was not written", run_id, exc_info=True)

    def write(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None,
        effect: EffectChange | None,
        waits: tuple[WaitChange, ...],
        ttl_s: int | None = None,
    ) -> None:
        """Writes a commit; with ``ttl_s`` (a finished run's), every item put carries it.

        One conditional request when the commit is one item or one header change (a header
        change on its own also puts its echo first), else one transaction.

        Raises:
            EntryConflictError: If an entry exists already (with it, when it was returned).
            EffectConflictError: If the side-effect record is not as the writer read it.
            WaitConflictError: If a wait record is not as the writer read it.
            RunStateConflictError: If the header is not in an expected status.
            RunRevisionConflictError: If it is, but no longer at the expected revision.
            RunNotFoundError: If a header change finds no run.
            ItemTooLargeError: If an item cannot be made to fit.
        """
        if len(entries) == 1 and change is None and effect is None and not waits:
            item = self._items.entry_item(entries[0])  # a new dict: ours to add to
            if ttl_s is not None:
                item["ttl"] = {"N": str(ttl_s)}
            try:
                self._client.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression=NOT_EXISTS,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    old: Any = exc.response.get("Item")
                    existing = self._items.entry_from_item(run_id, old) if old else None
                    raise EntryConflictError(entries[0].sort_key, existing) from exc
                raise
            return
        token = new_token()
        if not entries and change is not None and effect is None and not waits:
            update = update_request(self._table, self._items, run_id, change, token)
            # The echo first (header_echo): until the header holds the same token, readers
            # read the header; the other order would let them trust a changed one.
            self._client.put_item(**echo_put(self._table, run_id, token, change.updated_at_ms))
            try:
                self._client.update_item(**update)
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    raise self._state_conflict(run_id, change) from exc
                raise
            return
        if not entries and change is None and effect is not None and not waits:
            try:
                self._client.put_item(
                    **with_ttl(effect_put(self._table, self._items, effect), ttl_s)
                )
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    old_effect: Any = exc.response.get("Item")
                    current = self._items.effect_from_item(old_effect) if old_effect else None
                    raise EffectConflictError(effect.record.operation_id, current) from exc
                raise
            return
        budget = transaction_put_budget(
            len(entries) + (effect is not None) + len(waits) + (change is not None),
            with_update=change is not None,
        )
        items: list[dict[str, Any]] = [
            {
                "Put": with_ttl(
                    {
                        "TableName": self._table,
                        "Item": self._items.entry_item(entry, budget),
                        "ConditionExpression": NOT_EXISTS,
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    },
                    ttl_s,
                )
            }
            for entry in entries
        ]
        if effect is not None:
            put = effect_put(self._table, self._items, effect, budget)
            items.append({"Put": with_ttl(put, ttl_s)})
        items.extend(
            {"Put": with_ttl(wait_put(self._table, self._items, w, budget), ttl_s)} for w in waits
        )
        if change is not None:
            update = update_request(self._table, self._items, run_id, change, token)
            update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
            items.append({"Update": update})
            # The header echo moves with the header, atomically (header_echo); it has no
            # condition, so it is never a cancellation reason below.
            items.append({"Put": echo_put(self._table, run_id, token, change.updated_at_ms)})
        try:
            self._client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = cancellation_reasons(exc)
            for index, reason in enumerate(reasons):
                if reason.get("Code") != "ConditionalCheckFailed":
                    continue
                old = reason.get("Item")
                if index < len(entries):
                    existing = self._items.entry_from_item(run_id, old) if old else None
                    raise EntryConflictError(entries[index].sort_key, existing) from exc
                position = index - len(entries)
                if effect is not None:
                    if position == 0:
                        current = self._items.effect_from_item(old) if old else None
                        raise EffectConflictError(effect.record.operation_id, current) from exc
                    position -= 1
                if position < len(waits):
                    waiting = self._items.wait_from_item(old) if old else None
                    raise WaitConflictError(waits[position].record.wait_id, waiting) from exc
                assert change is not None
                raise self._state_conflict(run_id, change) from exc
            raise

    def _state_conflict(self, run_id: str, change: RunChange) -> Exception:
        """The error a refused header change met (read back: the header as it is now)."""
        try:
            actual = self._loader.get_run(run_id)
        except RunNotFoundError as missing:
            return missing
        if actual.status in change.expected and change.expected_revision is not None:
            return RunRevisionConflictError(
                run_id, change.expected_revision, actual.revision, actual.status
            )
        return RunStateConflictError(run_id, sorted(change.expected), actual.status)
