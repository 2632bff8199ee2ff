"""Per-tool-call credentials in template.yaml (docs/credentials.md): least privilege, pinned.

The payments tool's role is assumable only by the roles of the functions that execute tool
calls, only with the run and operation ids as session tags; those functions may assume exactly
that role and read exactly the payments key; nobody else may do either, and nothing is ``*``.
"""

from __future__ import annotations

from typing import Any

from tests.template.template_yaml import as_list, function_statements, iter_statements, props

ROLE = "PaymentsToolRole"
ROLE_ARN = {
    "Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${AWS::StackName}-payments-tool"
}
KEY = {"Ref": "PaymentsApiKeySecret"}
EXECUTORS = ("StepRunnerFunction", "ReconcilerFunction")  # run fn, lookup and compensate


def test_the_tool_role_trusts_only_the_executors_with_session_tags(
    resources: dict[str, Any],
) -> None:
    role = props(resources, ROLE)
    assert role["RoleName"] == {"Fn::Sub": "${AWS::StackName}-payments-tool"}  # = ROLE_ARN
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Effect"] == "Allow"
    assert trust["Principal"] == {"AWS": [{"Fn::GetAtt": [f"{f}Role", "Arn"]} for f in EXECUTORS]}
    assert sorted(as_list(trust["Action"])) == ["sts:AssumeRole", "sts:TagSession"]
    # A session without the run and operation ids (CloudTrail's view of the call) is refused.
    assert trust["Condition"] == {
        "Null": {"aws:RequestTag/run_id": "false", "aws:RequestTag/operation_id": "false"}
    }
    assert "ManagedPolicyArns" not in role and "Policies" not in role  # nothing granted yet


def test_the_executors_assume_exactly_that_role_and_read_exactly_that_key(
    resources: dict[str, Any],
) -> None:
    for function in EXECUTORS:
        statements = function_statements(resources, function)
        sts = [
            s for s in statements if any(str(a).startswith("sts:") for a in as_list(s["Action"]))
        ]
        assert len(sts) == 1, function
        assert sorted(as_list(sts[0]["Action"])) == ["sts:AssumeRole", "sts:TagSession"]
        assert as_list(sts[0]["Resource"]) == [ROLE_ARN]
        reads = [s for s in statements if "secretsmanager:GetSecretValue" in as_list(s["Action"])]
        assert [as_list(s["Resource"]) for s in reads] == [[KEY]], function
        env = props(resources, function)["Environment"]["Variables"]
        assert env["PAYMENTS_ROLE_ARN"] == ROLE_ARN  # the role's name is RoleName
        assert env["PAYMENTS_API_KEY_SECRET"] == KEY


def test_nobody_else_may_assume_roles_or_tag_sessions(resources: dict[str, Any]) -> None:
    for where, statement in iter_statements(resources):
        actions = [str(a) for a in as_list(statement.get("Action", []))]
        if not any(a in ("sts:AssumeRole", "sts:TagSession") for a in actions):
            continue
        if where.endswith(".AssumeRolePolicyDocument"):
            continue  # trust policies: who may assume the role itself
        assert where in EXECUTORS, (where, statement)
        assert as_list(statement["Resource"]) == [ROLE_ARN]
        assert "*" not in str(statement["Resource"])


def test_the_payments_key_is_not_in_the_template(resources: dict[str, Any]) -> None:
    key = resources["PaymentsApiKeySecret"]
    assert key["Type"] == "AWS::SecretsManager::Secret"
    assert "SecretString" not in key["Properties"]
