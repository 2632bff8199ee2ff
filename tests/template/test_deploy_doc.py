"""docs/deploy.md's tables are template.yaml's resources, parameters and route authentication.

Three tables of the page are parsed and held to ``template.yaml`` (and, for authentication, to
``docs/openapi.json``, the served OpenAPI document):

- "What each resource is for": every resource the template declares, by logical id, with its
  ``Type``, and nothing else (the resources SAM generates from them, e.g. each function's role,
  are named in the prose, not checked). A row may list several ids of one type.
- "Parameters": every parameter with its default as in the template (an empty default is
  written ``""``), and nothing else.
- "Calling the API": every route of ``ApiFunction`` falls under exactly one row's paths, whose
  API Gateway authorizer is the route's (its event's ``Auth.Authorizer``, else the Api's
  ``DefaultAuthorizer``) and whose OpenAPI scheme is the document's ``security`` for the route.

A resource or a parameter added to the template and not to the page fails, naming it; so does a
row left behind by one removed, a changed default, or a route whose authentication changed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.template.template_yaml import ROOT

DEPLOY_DOC = ROOT / "docs" / "deploy.md"
OPENAPI = ROOT / "docs" / "openapi.json"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
RESOURCES_HEADING = "## What each resource is for"
PARAMETERS_HEADING = "## Parameters"
AUTH_HEADING = "## Calling the API"
RESOURCES_HEADER = ["Logical id", "Type", "Purpose"]
PARAMETERS_HEADER = ["Parameter", "Default", "Meaning"]
AUTH_HEADER = [
    "Paths (and every path under them)",
    "API Gateway auth",
    "OpenAPI scheme",
    "Credential",
]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _quoted(cell: str) -> list[str]:
    """The `code` spans of a cell, in order."""
    return re.findall(r"`([^`]*)`", cell)


def section_table(text: str, heading: str, header: list[str]) -> list[dict[str, str]]:
    """The first table under ``heading`` (up to the next heading of its level or above)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    assert heading in lines, f"docs/deploy.md has no {heading!r} section"
    start = lines.index(heading) + 1
    body: list[str] = []
    fenced = False
    for line in lines[start:]:
        fenced ^= line.startswith("```")
        if not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        body.append(line)
    first = next((i for i, line in enumerate(body) if line.startswith("|")), None)
    assert first is not None, f"the {heading!r} section has no table"
    table = []
    for line in body[first:]:
        if not line.startswith("|"):
            break
        table.append(line)
    assert _cells(table[0]) == header, f"{heading!r}: header {_cells(table[0])} is not {header}"
    assert set(table[1].replace("|", "").strip()) <= set("-: "), table[1]
    rows = []
    for line in table[2:]:
        cells = _cells(line)
        assert len(cells) == len(header), f"{heading!r}: a row of {len(cells)} cells: {line}"
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


@pytest.fixture(scope="module")
def doc() -> str:
    return DEPLOY_DOC.read_text(encoding="utf-8")


# ------------------------------------------------------------------------------- resources
def test_the_resource_table_lists_exactly_the_templates_resources(
    doc: str, resources: dict[str, Any]
) -> None:
    documented: dict[str, str] = {}
    for row in section_table(doc, RESOURCES_HEADING, RESOURCES_HEADER):
        ids = _quoted(row["Logical id"])
        assert ids, f"a resource row names no logical id: {row}"
        for logical_id in ids:
            assert logical_id not in documented, f"{logical_id} is in the resource table twice"
            documented[logical_id] = row["Type"]
        assert row["Purpose"], f"{ids}: no purpose"
    missing = sorted(set(resources) - set(documented))
    extra = sorted(set(documented) - set(resources))
    assert not missing and not extra, (
        f"resources of template.yaml missing from docs/deploy.md: {missing}; "
        f"resources in docs/deploy.md that template.yaml does not have: {extra}"
    )
    wrong = {
        logical_id: (cell, resources[logical_id]["Type"])
        for logical_id, cell in documented.items()
        if _quoted(cell) != [resources[logical_id]["Type"]]
    }
    assert not wrong, f"resource types differ from template.yaml (doc, template): {wrong}"


