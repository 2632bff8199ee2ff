"""The conditional write requests of the DynamoDB journal (built here, sent by the journal).

Every request carries the condition that fences it: an item written once must not exist yet, a
mutable record (side effect, wait) must still be as its writer read it, and a run header must
still be in an expected status (and, for a change decided on a read, at that read's revision).
See docs/adr/0001-journal-layout.md for the table layout.
"""

from __future__ import annotations

import json
from typing import Any

from durable_agents.core.models import UNSET, EffectChange, RunChange, RunStatus, WaitChange
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.journal.dynamodb_items import (
    EXPIRING_PK,
    HEADER_SK,
    WAKE_PK,
    ItemCodec,
    pk,
    tenant_pk,
    tenant_sk,
    ts,
)
from durable_agents.journal.header_echo import ECHO_ATTR
from durable_agents.journal.item_size import ITEM_BUDGET_BYTES
from durable_agents.journal.retention import DEFAULT_RETENTION_S

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
    sets: dict[str, dict[str, Any]] = {
        "status": {"S": change.status.value},
        "updated_at_ms": {"N": str(change.updated_at_ms)},
        "gsi1pk": {"S": f"STATUS#{change.status.value}"},
        "gsi1sk": {"S": f"{ts(change.updated_at_ms)}#{run_id}"},
        "gsi3sk": {"S": tenant_sk(change.status, change.updated_at_ms, run_id)},
    }
    if echo_token is not None:
        sets[ECHO_ATTR] = {"S": echo_token}
    removes: list[str] = []
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
    if change.status.terminal:
        # Finished: listed for the reconciler to stamp every other item with the expiry
        # (durable_agents.journal.retention); a finished run is never suspended, so gsi2 is free.
        sets["gsi2pk"] = {"S": EXPIRING_PK}
        sets["gsi2sk"] = {"S": f"{ts(change.updated_at_ms)}#{run_id}"}
        sets["stamp_due_at_ms"] = {"N": str(change.updated_at_ms)}
    elif change.status is RunStatus.SUSPENDED and change.wake_at_ms not in (UNSET, None):
        # Only suspended runs with a timer are in the sparse timer index.
        sets["gsi2pk"] = {"S": WAKE_PK}
        sets["gsi2sk"] = {"S": f"{ts(change.wake_at_ms)}#{run_id}"}
    elif change.status is not RunStatus.SUSPENDED or change.wake_at_ms is None:
        removes += ["gsi2pk", "gsi2sk"]
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
    # The tenant is never changed (so never needed here); a header from before tenants
    # joins the default tenant's listing on its first change.
    names["#t3"] = "gsi3pk"
    values[":t3"] = {"S": tenant_pk(DEFAULT_TENANT)}
    set_parts.append("#t3 = if_not_exists(#t3, :t3)")
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
