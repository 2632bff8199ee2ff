"""The library's shape (docs/architecture.md): few top-level entries, no cycle between them.

Every import counts: module level, under ``TYPE_CHECKING`` and inside functions (a lazy import
that dodges a cycle at run time is still an arrow). The layer contracts themselves are
``.importlinter`` (``make lint``); this test also runs where import-linter is not installed,
and names the cycle when there is one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "layers" / "runtime" / "durable_agents"


def _entries() -> list[str]:
    return sorted(
        p.name
        for p in LIBRARY.iterdir()
        if not p.name.startswith(("_", "."))
        and (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    )


def _node(module: str, depth: int = 1) -> str | None:
    """``module`` folded to its package ``depth`` levels below the root (or itself if shallower)."""
    parts = module.split(".")
    if parts[0] != "durable_agents" or len(parts) < 2:
        return None
    return ".".join(parts[1 : 1 + depth])


def _edges(depth: int = 1) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in LIBRARY.rglob("*.py"):
        module = ".".join(path.relative_to(LIBRARY.parent).with_suffix("").parts)
        source = _node(module.removesuffix(".__init__"), depth)
        if source is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                found = _node(target, depth)
                if found is not None and found != source:
                    edges.setdefault(source, set()).add(found)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_the_librarys_packages() -> None:
    assert _cycles(_edges()) == []


def test_no_import_cycle_at_any_depth() -> None:
    # Depth 2 folds ``engine.operations.*`` into one node beside ``engine.context`` (a module):
    # the operations take the execution state (OperationScope), never the façade that
    # dispatches to them. Deeper, every module is its own node.
    deepest = max(len(p.relative_to(LIBRARY).parts) for p in LIBRARY.rglob("*.py"))
    for depth in range(2, deepest + 1):
        assert _cycles(_edges(depth)) == [], depth


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"engine": {"journal"}, "journal": {"core", "engine"}}) == [
        ["engine", "journal"]
    ]


def test_the_top_level_shows_the_layers() -> None:
    assert len(_entries()) <= 15, _entries()
    assert {"core", "journal", "engine", "aws", "admin", "auth"} <= set(_entries())


def test_the_library_never_imports_laptop_only_code() -> None:
    offending = [
        str(path.relative_to(ROOT))
        for path in LIBRARY.rglob("*.py")
        if "durable_agents_local"
        in {
            name
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for name in (
                [a.name.split(".")[0] for a in node.names]
                if isinstance(node, ast.Import)
                else [(node.module or "").split(".")[0]]
            )
        }
    ]
    assert offending == []
