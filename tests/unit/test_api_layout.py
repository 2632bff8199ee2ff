"""The Api package's shape: routes never import the app that mounts them, nor private names.

``api.app`` includes the route groups (``api.routes``); what they need from it goes down, to
``api.services`` and the helpers beside the routes. Every import counts: module level, under
``TYPE_CHECKING``, inside functions (a lazy import that dodges a cycle is still an arrow).
``.importlinter`` states the same contract (``make lint``); this test also names the line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
API = FUNCTIONS / "api"


def _imports(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """Each import in ``path``: its line, the absolute module and the names it takes."""
    package = list(path.relative_to(FUNCTIONS).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module, [alias.name for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", ""))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            yield node.lineno, str(node.args[0].value), []


def test_no_route_module_imports_the_app() -> None:
    found = [
        f"{path.relative_to(FUNCTIONS)}:{line}: {module}"
        for path in sorted((API / "routes").rglob("*.py"))
        for line, module, names in _imports(path)
        if any(
            named == "api.app" or named.startswith("api.app.")
            for named in (module, *(f"{module}.{name}" for name in names))
        )
    ]
    assert found == [], "api.routes imports the app that mounts it"


def test_no_module_of_the_api_imports_another_ones_private_names() -> None:
    found = [
        f"{path.relative_to(FUNCTIONS)}:{line}: {name} from {module}"
        for path in sorted(API.rglob("*.py"))
        for line, module, names in _imports(path)
        if module.split(".")[0] == "api"
        for name in names
        if name.startswith("_")
    ]
    assert found == [], "make what another module needs public (in a module both import)"
