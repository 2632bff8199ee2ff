"""Puts run headers written before an index existed into it: ``gsi3`` and ``gsi4``.

``gsi3`` lists runs by tenant (ADR 0008), ``gsi4`` by start time (ADR 0012).

A header from before tenants has no ``gsi3pk``: it is the default tenant's (it reads so), but a
tenant's ``GET /runs`` — and without ``TENANT_MAP`` every caller's is the default tenant's —
lists it only once its header changes again, and a finished run never changes. Run this once
after deploying the tenant index (``scripts/backfill_tenants.py``); it is safe to run again and
while the stack is serving.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from durable_agents.core.faults import GuardedClient, error_code
from durable_agents.core.models import RunStatus
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.journal.dynamodb_items import HEADER_SK, started_pk, tenant_pk, tenant_sk
from durable_agents.journal.run_listing import started_key


def backfill_tenant_index(client: Any, table_name: str) -> int:
    """Gives every header without a tenant index key the default tenant's; returns how many.

    Each update is conditional on what the scan read: the header still has no ``gsi3pk`` and
    the same ``updated_at_ms``. A header that changed meanwhile got its index keys from that
    change (the header update writes them), so it is skipped, never given a stale sort key.

    Raises:
        InfrastructureError: If a scan page or an update fails for a reason other than its
            condition (the backfill can simply be run again).
    """
    guarded = client if isinstance(client, GuardedClient) else GuardedClient(client)
    kwargs: dict[str, Any] = {
        "TableName": table_name,
        "FilterExpression": "sk = :header AND attribute_not_exists(gsi3pk)",
        "ExpressionAttributeValues": {":header": {"S": HEADER_SK}},
        "ProjectionExpression": "pk, sk, run_id, #st, updated_at_ms",
        "ExpressionAttributeNames": {"#st": "status"},
        "ConsistentRead": True,
    }
    updated = 0
    while True:
        page = guarded.scan(**kwargs)
        for item in page.get("Items", []):
            run_id, at = item["run_id"]["S"], item["updated_at_ms"]["N"]
            sort_key = tenant_sk(RunStatus(item["status"]["S"]), int(at), run_id)
            try:
                guarded.update_item(
                    TableName=table_name,
                    Key={"pk": item["pk"], "sk": item["sk"]},
                    UpdateExpression=(
                        "SET gsi3pk = :pk, gsi3sk = :sk, tenant = if_not_exists(tenant, :t)"
                    ),
                    ConditionExpression="attribute_not_exists(gsi3pk) AND updated_at_ms = :at",
                    ExpressionAttributeValues={
                        ":pk": {"S": tenant_pk(DEFAULT_TENANT)},
                        ":sk": {"S": sort_key},
                        ":t": {"S": DEFAULT_TENANT},
                        ":at": {"N": at},
                    },
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                continue  # changed meanwhile: that change wrote its own index keys
            updated += 1
        last = page.get("LastEvaluatedKey")
        if not last:
            return updated
        kwargs["ExclusiveStartKey"] = last


def backfill_start_index(client: Any, table_name: str) -> int:
    """Puts every header without a start-time index key into ``gsi4``; returns how many.

    Headers written before ``gsi4`` (ADR 0012) have no ``gsi4pk`` and ``GET /runs`` does not
    list them until this has run. Their keys come from the start time, the run id and the
    parent, which never change, so a header that changed meanwhile gets the same keys; each
    update is conditional only on the header still existing without them.

    Raises:
        InfrastructureError: If a scan page or an update fails for a reason other than its
            condition (the backfill can simply be run again).
    """
    guarded = client if isinstance(client, GuardedClient) else GuardedClient(client)
    kwargs: dict[str, Any] = {
        "TableName": table_name,
        "FilterExpression": "sk = :header AND attribute_not_exists(gsi4pk)",
        "ExpressionAttributeValues": {":header": {"S": HEADER_SK}},
        "ProjectionExpression": "pk, sk, run_id, created_at_ms, parent_run_id",
        "ConsistentRead": True,
    }
    updated = 0
    while True:
        page = guarded.scan(**kwargs)
        for item in page.get("Items", []):
            run_id = item["run_id"]["S"]
            parent = item["parent_run_id"]["S"] if "parent_run_id" in item else None
            try:
                guarded.update_item(
                    TableName=table_name,
                    Key={"pk": item["pk"], "sk": item["sk"]},
                    UpdateExpression="SET gsi4pk = :pk, gsi4sk = :sk",
                    ConditionExpression="attribute_exists(pk) AND attribute_not_exists(gsi4pk)",
                    ExpressionAttributeValues={
                        ":pk": {"S": started_pk(run_id, parent)},
                        ":sk": {"S": started_key(int(item["created_at_ms"]["N"]), run_id)},
                    },
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                continue  # gone, or indexed meanwhile by another backfill
            updated += 1
        last = page.get("LastEvaluatedKey")
        if not last:
            return updated
        kwargs["ExclusiveStartKey"] = last
