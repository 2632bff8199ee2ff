"""Design properties of template.yaml: structure, portability, journal, functions, outputs.

These run offline on the raw SAM template (no translator): `make validate` runs `sam validate`
and cfn-lint for syntax and schema; these tests pin down what those tools can't know we want.
Security (``test_template_security.py``), capacity (``test_template_capacity.py``), samconfig
and the sample events (``test_template_config.py``) have their own files; what they share is in
``template_yaml.py`` and ``conftest.py``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from tests.template.template_yaml import FUNCTIONS, ROOT, load_cfn_yaml, props

# test_policy_lint imports it from here.
__all__ = ["load_cfn_yaml"]


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
    assert env["RETENTION_DAYS"] == {"Ref": "RetentionDays"}  # ADR 0012
    assert env["EVENT_BUS_NAME"] == {"Ref": "EventBus"}
    assert env["AGENT_MODULES"] == (
        "agents.example,agents.checkout,agents.support,agents.concierge,agents.chat"
    )
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


# ---------------------------------------------------------------------------------- journal
def test_journal_table_design(resources: dict[str, Any]) -> None:
    table = resources["JournalTable"]
    assert table["Type"] == "AWS::DynamoDB::Table"
    assert table["DeletionPolicy"] == "Retain"
    assert table["UpdateReplacePolicy"] == "Retain"
    t = table["Properties"]
    assert t["BillingMode"] == "PAY_PER_REQUEST"
    attrs = {a["AttributeName"]: a["AttributeType"] for a in t["AttributeDefinitions"]}
    gsi_keys = ("gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk", "gsi3pk", "gsi3sk", "gsi4pk", "gsi4sk")
    assert attrs == {k: "S" for k in ("pk", "sk", *gsi_keys)}
    assert t["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    gsis = {g["IndexName"]: g for g in t["GlobalSecondaryIndexes"]}
    assert set(gsis) == {"gsi1", "gsi2", "gsi3", "gsi4"}  # gsi3: by tenant; gsi4: by start
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
