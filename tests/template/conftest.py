"""Fixtures for the template suites: template.yaml's text, parsed, and its resources."""

from __future__ import annotations

from typing import Any

import pytest

from tests.template.template_yaml import TEMPLATE_PATH, load_cfn_yaml


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
