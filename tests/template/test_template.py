"""Security and design properties of template.yaml, samconfig.toml and events/.

These run offline on the raw SAM template (no translator): `make validate` runs `sam validate`
and cfn-lint for syntax and schema; these tests pin down what those tools can't know we want.
"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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


@pytest.fixture(scope="module")
def raw() -> str:
    return TEMPLATE_PATH.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def template(raw: str) -> dict[str, Any]:
    return load_cfn_yaml(raw)


@pytest.fixture(scope="module")
def resources(template: dict[str, Any]) -> dict[str, Any]:
    res = template["Resources"]
    assert isinstance(res, dict)
    return res


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


# --------------------------------------------------------------------------------- structure
def test_is_a_sam_template(template: dict[str, Any]) -> None:
    assert template["Transform"] == "AWS::Serverless-2016-10-31"


def test_function_globals_python313_arm64_tracing_and_layer(template: dict[str, Any]) -> None:
    g = template["Globals"]["Function"]
    assert g["Runtime"] == "python3.13"
    assert g["Architectures"] == ["arm64"]
    assert g["Tracing"] == "Active"
    assert g["Layers"] == [{"Ref": "RuntimeLayer"}]
    env = g["Environment"]["Variables"]
    assert env["JOURNAL_TABLE"] == {"Ref": "JournalTable"}
    assert env["PAYLOAD_BUCKET"] == {"Ref": "PayloadBucket"}
    assert env["EVENT_BUS_NAME"] == {"Ref": "EventBus"}
    assert env["AGENT_MODULES"] == "agents.example,agents.checkout,agents.support"
    assert env["STREAM_TABLE"] == {"Ref": "StreamTable"}
    assert env["POWERTOOLS_SERVICE_NAME"] == "durable-agents"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "DurableAgents"
    assert env["LOG_LEVEL"] == {"Ref": "LogLevel"}


def test_the_functions_share_one_code_package(resources: dict[str, Any]) -> None:
    functions = {k for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}
    assert functions == set(FUNCTIONS)
    for logical_id, handler in FUNCTIONS.items():
        p = props(resources, logical_id)
        assert p["CodeUri"] == "functions/"
        assert p["Handler"] == handler
        # Runtime and architecture come from Globals only, so they cannot drift per function.
        assert "Runtime" not in p
        assert "Architectures" not in p
        assert "Layers" not in p


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_handler_module_defines_handler(logical_id: str) -> None:
    handler = FUNCTIONS[logical_id]
    module, _, attr = handler.rpartition(".")
    path = ROOT / "functions" / Path(*module.split(".")).with_suffix(".py")
    if not path.exists():
        pytest.fail(f"{logical_id} handler {handler}: {path.relative_to(ROOT)} does not exist")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    } | {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert attr in names, f"{path.relative_to(ROOT)} defines no top-level {attr!r}"


def test_agent_modules_package_exists() -> None:
    base = ROOT / "functions" / "agents"
    assert (base / "example.py").exists() or (base / "example" / "__init__.py").exists()


def test_layer_built_for_python313_arm64(resources: dict[str, Any]) -> None:
    layer = resources["RuntimeLayer"]
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    p = layer["Properties"]
    assert p["ContentUri"] == "layers/runtime"
    assert p["CompatibleRuntimes"] == ["python3.13"]
    assert p["CompatibleArchitectures"] == ["arm64"]
    assert p["RetentionPolicy"] in {"Retain", "Delete"}
    # layers/runtime/Makefile installs arm64/python3.13 wheels (tests/template/test_packaging.py)
    assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}
    assert (ROOT / "layers" / "runtime" / "durable_agents").is_dir()


def test_layer_requirements() -> None:
    lines = (ROOT / "layers" / "runtime" / "requirements.txt").read_text().splitlines()
    reqs = {
        re.split(r"[\[=<>~!]", line, maxsplit=1)[0].strip().lower(): line.strip()
        for line in lines
        if line.strip() and not line.lstrip().startswith("#")
    }
    assert {"aws-lambda-powertools", "pydantic"} <= set(reqs)
    assert "[tracer,parser]" in reqs["aws-lambda-powertools"].replace(" ", "")
    assert re.search(r"pydantic\s*(==|>=|~=)\s*2\.", reqs["pydantic"])
    for name, line in reqs.items():
        assert "==" in line, f"layer dependency {name} is not pinned: {line}"


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
            assert where == "ApiFunction" and as_list(s["Resource"]) == [ref], (where, s)
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
    from durable_agents.waits import auth

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
    assert allowed(statements, table) == TABLE_ACTIONS
    assert allowed(statements, indexes) == {"dynamodb:Query"}
    every_action = {a for s in statements for a in as_list(s["Action"])}
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
    assert s3_actions <= {"s3:GetObject", "s3:PutObject"}
    s3_resources = [
        r
        for s in statements
        if any(str(a).startswith("s3:") for a in as_list(s["Action"]))
        for r in as_list(s["Resource"])
    ]
    assert s3_resources == [{"Fn::Sub": "${PayloadBucket.Arn}/runs/*"}]


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


def test_no_hardcoded_region_account_or_partition(raw: str) -> None:
    code = "\n".join(line.split(" #", 1)[0] for line in raw.splitlines())
    assert not re.search(r"(?<!\d)\d{12}(?!\d)", code), "hard-coded account id"
    region = r"\b(us|eu|ap|sa|ca|me|af|il|mx|cn)(-gov|-iso[a-z]?)?-[a-z]+-\d\b"
    assert not re.search(region, code), "hard-coded region"
    assert not re.search(r"arn:aws(-[a-z-]+)?:", code), "hard-coded partition; use AWS::Partition"
    assert "amazonaws.com/" not in code


def test_no_fixed_physical_names(resources: dict[str, Any]) -> None:
    name_props = {
        "AWS::DynamoDB::Table": "TableName",
        "AWS::S3::Bucket": "BucketName",
        "AWS::SQS::Queue": "QueueName",
        "AWS::Serverless::Function": "FunctionName",
        "AWS::IAM::Role": "RoleName",
        "AWS::Events::EventBus": "Name",
        "AWS::Logs::LogGroup": "LogGroupName",
        "AWS::SecretsManager::Secret": "Name",
    }
    for logical_id, res in resources.items():
        key = name_props.get(res["Type"])
        value = res.get("Properties", {}).get(key) if key else None
        if value is None:
            continue
        # A name is allowed only when it is derived from the stack (or another resource) name.
        assert isinstance(value, dict) and "Fn::Sub" in value, (logical_id, value)
        assert "${AWS::StackName}" in value["Fn::Sub"], (logical_id, value)
    assert "TableName" not in props(resources, "JournalTable")
    assert props(resources, "EventBus")["Name"] == {"Fn::Sub": "${AWS::StackName}-bus"}


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


# ---------------------------------------------------------------------------------- journal
def test_journal_table_design(resources: dict[str, Any]) -> None:
    table = resources["JournalTable"]
    assert table["Type"] == "AWS::DynamoDB::Table"
    assert table["DeletionPolicy"] == "Retain"
    assert table["UpdateReplacePolicy"] == "Retain"
    t = table["Properties"]
    assert t["BillingMode"] == "PAY_PER_REQUEST"
    attrs = {a["AttributeName"]: a["AttributeType"] for a in t["AttributeDefinitions"]}
    gsi_keys = ("gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk", "gsi3pk", "gsi3sk")
    assert attrs == {k: "S" for k in ("pk", "sk", *gsi_keys)}
    assert t["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    gsis = {g["IndexName"]: g for g in t["GlobalSecondaryIndexes"]}
    assert set(gsis) == {"gsi1", "gsi2", "gsi3"}  # gsi3: runs by tenant
    for name, g in gsis.items():
        assert g["KeySchema"] == [
            {"AttributeName": f"{name}pk", "KeyType": "HASH"},
            {"AttributeName": f"{name}sk", "KeyType": "RANGE"},
        ]
        assert g["Projection"] == {"ProjectionType": "ALL"}
    assert t["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert t["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert t["SSESpecification"]["SSEEnabled"] is True
    assert t["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert t["DeletionProtectionEnabled"] == {"Fn::If": ["IsProd", True, False]}


def test_is_prod_condition(template: dict[str, Any]) -> None:
    assert template["Conditions"]["IsProd"] == {"Fn::Equals": [{"Ref": "Stage"}, "prod"]}
    stage = template["Parameters"]["Stage"]
    assert stage["Default"] == "dev"
    assert set(stage["AllowedValues"]) == {"dev", "prod"}


# ------------------------------------------------------------------------------ step runner
def test_step_runner_rule_pattern_retry_and_dead_letters(resources: dict[str, Any]) -> None:
    p = props(resources, "StepRunnerFunction")
    rule = p["Events"]["StepReady"]
    assert rule["Type"] == "EventBridgeRule"
    rp = rule["Properties"]
    assert rp["EventBusName"] == {"Ref": "EventBus"}
    assert rp["Pattern"] == {"source": ["durable-agents"], "detail-type": ["Step Ready"]}
    assert 0 < rp["RetryPolicy"]["MaximumRetryAttempts"] <= 185
    assert 60 <= rp["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 86400
    dlq_arn = {"Fn::GetAtt": ["StepRunnerDeadLetterQueue", "Arn"]}
    assert rp["DeadLetterConfig"] == {"Arn": dlq_arn}
    # Lambda's own async retries end in the same queue.
    on_failure = p["EventInvokeConfig"]["DestinationConfig"]["OnFailure"]
    assert on_failure == {"Type": "SQS", "Destination": dlq_arn}
    assert resources["StepRunnerDeadLetterQueue"]["Type"] == "AWS::SQS::Queue"
    assert props(resources, "StepRunnerDeadLetterQueue")["SqsManagedSseEnabled"] is True


def test_dead_letter_queue_accepts_only_the_step_ready_rule(resources: dict[str, Any]) -> None:
    policy = props(resources, "StepRunnerDeadLetterQueuePolicy")
    assert policy["Queues"] == [{"Ref": "StepRunnerDeadLetterQueue"}]
    allows = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert len(allows) == 1
    (s,) = allows
    assert s["Principal"] == {"Service": "events.amazonaws.com"}
    assert s["Action"] == "sqs:SendMessage"
    # SAM names the generated AWS::Events::Rule <function id><event id>.
    assert s["Condition"] == {
        "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["StepRunnerFunctionStepReady", "Arn"]}}
    }


def test_step_timeout_below_stall_threshold(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    stall = template["Parameters"]["StallAfterSeconds"]
    assert stall["Default"] == 300
    assert props(resources, "StepRunnerFunction")["Timeout"] < stall["MinValue"]


# ------------------------------------------------------------------------------- reconciler
def test_reconciler_schedule_and_env(resources: dict[str, Any]) -> None:
    p = props(resources, "ReconcilerFunction")
    assert p["Timeout"] == 60
    assert p["Events"]["Sweep"]["Type"] == "Schedule"
    assert p["Events"]["Sweep"]["Properties"]["Schedule"] == "rate(1 minute)"
    env = p["Environment"]["Variables"]
    assert env["STALL_AFTER_SECONDS"] == {"Ref": "StallAfterSeconds"}


# -------------------------------------------------------------------------------------- logs
def test_every_function_logs_to_a_log_group_with_retention(resources: dict[str, Any]) -> None:
    seen = set()
    for logical_id in FUNCTIONS:
        ref = props(resources, logical_id)["LoggingConfig"]["LogGroup"]
        assert set(ref) == {"Ref"}, logical_id
        group = resources[ref["Ref"]]
        assert group["Type"] == "AWS::Logs::LogGroup"
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
        seen.add(ref["Ref"])
    assert len(seen) == len(FUNCTIONS), "each function needs its own log group"
    for logical_id, res in resources.items():
        if res["Type"] == "AWS::Logs::LogGroup":
            assert res["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, logical_id


# ----------------------------------------------------------------------------------- outputs
def test_outputs(template: dict[str, Any]) -> None:
    outputs = template["Outputs"]
    assert {
        "ApiUrl",
        "JournalTableName",
        "EventBusName",
        "PayloadBucketName",
        "StepRunnerDeadLetterQueueUrl",
    } <= set(outputs)
    assert outputs["JournalTableName"]["Value"] == {"Ref": "JournalTable"}
    assert outputs["StepRunnerDeadLetterQueueUrl"]["Value"] == {"Ref": "StepRunnerDeadLetterQueue"}
    url = outputs["ApiUrl"]["Value"]["Fn::Sub"]
    assert "${DurableApi}" in url and "${AWS::Region}" in url and "${Stage}" in url


# --------------------------------------------------------------------------------- samconfig
def test_samconfig_environments() -> None:
    cfg = tomllib.loads((ROOT / "samconfig.toml").read_text())
    assert cfg["version"] == 0.1
    expected = {
        "default": ("durable-agents", "dev"),
        "dev": ("durable-agents-dev", "dev"),
        "prod": ("durable-agents-prod", "prod"),
    }
    for env, (stack, stage) in expected.items():
        section = cfg[env]
        assert section["global"]["parameters"]["stack_name"] == stack
        deploy = section["deploy"]["parameters"]
        assert deploy["capabilities"] == "CAPABILITY_IAM"
        assert deploy["resolve_s3"] is True
        assert f"Stage={stage}" in deploy["parameter_overrides"].split()
        for command in section.values():
            assert "region" not in command["parameters"], env
    assert cfg["prod"]["deploy"]["parameters"]["confirm_changeset"] is True


# ------------------------------------------------------------------------------------ events
def _event(name: str) -> dict[str, Any]:
    data = json.loads((ROOT / "events" / name).read_text())
    assert isinstance(data, dict)
    return data


def test_step_ready_event_matches_the_rule(resources: dict[str, Any]) -> None:
    pattern = props(resources, "StepRunnerFunction")["Events"]["StepReady"]["Properties"]["Pattern"]
    ev = _event("step_ready.json")
    assert ev["source"] in pattern["source"]
    assert ev["detail-type"] in pattern["detail-type"]
    assert {"version", "id", "account", "time", "region", "resources"} <= set(ev)
    assert ev["detail"]["run_id"]


@pytest.mark.parametrize(
    ("name", "route"), [("api_start_run.json", "StartRun"), ("api_get_run.json", "GetRun")]
)
def test_api_events_match_declared_routes(name: str, route: str) -> None:
    ev = _event(name)
    method, path = API_ROUTES[route]
    assert ev["httpMethod"] == method
    assert ev["resource"] == path
    assert ev["requestContext"]["resourcePath"] == path
    assert ev["requestContext"]["identity"]["userArn"].startswith("arn:")
    assert ev["isBase64Encoded"] is False
    for param in re.findall(r"{(\w+)}", path):
        assert ev["pathParameters"][param]
        assert ev["pathParameters"][param] in ev["path"]


def test_start_run_event_body() -> None:
    body = json.loads(_event("api_start_run.json")["body"])
    assert body == {"agent": "example-research", "input": {"topic": "durable execution"}}


def test_reconciler_event_is_a_scheduled_event() -> None:
    ev = _event("reconciler_schedule.json")
    assert ev["source"] == "aws.events"
    assert ev["detail-type"] == "Scheduled Event"


def test_every_function_has_a_sample_event() -> None:
    names = {p.name for p in (ROOT / "events").glob("*.json")}
    assert {
        "step_ready.json",
        "api_start_run.json",
        "reconciler_schedule.json",
        "reconciler_wait_due.json",
        "relay_stream.json",
    } <= names


def test_relay_sample_event_carries_one_outbox_event() -> None:
    from durable_agents.outbox import events_from_stream

    (event,) = events_from_stream(_event("relay_stream.json")["Records"])
    assert (event.detail_type, event.event_id) == ("Order Placed", "run-demo-1:emit:3")


# Capacity (docs/security.md): the public routes are throttled below the stage default, and the
# engine keeps reserved concurrency the Api cannot take.
THROTTLED_ROUTES = {
    ("GET", "/links/approvals/{approval_id}"): (20, 10),
    ("POST", "/links/approvals/{approval_id}"): (20, 10),
    ("GET", "/people/approvals/{approval_id}"): (20, 10),
    ("POST", "/people/approvals/{approval_id}"): (20, 10),
    ("POST", "/callbacks/{callback_id}/success"): (50, 25),
    ("POST", "/callbacks/{callback_id}/failure"): (50, 25),
    ("POST", "/callbacks/{callback_id}/heartbeat"): (50, 25),
    ("GET", "/runs/{run_id}/stream"): (20, 10),
}


def test_public_routes_have_their_own_throttling(resources: dict[str, Any]) -> None:
    settings = props(resources, "DurableApi")["MethodSettings"]
    default = next(s for s in settings if s["ResourcePath"] == "/*")
    assert (default["ThrottlingBurstLimit"], default["ThrottlingRateLimit"]) == (100, 50)
    per_route = {
        (s["HttpMethod"], s["ResourcePath"].replace("~1", "/")): (
            s["ThrottlingBurstLimit"],
            s["ThrottlingRateLimit"],
        )
        for s in settings
        if s["ResourcePath"] != "/*"
    }
    assert per_route == {(m, "/" + p): limits for (m, p), limits in THROTTLED_ROUTES.items()}
    declared = set(API_ROUTES.values())
    for method, path in THROTTLED_ROUTES:
        assert (method, path) in declared  # a setting for a route that exists
        assert path.startswith(("/links/", "/people/", "/callbacks/", "/runs/"))


def test_step_runner_reserves_concurrency_by_parameter(template: dict[str, Any]) -> None:
    parameter = template["Parameters"]["StepRunnerReservedConcurrency"]
    assert parameter["Type"] == "Number" and parameter["Default"] == 100
    assert parameter["MinValue"] == 0
    reserved = props(template["Resources"], "StepRunnerFunction")["ReservedConcurrentExecutions"]
    assert reserved == {
        "Fn::If": [
            "ReservesStepRunnerConcurrency",
            {"Ref": "StepRunnerReservedConcurrency"},
            {"Ref": "AWS::NoValue"},
        ]
    }
    assert template["Conditions"]["ReservesStepRunnerConcurrency"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "StepRunnerReservedConcurrency"}, 0]}]
    }
    # The Api (and the other functions) reserve nothing: they share what is left.
    for logical_id in set(FUNCTIONS) - {"StepRunnerFunction"}:
        assert "ReservedConcurrentExecutions" not in props(template["Resources"], logical_id)
