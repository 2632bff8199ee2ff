"""docs/security.md's "Routes" table is the Api's OpenAPI document, route for route.

The table is parsed (``method | path | authentication | ...``) and held to ``docs/openapi.json``
(the served document, kept fresh by ``tests/unit/test_api_openapi.py``): the same set of
(method, path) pairs, and each row's authentication naming the operation's ``security`` scheme.
A route added to the Api and not to the page, or documented with another authentication, fails.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.conftest import ROOT

SECURITY_DOC = ROOT / "docs" / "security.md"
OPENAPI = ROOT / "docs" / "openapi.json"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
# The OpenAPI security scheme of each word the table's authentication column uses.
SCHEMES = {"IAM": "sigv4", "JWT": "jwt", "signed link": "link"}
# What may follow the scheme ("IAM + callback secret"), and on which paths only.
EXTRAS = {"callback secret": re.compile(r"/callbacks/\{callback_id\}/[a-z]+")}
HEADER = ["method", "path", "authentication", "who may", "tenant rule", "cross-site rule"]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _unquote(cell: str) -> str:
    return cell.strip("`").strip()


def routes_table(text: str) -> list[dict[str, str]]:
    """The rows of the table in the ``## Routes`` section, as column name -> cell."""
    section = re.search(r"^## Routes\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert section, "docs/security.md has no '## Routes' section"
    lines = [line for line in section.group(1).splitlines() if line.startswith("|")]
    assert lines, "the Routes section has no table"
    header = _cells(lines[0])
    assert header == HEADER, header
    assert set(lines[1].replace("|", "").strip()) <= set("-: "), lines[1]
    rows = []
    for line in lines[2:]:
        cells = _cells(line)
        assert len(cells) == len(header), f"a row of {len(cells)} cells: {line}"
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def _documented() -> dict[tuple[str, str], dict[str, Any]]:
    document = json.loads(OPENAPI.read_text())
    default = document.get("security", [])
    return {
        (method.upper(), path): {"security": operation.get("security", default)}
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def _scheme_names(security: list[dict[str, Any]]) -> set[str]:
    return {name for requirement in security for name in requirement}


@pytest.fixture(scope="module")
def table() -> dict[tuple[str, str], dict[str, str]]:
    rows = routes_table(SECURITY_DOC.read_text())
    keyed: dict[tuple[str, str], dict[str, str]] = {}
    for row in rows:
        key = (_unquote(row["method"]), _unquote(row["path"]))
        assert key not in keyed, f"{key} is in the Routes table twice"
        keyed[key] = row
    return keyed


def test_the_routes_table_lists_exactly_the_documents_routes(
    table: dict[tuple[str, str], dict[str, str]],
) -> None:
    documented = set(_documented())
    missing = sorted(documented - set(table))
    extra = sorted(set(table) - documented)
    assert not missing, f"routes of docs/openapi.json missing from docs/security.md: {missing}"
    assert not extra, f"routes in docs/security.md that docs/openapi.json does not have: {extra}"


def test_each_routes_authentication_is_the_documents_security_scheme(
    table: dict[tuple[str, str], dict[str, str]],
) -> None:
    documented = _documented()
    wrong = []
    for key, row in table.items():
        if key not in documented:
            continue  # reported by the test above
        method, path = key
        first, *extras = [part.strip() for part in row["authentication"].split("+")]
        assert first in SCHEMES, f"{key}: unknown authentication {row['authentication']!r}"
        expected = _scheme_names(documented[key]["security"])
        if {SCHEMES[first]} != expected:
            wrong.append((method, path, row["authentication"], sorted(expected)))
        for extra in extras:
            assert extra in EXTRAS, f"{key}: unknown authentication {extra!r}"
            assert EXTRAS[extra].fullmatch(path), f"{key}: {extra!r} on a path that has none"
    assert not wrong, f"authentication differs from the document's security: {wrong}"


def test_every_callback_route_names_its_secret(
    table: dict[tuple[str, str], dict[str, str]],
) -> None:
    for (method, path), row in table.items():
        if EXTRAS["callback secret"].fullmatch(path):
            assert row["authentication"] == "IAM + callback secret", (method, path)


def test_every_state_changing_route_states_its_cross_site_rule(
    table: dict[tuple[str, str], dict[str, str]],
) -> None:
    for (method, path), row in table.items():
        rule = row["cross-site rule"]
        if method == "GET":
            assert rule == "read-only", (method, path)
        elif path.startswith("/links/"):
            assert "no origin check" in rule, (method, path)  # api.cross_site exempts /links/
        else:
            assert rule.startswith("403 cross-site"), (method, path)
        if method == "POST":
            assert "415" in rule, (method, path)


def test_the_parser_sees_a_route_left_out() -> None:
    """Not vacuous: a table without one of the document's routes is caught."""
    rows = routes_table(SECURITY_DOC.read_text())
    shorter = {(_unquote(r["method"]), _unquote(r["path"])) for r in rows[1:]}
    assert set(_documented()) - shorter
