"""Security properties of template.yaml: who may call what, least privilege, secrets, storage."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.template.template_yaml import (
    API_ROUTES,
    FUNCTIONS,
    LAMBDA_AUTHENTICATED_ROUTES,
    ROOT,
    TABLE_ACTIONS,
    allowed,
    as_list,
    function_statements,
    iter_statements,
    props,
)

PAYMENTS_KEY = {"Ref": "PaymentsApiKeySecret"}


# ---------------------------------------------------------------------------------- security
def test_api_is_iam_authorised_by_default(resources: dict[str, Any]) -> None:
    api = props(resources, "DurableApi")
    assert resources["DurableApi"]["Type"] == "AWS::Serverless::Api"
    assert api["StageName"] == {"Ref": "Stage"}
    assert api["Auth"]["DefaultAuthorizer"] == "AWS_IAM"
    # Callers need execute-api:Invoke only, not lambda:InvokeFunction too.
    assert api["Auth"].get("InvokeRole") == "NONE"
    assert api["TracingEnabled"] is True
    assert api["AccessLogSetting"]["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogGroup", "Arn"]}


def test_api_routes_all_on_durable_api_iam_except_people_and_links(
    resources: dict[str, Any],
) -> None:
    events = props(resources, "ApiFunction")["Events"]
    routes = {
        name: (e["Properties"]["Method"].upper(), e["Properties"]["Path"])
        for name, e in events.items()
        if e["Type"] == "Api"
    }
    assert routes == API_ROUTES
    for name, e in events.items():
        assert e["Properties"]["RestApiId"] == {"Ref": "DurableApi"}, name
        if name in LAMBDA_AUTHENTICATED_ROUTES:
            # Exactly this override, and only on /people and /links paths.
            assert e["Properties"]["Auth"] == {"Authorizer": "NONE"}, name
            assert e["Properties"]["Path"].startswith(("/people/", "/links/")), name
        else:
            # A per-route Auth block could switch IAM off (Authorizer: NONE).
            assert "Auth" not in e["Properties"], name
    # No other function is reachable over HTTP.
    for logical_id in set(FUNCTIONS) - {"ApiFunction"}:
        for e in props(resources, logical_id).get("Events", {}).values():
            assert e["Type"] not in {"Api", "HttpApi"}
        assert "FunctionUrlConfig" not in props(resources, logical_id)


@pytest.mark.parametrize("route", sorted(LAMBDA_AUTHENTICATED_ROUTES))
def test_each_unauthenticated_method_is_served_by_a_lambda_that_authenticates(
    resources: dict[str, Any], route: str
) -> None:
    """API Gateway passes these through; the handler must verify a JWT or a signed link."""
    event = props(resources, "ApiFunction")["Events"][route]["Properties"]
    assert event["Auth"] == {"Authorizer": "NONE"}
    source = (ROOT / "functions" / "api" / "routes" / "approvals.py").read_text()
    method, path = API_ROUTES[route]
    declared = path.replace("{approval_id}", "<approval_id>")
    decorator = f'@router.{method.lower()}("{declared}")'
    assert decorator in source, decorator
    body = source.split(decorator, 1)[1].split("\n@router.", 1)[0]
    check = "_person(" if path.startswith("/people/") else "_link("
    assert check in body, f"{route} does not authenticate with {check}"


def test_approval_link_secret_is_generated_and_read_only_by_the_api(
    resources: dict[str, Any],
) -> None:
    secret = resources["ApprovalLinkSecret"]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    p = secret["Properties"]
    assert "SecretString" not in p, "the link key must never be in the template"
    assert p["GenerateSecretString"]["PasswordLength"] >= 32
    ref = {"Ref": "ApprovalLinkSecret"}
    api = function_statements(resources, "ApiFunction")
    assert allowed(api, ref) == {"secretsmanager:GetSecretValue"}
    env = props(resources, "ApiFunction")["Environment"]["Variables"]
    assert env["APPROVAL_LINK_SECRET_ARN"] == ref
    for where, s in iter_statements(resources):
        actions = [a for a in as_list(s.get("Action", [])) if str(a).startswith("secretsmanager:")]
        if actions:
            # The only other secret: the payments tool's key (test_template_credentials.py).
            readers = {"ApiFunction": ref, "StepRunnerFunction": PAYMENTS_KEY}
            readers["ReconcilerFunction"] = PAYMENTS_KEY
            assert as_list(s["Resource"]) == [readers.get(where)], (where, s)
            assert actions == ["secretsmanager:GetSecretValue"], (where, actions)


def test_jwt_parameters_reach_the_api_and_default_to_off(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    env = props(resources, "ApiFunction")["Environment"]["Variables"]
    for parameter, variable in (
        ("JwtIssuer", "JWT_ISSUER"),
        ("JwtAudience", "JWT_AUDIENCE"),
        ("JwtJwksUrl", "JWT_JWKS_URL"),
        ("PublicBaseUrl", "PUBLIC_BASE_URL"),
        # Minting links and deciding reviews of tools without reviewers: nobody until set.
        ("LinkMinters", "LINK_MINTERS"),
        ("ReviewOperators", "REVIEW_OPERATORS"),
        # Tenants: one default tenant for everyone until a map is set.
        ("TenantMap", "TENANT_MAP"),
    ):
        assert template["Parameters"][parameter] == {
            **template["Parameters"][parameter],
            "Type": "String",
            "Default": "",
        }
        assert env[variable] == {"Ref": parameter}


def test_tenant_parameters_reach_the_api(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    env = props(resources, "ApiFunction")["Environment"]["Variables"]
    assert env["TENANT_MAP"] == {"Ref": "TenantMap"}
    assert env["JWT_TENANT_CLAIM"] == {"Ref": "JwtTenantClaim"}
    assert template["Parameters"]["JwtTenantClaim"]["Default"] == "tenant"
    # Only the Api decides tenants: no other function is given the map.
    for logical_id in set(FUNCTIONS) - {"ApiFunction"}:
        variables = props(resources, logical_id).get("Environment", {}).get("Variables", {})
        assert "TENANT_MAP" not in variables, logical_id


def test_jwt_user_claims_and_jwks_cache_reach_the_api_with_the_code_defaults(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    from durable_agents.auth import jwt as auth

    env = props(resources, "ApiFunction")["Environment"]["Variables"]
    assert env["JWT_USER_CLAIMS"] == {"Ref": "JwtUserClaims"}
    assert env["JWT_JWKS_CACHE_SECONDS"] == {"Ref": "JwtJwksCacheSeconds"}
    claims = template["Parameters"]["JwtUserClaims"]
    # email (verified) is the safe default for any issuer; sub only when the deployer opts in.
    assert claims["Type"] == "String" and claims["Default"] == "email"
    assert claims["AllowedValues"] == ["email", "sub,email", "sub"]
    for value in claims["AllowedValues"]:  # every allowed value is one the Api accepts
        verifier = auth.jwt_verifier_from_env(
            {"JWT_ISSUER": "https://issuer.example", "JWT_AUDIENCE": "a", "JWT_USER_CLAIMS": value}
        )
        assert verifier.user_claims == set(value.split(","))
    cache = template["Parameters"]["JwtJwksCacheSeconds"]
    assert cache["Type"] == "Number"
    assert cache["Default"] == auth.JWKS_LIFESPAN_SECONDS == 300
    assert (cache["MinValue"], cache["MaxValue"]) == (1, auth.MAX_JWKS_LIFESPAN_SECONDS)


def test_no_wildcard_resources_or_actions_in_allow_statements(resources: dict[str, Any]) -> None:
    statements = list(iter_statements(resources))
    assert len(statements) >= 10  # the walker found the function policies, not nothing
    for where, s in statements:
        if s["Effect"] != "Allow" or "Resource" not in s:  # trust policies have no Resource
            continue
        for resource in as_list(s["Resource"]):
            assert resource != "*", f"{where}: Resource '*'"
            text = json.dumps(resource)
            assert not re.search(r'"(arn:[^"]*:)?\*"', text), f"{where}: wildcard {text}"
        for action in as_list(s["Action"]):
            assert action != "*" and not action.endswith(":*"), f"{where}: Action {action}"


def test_functions_use_explicit_statements_not_policy_templates(resources: dict[str, Any]) -> None:
    for logical_id in FUNCTIONS:
        policies = as_list(props(resources, logical_id)["Policies"])
        assert policies
        for policy in policies:
            # A string is a managed policy name, a single-key dict is a SAM policy template such
            # as DynamoDBCrudPolicy (which also grants Scan, DeleteItem, BatchWrite...).
            assert isinstance(policy, dict) and set(policy) == {"Statement"}, (logical_id, policy)


JOURNAL_FUNCTIONS = sorted(set(FUNCTIONS) - {"RelayFunction"})


@pytest.mark.parametrize("logical_id", JOURNAL_FUNCTIONS)
def test_least_privilege_table_access(resources: dict[str, Any], logical_id: str) -> None:
    statements = function_statements(resources, logical_id)
    table = {"Fn::GetAtt": ["JournalTable", "Arn"]}
    indexes = {"Fn::Sub": "${JournalTable.Arn}/index/*"}
    unconditioned = [s for s in statements if "Condition" not in s]
    assert allowed(unconditioned, table) == TABLE_ACTIONS
    assert allowed(statements, indexes) == {"dynamodb:Query"}
    # Deletes only of flow control's own items (ADR 0030): a freed slot, a granted queue entry.
    deletes = [s for s in statements if "dynamodb:DeleteItem" in as_list(s["Action"])]
    assert [s["Sid"] for s in deletes] == ["FlowItemDeletes"], logical_id
    (flow,) = deletes
    assert as_list(flow["Action"]) == ["dynamodb:DeleteItem"] and flow["Resource"] == table
    assert flow["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["FLOW#*"]}}
    every_action = {a for s in statements if s is not flow for a in as_list(s["Action"])}
    # The journal is append-only; no scans; and TransactWriteItems is not an IAM action (items
    # in a transaction are authorised by PutItem/UpdateItem/ConditionCheckItem).
    for forbidden in (
        "dynamodb:DeleteItem",
        "dynamodb:Scan",
        "dynamodb:BatchWriteItem",
        "dynamodb:TransactWriteItems",
        "dynamodb:DeleteTable",
    ):
        assert forbidden not in every_action, (logical_id, forbidden)


@pytest.mark.parametrize("logical_id", JOURNAL_FUNCTIONS)
def test_events_and_payload_access_are_scoped(resources: dict[str, Any], logical_id: str) -> None:
    statements = function_statements(resources, logical_id)
    assert allowed(statements, {"Fn::GetAtt": ["EventBus", "Arn"]}) == {"events:PutEvents"}
    s3_actions = allowed(statements, {"Fn::Sub": "${PayloadBucket.Arn}/runs/*"})
    assert "s3:GetObject" in s3_actions
    # The reconciler also tags finished runs' payloads for retention (ADR 0012).
    tagging = {"s3:GetObjectTagging", "s3:PutObjectTagging"}
    extra = tagging if logical_id == "ReconcilerFunction" else set()
    assert s3_actions <= {"s3:GetObject", "s3:PutObject"} | extra
    s3_resources = [
        r
        for s in statements
        if any(str(a).startswith("s3:") for a in as_list(s["Action"]))
        and as_list(s["Action"]) != ["s3:ListBucket"]
        for r in as_list(s["Resource"])
    ]
    assert set(map(str, s3_resources)) == {str({"Fn::Sub": "${PayloadBucket.Arn}/runs/*"})}
    listing = [s for s in statements if as_list(s["Action"]) == ["s3:ListBucket"]]
    if logical_id == "ReconcilerFunction":
        assert listing == [
            {
                "Sid": "PayloadRetentionListing",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": {"Fn::GetAtt": ["PayloadBucket", "Arn"]},
                "Condition": {"StringLike": {"s3:prefix": "runs/*"}},
            }
        ]
    else:
        assert listing == []


def test_stream_cache_is_its_own_table_with_ttl(resources: dict[str, Any]) -> None:
    table = props(resources, "StreamTable")
    assert table["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert "StreamSpecification" not in table  # no outbox here: it is not run state
    writer = function_statements(resources, "StepRunnerFunction")
    reader = function_statements(resources, "ApiFunction")
    stream = {"Fn::GetAtt": ["StreamTable", "Arn"]}
    assert allowed(writer, stream) == {"dynamodb:PutItem"}
    assert allowed(reader, stream) == {"dynamodb:Query"}


def test_wait_deadlines_use_one_time_schedules_on_the_reconciler(
    resources: dict[str, Any],
) -> None:
    assert resources["WaitScheduleGroup"]["Type"] == "AWS::Scheduler::ScheduleGroup"
    role = props(resources, "WaitSchedulerRole")
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    (invoke,) = role["Policies"][0]["PolicyDocument"]["Statement"]
    assert invoke["Action"] == "lambda:InvokeFunction"
    assert invoke["Resource"] == {"Fn::GetAtt": ["ReconcilerFunction", "Arn"]}
    for fn in ("StepRunnerFunction", "ApiFunction"):
        env = props(resources, fn)["Environment"]["Variables"]
        assert env["SCHEDULER_TARGET_ARN"] == {"Fn::GetAtt": ["ReconcilerFunction", "Arn"]}
        statements = function_statements(resources, fn)
        passes = [s for s in statements if "iam:PassRole" in as_list(s["Action"])]
        assert passes and all(
            s["Condition"]["StringEquals"]["iam:PassedToService"] == "scheduler.amazonaws.com"
            for s in passes
        )


def test_relay_reads_only_the_journal_stream(resources: dict[str, Any]) -> None:
    statements = function_statements(resources, "RelayFunction")
    stream = {"Fn::GetAtt": ["JournalTable", "StreamArn"]}
    assert allowed(statements, stream) == {
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
        "dynamodb:ListStreams",
    }
    assert allowed(statements, {"Fn::GetAtt": ["JournalTable", "Arn"]}) == set()
    assert allowed(statements, {"Fn::GetAtt": ["EventBus", "Arn"]}) == {"events:PutEvents"}
    event = props(resources, "RelayFunction")["Events"]["JournalStream"]["Properties"]
    assert event["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert event["BisectBatchOnFunctionError"] is True
    assert '"outbox": {"S": ["1"]}' in event["FilterCriteria"]["Filters"][0]["Pattern"]
    assert event["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["RelayDeadLetterQueue", "Arn"]
    }


def test_payload_bucket_private_encrypted_tls_only(resources: dict[str, Any]) -> None:
    b = props(resources, "PayloadBucket")
    sse = b["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}
    pab = b["PublicAccessBlockConfiguration"]
    assert pab == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert b["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    # Retention (ADR 0012): one expiration rule per retention class, by the reconciler's tag.
    from durable_agents.journal.retention import RETENTION_CLASSES_DAYS, RETENTION_TAG

    by_tag = {
        r["TagFilters"][0]["Value"]: r
        for r in b["LifecycleConfiguration"]["Rules"]
        if r.get("TagFilters")
    }
    assert set(by_tag) == {str(d) for d in RETENTION_CLASSES_DAYS}
    for days, rule in by_tag.items():
        assert rule["TagFilters"] == [{"Key": RETENTION_TAG, "Value": days}]
        assert rule["ExpirationInDays"] == int(days) and rule["Prefix"] == "runs/"
        assert rule["Status"] == "Enabled"
    policy = props(resources, "PayloadBucketPolicy")
    assert policy["Bucket"] == {"Ref": "PayloadBucket"}
    denies = [
        s
        for s in policy["PolicyDocument"]["Statement"]
        if s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    ]
    assert denies, "bucket policy must deny requests without TLS"
    assert {json.dumps(r) for r in as_list(denies[0]["Resource"])} == {
        json.dumps({"Fn::GetAtt": ["PayloadBucket", "Arn"]}),
        json.dumps({"Fn::Sub": "${PayloadBucket.Arn}/*"}),
    }
