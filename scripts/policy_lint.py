"""IAM / policy lint of template.yaml: checkov on the SAM-translated template (`make lint-policy`).

Runs in `.venv-policy` (checkov, aws-sam-translator, cfn-lint + cfn-lint-serverless; the Makefile
pins them), not in the project's virtualenv.

Why translate first: checkov's IAM checks (CKV_AWS_107..111, CKV_AWS_60..63) look at
`AWS::IAM::Role` / `AWS::IAM::Policy` resources. On the raw SAM template the functions'
`Policies:` are properties of `AWS::Serverless::Function`, which those checks never read, so the
statements that matter most would pass unexamined. Translated, each function has its
`<Function>Role` with its inline policy, and the checks apply to it.

Accepted findings are skipped per resource in template.yaml (`Metadata: checkov: skip:` with a
`comment`), and listed with the reason in docs/security.md ("Accepted policy-lint findings");
tests/template/test_policy_lint.py checks that both lists are the same. A skip on a SAM resource
also covers the resources SAM generates from it (`ApiFunction` -> `ApiFunctionRole`,
`DurableApi` -> `DurableApiStage`, ...): they have no Metadata of their own to carry it.

Self-test: the same run also lints a copy of the template in which the StepRunner may write to
any DynamoDB table (`"Resource": "*"`), and fails unless checkov flags `StepRunnerFunctionRole`
for it, so a lint that silently stopped seeing the functions' policies cannot pass.

Exit status: 0 when the template has no finding that is not skipped and the self-test caught
its planted finding; 1 otherwise (the findings are printed).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# Checkov reads the region nowhere; samtranslator needs one to build ARNs. The template names no
# region, so any region gives the same policies.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
# samtranslator logs a warning per unknown feature toggle; noise here.
logging.disable(logging.WARNING)

from cfnlint.decode import decode  # noqa: E402 (after the region is set)
from samtranslator.parser.parser import Parser  # noqa: E402
from samtranslator.translator.translator import Translator  # noqa: E402

CANARY_RESOURCE = "StepRunnerFunctionRole"
CANARY_STATEMENT = {
    "Sid": "PolicyLintCanary",
    "Effect": "Allow",
    "Action": ["dynamodb:PutItem", "dynamodb:DeleteItem"],
    "Resource": "*",
}


class PolicyLintError(Exception):
    """The template could not be linted (it does not parse, or SAM refuses to translate it)."""


def load(path: Path) -> dict[str, Any]:
    """Parse a CloudFormation YAML/JSON template into plain long-form JSON data.

    Raises:
        PolicyLintError: the template does not parse.
    """
    template, matches = decode(str(path))
    if matches or template is None:
        raise PolicyLintError(f"{path} does not parse: {[str(m) for m in matches]}")
    # cfn-lint's node types carry line numbers; JSON round-tripping makes plain dicts and strs.
    data: dict[str, Any] = json.loads(json.dumps(template))
    return data


def translate(sam: dict[str, Any]) -> dict[str, Any]:
    """Translate a SAM template to plain CloudFormation, offline, carrying checkov skips along.

    Raises:
        PolicyLintError: SAM refuses the template, or it names a managed policy by name
            (the offline translation has no map of names to ARNs).
    """

    def no_managed_policies() -> dict[str, str]:
        raise PolicyLintError("template names a managed policy by name; use its ARN")

    translator = Translator(managed_policy_map=None, sam_parser=Parser())
    try:
        cfn: dict[str, Any] = translator.translate(
            sam_template=with_s3_code(sam),
            parameter_values={},
            passthrough_metadata=True,
            get_managed_policy_map=no_managed_policies,
        )
    except PolicyLintError:
        raise
    except Exception as exc:  # samtranslator raises many types; all mean "cannot lint"
        raise PolicyLintError(f"SAM translation failed: {exc}") from exc
    carry_skips(sam["Resources"], cfn["Resources"])
    return cfn


# Local code paths (what `sam build` uploads) -> placeholder S3 URIs: without a build, SAM
# accepts only S3 locations, and the code's location is irrelevant to the policies.
CODE_PROPERTIES = {
    "AWS::Serverless::Function": "CodeUri",
    "AWS::Serverless::LayerVersion": "ContentUri",
}


def with_s3_code(sam: dict[str, Any]) -> dict[str, Any]:
    """A copy of the template whose local code paths are placeholder S3 URIs."""
    built = copy.deepcopy(sam)
    for resource in built["Resources"].values():
        prop = CODE_PROPERTIES.get(resource.get("Type", ""))
        uri = resource.get("Properties", {}).get(prop)
        if prop and isinstance(uri, str) and not uri.startswith("s3://"):
            resource["Properties"][prop] = f"s3://policy-lint/{uri.strip('/')}"
    return built


def carry_skips(sam_resources: dict[str, Any], cfn_resources: dict[str, Any]) -> None:
    """Give each generated resource the checkov skips of the SAM resource it came from.

    SAM names what it generates after the SAM resource (`<Id>Role`, `<Id>Stage`, ...); the
    source is the SAM resource whose logical id is the longest prefix of the generated id.
    """
    for logical_id, resource in cfn_resources.items():
        if logical_id in sam_resources:
            continue
        sources = [sid for sid in sam_resources if logical_id.startswith(sid)]
        if not sources:
            continue
        source = sam_resources[max(sources, key=len)]
        skips = source.get("Metadata", {}).get("checkov", {}).get("skip", [])
        if skips:
            metadata = resource.setdefault("Metadata", {})
            metadata.setdefault("checkov", {}).setdefault("skip", []).extend(skips)


def with_canary(sam: dict[str, Any]) -> dict[str, Any]:
    """A copy of the template whose StepRunner may write to any table: checkov must flag it."""
    planted = copy.deepcopy(sam)
    policies = planted["Resources"]["StepRunnerFunction"]["Properties"]["Policies"]
    policies[0]["Statement"].append(CANARY_STATEMENT)
    return planted


def run_checkov(paths: list[Path]) -> list[dict[str, Any]]:
    """Run checkov on the given CloudFormation JSON files; return its failed checks.

    Raises:
        PolicyLintError: checkov did not produce a report (crashed, or parsed nothing).
    """
    args = [sys.executable, "-m", "checkov.main", "--framework", "cloudformation"]
    # --skip-download: no calls home for guidelines or external checks (offline, reproducible).
    args += ["--skip-download", "--output", "json", "--soft-fail"]
    for path in paths:
        args += ["--file", str(path)]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise PolicyLintError(f"checkov failed ({proc.returncode}): {proc.stderr[-2000:]}") from exc
    if isinstance(report, list):  # one report per framework; only cloudformation runs here
        report = next((r for r in report if r.get("check_type") == "cloudformation"), {})
    summary = report.get("summary", {})
    if summary.get("parsing_errors") or not summary.get("resource_count"):
        raise PolicyLintError(f"checkov parsed nothing: {summary}")
    failed: list[dict[str, Any]] = report["results"].get("failed_checks", [])
    return failed


def main(argv: list[str]) -> int:
    """Lint the template named on the command line (default template.yaml)."""
    path = Path(argv[1] if len(argv) > 1 else "template.yaml")
    sam = load(path)
    with tempfile.TemporaryDirectory(prefix="policy-lint-") as tmp:
        real = Path(tmp) / "template.json"
        canary = Path(tmp) / "canary.json"
        real.write_text(json.dumps(translate(sam)))
        canary.write_text(json.dumps(translate(with_canary(sam))))
        failed = run_checkov([real, canary])
    findings = [f for f in failed if Path(f["file_path"]).name == real.name]
    caught = {
        f["check_id"]
        for f in failed
        if Path(f["file_path"]).name == canary.name and f["resource"].endswith(CANARY_RESOURCE)
    }
    status = 0
    for f in findings:
        print(f"{path}: {f['check_id']} {f['resource']}: {f['check_name']}")
        status = 1
    if not caught:
        print(f"self-test: checkov missed Resource '*' on {CANARY_RESOURCE}", file=sys.stderr)
        status = 1
    if status == 0:
        print(
            f"checkov: no findings in {path} beyond the accepted ones (docs/security.md); "
            f"self-test caught {', '.join(sorted(caught))} on {CANARY_RESOURCE}"
        )
    return status


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except PolicyLintError as exc:
        print(f"policy lint: {exc}", file=sys.stderr)
        sys.exit(1)
