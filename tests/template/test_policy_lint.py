"""The policy lint's accepted findings are exactly the ones docs/security.md lists and justifies.

`make lint-policy` runs checkov and cfn-lint-serverless (scripts/policy_lint.py); a finding is
accepted only by a skip on its resource in template.yaml. These tests make each skip visible:
the table "Accepted policy-lint findings" in docs/security.md and the skips in the template must
name the same (check, resource) pairs, and every skip and row must give a reason.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.template.test_template import load_cfn_yaml

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Accepted policy-lint findings"
CHECK_ID = re.compile(r"^(CKV_AWS_\d+|[EW][SI]?\d{4})$")

Finding = tuple[str, str]  # (check id, logical id of the resource that carries the skip)


def template_skips(template: dict[str, Any]) -> dict[Finding, str]:
    """(check, resource) -> reason, for every checkov skip and cfn-lint ignore in the template."""
    skips: dict[Finding, str] = {}
    for logical_id, resource in template["Resources"].items():
        metadata = resource.get("Metadata") or {}
        for skip in (metadata.get("checkov") or {}).get("skip", []):
            key = (skip["id"], logical_id)
            assert key not in skips, f"{key} skipped twice"
            skips[key] = str(skip.get("comment", "")).strip()
        ignored = ((metadata.get("cfn-lint") or {}).get("config") or {}).get("ignore_checks", [])
        for check in ignored:
            key = (check, logical_id)
            assert key not in skips, f"{key} skipped twice"
            # cfn-lint has no field for a reason: the YAML comment and the docs table give it.
            skips[key] = "see docs/security.md"
    return skips


def documented_findings(markdown: str) -> dict[Finding, str]:
    """(check, resource) -> reason, from the table of the "Accepted policy-lint findings" section.

    A row may name several resources (comma-separated) that share the check and the reason.
    """
    assert SECTION in markdown, f"docs/security.md has no {SECTION!r} section"
    section = markdown.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    findings: dict[Finding, str] = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        assert len(cells) == 3, f"row needs check | resource | why: {row}"
        check = cells[0].split()[0].strip("`")
        assert CHECK_ID.match(check), f"not a check id: {check!r} in {row}"
        assert cells[2], f"no reason given: {row}"
        for resource in cells[1].split(","):
            key = (check, resource.strip().strip("`"))
            assert key not in findings, f"{key} listed twice"
            findings[key] = cells[2]
    return findings


@pytest.fixture(scope="module")
def skips() -> dict[Finding, str]:
    return template_skips(load_cfn_yaml((ROOT / "template.yaml").read_text()))


@pytest.fixture(scope="module")
def documented() -> dict[Finding, str]:
    return documented_findings((ROOT / "docs" / "security.md").read_text())


def test_every_skip_in_the_template_is_listed_in_the_docs(
    skips: dict[Finding, str], documented: dict[Finding, str]
) -> None:
    assert len(skips) >= 10  # the walker found the skips, not nothing
    undocumented = sorted(set(skips) - set(documented))
    assert not undocumented, f"skipped in template.yaml, not in docs/security.md: {undocumented}"


def test_every_finding_listed_in_the_docs_is_skipped_in_the_template(
    skips: dict[Finding, str], documented: dict[Finding, str]
) -> None:
    stale = sorted(set(documented) - set(skips))
    assert not stale, f"listed in docs/security.md, not skipped in template.yaml: {stale}"


def test_every_checkov_skip_says_why(skips: dict[Finding, str]) -> None:
    for key, reason in skips.items():
        assert len(reason) >= 20, f"{key}: skip without a reason ({reason!r})"


def test_the_table_parser_sees_a_missing_row() -> None:
    # The tests above compare two parsed lists; make sure a drift between them is visible.
    skip = {"id": "CKV_AWS_27", "comment": "x" * 20}
    template = {
        "Resources": {
            "Queue": {"Metadata": {"checkov": {"skip": [skip]}}},
            "Fn": {"Metadata": {"cfn-lint": {"config": {"ignore_checks": ["WS1004"]}}}},
        }
    }
    table = "| check | resource | why |\n|---|---|---|\n| `WS1004` (x) | `Fn` | y |\n"
    docs = f"{SECTION}\n\n{table}\n## Limits\n"
    missing = set(template_skips(template)) - set(documented_findings(docs))
    assert missing == {("CKV_AWS_27", "Queue")}
