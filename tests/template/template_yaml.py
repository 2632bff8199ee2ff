"""template.yaml read as the tests see it: CloudFormation short forms, policy walkers, constants.

Shared by the ``tests/template`` suites (their fixtures are in ``conftest.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"

FUNCTIONS = {
    "StepRunnerFunction": "step_runner.app.handler",
    "ApiFunction": "api.app.handler",
    "ReconcilerFunction": "reconciler.app.handler",
    "RelayFunction": "relay.app.handler",
}
API_ROUTES = {
    "StartRun": ("POST", "/runs"),
    "ListRuns": ("GET", "/runs"),
    "GetRun": ("GET", "/runs/{run_id}"),
    "GetRunHistory": ("GET", "/runs/{run_id}/history"),
    "GetRunStream": ("GET", "/runs/{run_id}/stream"),
    "RedriveRun": ("POST", "/runs/{run_id}/redrive"),
    "MigrateRun": ("POST", "/runs/{run_id}/migrate"),
    "RerunRun": ("POST", "/runs/{run_id}/rerun"),
    "RerunRuns": ("POST", "/runs/rerun"),
    "CancelRun": ("POST", "/runs/{run_id}/cancel"),
    "TerminateRun": ("POST", "/runs/{run_id}/terminate"),
    "SendRunEvent": ("POST", "/runs/{run_id}/events/{name}"),
    "GetRunStatusValue": ("GET", "/runs/{run_id}/status-value"),
    "ExtendRunBudget": ("POST", "/runs/{run_id}/budget"),
    "GetFlow": ("GET", "/flow"),
    "ListReviews": ("GET", "/reviews"),
    "DecideReview": ("POST", "/reviews/{operation_id}"),
    "ListApprovals": ("GET", "/approvals"),
    "GetApproval": ("GET", "/approvals/{approval_id}"),
    "DecideApproval": ("POST", "/approvals/{approval_id}"),
    "MintApprovalLink": ("POST", "/approvals/{approval_id}/links"),
    "PersonGetApproval": ("GET", "/people/approvals/{approval_id}"),
    "PersonDecideApproval": ("POST", "/people/approvals/{approval_id}"),
    "LinkGetApproval": ("GET", "/links/approvals/{approval_id}"),
    "LinkDecideApproval": ("POST", "/links/approvals/{approval_id}"),
    "CallbackSuccess": ("POST", "/callbacks/{callback_id}/success"),
    "CallbackFailure": ("POST", "/callbacks/{callback_id}/failure"),
    "CallbackHeartbeat": ("POST", "/callbacks/{callback_id}/heartbeat"),
    "GetOpenApiDocument": ("GET", "/openapi.json"),
    "ConsoleRuns": ("GET", "/console"),
    "ConsoleRun": ("GET", "/console/runs/{run_id}"),
    "ConsoleCancelRun": ("POST", "/console/runs/{run_id}/cancel"),
    "ConsoleTerminateRun": ("POST", "/console/runs/{run_id}/terminate"),
    "ConsoleRedriveRun": ("POST", "/console/runs/{run_id}/redrive"),
    "ConsoleRerunRun": ("POST", "/console/runs/{run_id}/rerun"),
    "ConsoleSendRunEvent": ("POST", "/console/runs/{run_id}/events"),
    "ConsoleExtendRunBudget": ("POST", "/console/runs/{run_id}/budget"),
    "ConsoleStartRun": ("POST", "/console/runs"),
    "ConsoleApprovals": ("GET", "/console/approvals"),
    "ConsoleDecideApproval": ("POST", "/console/approvals/{approval_id}"),
    "ConsoleDecideReview": ("POST", "/console/reviews/{operation_id}"),
}
# The only methods API Gateway does not authenticate: people (JWT) and signed links (HMAC) cannot
# sign with SigV4, so ApiFunction verifies their credentials itself (api/routes/approvals.py).
LAMBDA_AUTHENTICATED_ROUTES = {
    "PersonGetApproval",
    "PersonDecideApproval",
    "LinkGetApproval",
    "LinkDecideApproval",
}
TABLE_ACTIONS = {
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:ConditionCheckItem",
}


# ------------------------------------------------------------------------- CloudFormation YAML
class CfnLoader(yaml.SafeLoader):
    """SafeLoader that turns CloudFormation short-form tags into their long (JSON) form."""


def _construct_cfn_tag(loader: CfnLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "Condition":
        return {"Condition": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        resource, _, attribute = value.partition(".")
        return {"Fn::GetAtt": [resource, attribute]}
    return {f"Fn::{tag_suffix}": value}


CfnLoader.add_multi_constructor("!", _construct_cfn_tag)


def load_cfn_yaml(text: str) -> dict[str, Any]:
    data = yaml.load(text, Loader=CfnLoader)  # CfnLoader is a SafeLoader
    assert isinstance(data, dict)
    return data


def props(resources: dict[str, Any], logical_id: str) -> dict[str, Any]:
    assert logical_id in resources, f"missing resource {logical_id}"
    p = resources[logical_id].get("Properties", {})
    assert isinstance(p, dict)
    return p


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def iter_policy_documents(resources: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every IAM / resource policy document in the template, with where it came from."""
    for logical_id, res in resources.items():
        p = res.get("Properties", {})
        rtype = res["Type"]
        if rtype == "AWS::Serverless::Function":
            for policy in as_list(p.get("Policies", [])):
                if isinstance(policy, dict) and "Statement" in policy:
                    yield logical_id, policy
        elif rtype in {"AWS::S3::BucketPolicy", "AWS::SQS::QueuePolicy"}:
            yield logical_id, p["PolicyDocument"]
        elif rtype == "AWS::IAM::Role":
            yield f"{logical_id}.AssumeRolePolicyDocument", p["AssumeRolePolicyDocument"]
            for policy in p.get("Policies", []):
                yield f"{logical_id}.{policy['PolicyName']}", policy["PolicyDocument"]
        elif rtype in {"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"}:
            yield logical_id, p["PolicyDocument"]


def iter_statements(resources: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for where, doc in iter_policy_documents(resources):
        for statement in as_list(doc["Statement"]):
            yield where, statement


def function_statements(resources: dict[str, Any], function: str) -> list[dict[str, Any]]:
    statements: list[dict[str, Any]] = []
    for policy in props(resources, function)["Policies"]:
        statements.extend(as_list(policy["Statement"]))
    return statements


def allowed(statements: list[dict[str, Any]], resource: Any) -> set[str]:
    """Actions allowed on exactly this (unresolved) Resource value."""
    actions: set[str] = set()
    for s in statements:
        if s["Effect"] == "Allow" and resource in as_list(s["Resource"]):
            actions.update(as_list(s["Action"]))
    return actions