# ------------------------------------------------------------------------------ parameters
def _default(parameter: dict[str, Any]) -> str:
    value = parameter.get("Default")
    assert value is not None, "every parameter has a default (a guided deploy can skip it)"
    return '""' if value == "" else str(value)


def test_the_parameter_table_lists_every_parameter_with_its_default(
    doc: str, template: dict[str, Any]
) -> None:
    parameters = template["Parameters"]
    documented: dict[str, str] = {}
    for row in section_table(doc, PARAMETERS_HEADING, PARAMETERS_HEADER):
        names = _quoted(row["Parameter"])
        assert len(names) == 1, f"a parameter row names one parameter: {row}"
        assert names[0] not in documented, f"{names[0]} is in the parameter table twice"
        defaults = _quoted(row["Default"])
        assert len(defaults) == 1, f"{names[0]}: the default is one `code` span: {row['Default']!r}"
        documented[names[0]] = defaults[0]
        assert row["Meaning"], f"{names[0]}: no meaning"
    missing = sorted(set(parameters) - set(documented))
    extra = sorted(set(documented) - set(parameters))
    assert not missing and not extra, (
        f"parameters of template.yaml missing from docs/deploy.md: {missing}; "
        f"parameters in docs/deploy.md that template.yaml does not have: {extra}"
    )
    wrong = {
        name: (default, _default(parameters[name]))
        for name, default in documented.items()
        if default != _default(parameters[name])
    }
    assert not wrong, f"defaults differ from template.yaml (doc, template): {wrong}"


# ---------------------------------------------------------------------------- authentication
def _routes(resources: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(METHOD, path) -> the API Gateway authorizer of every route of ApiFunction."""
    default = resources["DurableApi"]["Properties"]["Auth"]["DefaultAuthorizer"]
    routes = {}
    for event in resources["ApiFunction"]["Properties"]["Events"].values():
        if event["Type"] != "Api":
            continue
        p = event["Properties"]
        routes[(p["Method"].upper(), p["Path"])] = p.get("Auth", {}).get("Authorizer", default)
    assert routes
    return routes


def _schemes() -> dict[tuple[str, str], set[str]]:
    document = json.loads(OPENAPI.read_text(encoding="utf-8"))
    default = document.get("security", [])
    return {
        (method.upper(), path): {
            name for requirement in operation.get("security", default) for name in requirement
        }
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def test_the_auth_table_states_each_routes_authentication(
    doc: str, resources: dict[str, Any]
) -> None:
    rows = section_table(doc, AUTH_HEADING, AUTH_HEADER)
    schemes = _schemes()
    used: set[int] = set()
    problems = []
    for (method, path), authorizer in sorted(_routes(resources).items()):
        matching = [
            i
            for i, row in enumerate(rows)
            for prefix in _quoted(row[AUTH_HEADER[0]])
            if _under(path, prefix)
        ]
        if len(matching) != 1:
            problems.append(f"{method} {path}: under {len(matching)} rows of the table, not 1")
            continue
        used.update(matching)
        row = rows[matching[0]]
        if _quoted(row["API Gateway auth"]) != [authorizer]:
            problems.append(
                f"{method} {path}: API Gateway auth is {authorizer}, not {row['API Gateway auth']}"
            )
        documented = schemes.get((method, path))
        if documented is None:
            problems.append(f"{method} {path}: not in docs/openapi.json")
        elif set(_quoted(row["OpenAPI scheme"])) != documented:
            problems.append(
                f"{method} {path}: docs/openapi.json's scheme is {sorted(documented)}, "
                f"not {row['OpenAPI scheme']}"
            )
    unused = [rows[i][AUTH_HEADER[0]] for i in range(len(rows)) if i not in used]
    assert not problems, "docs/deploy.md's auth table is wrong:\n" + "\n".join(problems)
    assert not unused, f"rows of the auth table that no route falls under: {unused}"


def test_the_page_names_every_output(doc: str, template: dict[str, Any]) -> None:
    missing = sorted(name for name in template["Outputs"] if f"`{name}`" not in doc)
    assert not missing, f"stack outputs docs/deploy.md does not name: {missing}"
