"""The memory table (``ctx.memory``): its own table, and only the StepRunner reaches it."""

from __future__ import annotations

from typing import Any

from tests.template.template_yaml import FUNCTIONS, allowed, function_statements, props

MEMORY = {"Fn::GetAtt": ["MemoryTable", "Arn"]}


def test_the_memory_table_is_on_demand_encrypted_backed_up_and_expires_items(
    resources: dict[str, Any],
) -> None:
    table = props(resources, "MemoryTable")
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert [k["AttributeName"] for k in table["KeySchema"]] == ["pk", "sk"]
    assert table["SSESpecification"] == {"SSEEnabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert "GlobalSecondaryIndexes" not in table
    assert resources["MemoryTable"]["DeletionPolicy"] == "Retain"


def test_only_the_step_runner_reaches_memory_with_exactly_the_actions_it_uses(
    resources: dict[str, Any],
) -> None:
    step_runner = function_statements(resources, "StepRunnerFunction")
    # Reads are GetItem/Query (consistent); writes are one TransactWriteItems of conditional
    # puts (item + marker), authorised by PutItem; a delete is an expired tombstone put.
    assert allowed(step_runner, MEMORY) == {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
    }
    env = props(resources, "StepRunnerFunction")["Environment"]["Variables"]
    assert env["MEMORY_TABLE"] == {"Ref": "MemoryTable"}
    for logical_id in FUNCTIONS:
        if logical_id != "StepRunnerFunction":
            assert allowed(function_statements(resources, logical_id), MEMORY) == set(), logical_id
