"""The API reference builds from the docstrings, and no internal link in the docs is broken.

This is what ``make docs`` runs (scripts/api_docs.py), built into a temporary directory so
``make test`` catches a docstring pdoc cannot render, a renamed heading that README.md or a
page under docs/ still links to, or a link to a file that moved.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import api_docs  # noqa: E402

import durable_agents  # noqa: E402


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("api-reference")
    api_docs.build_reference(out)
    return out


def test_reference_documents_every_export(reference: Path) -> None:
    root_page = api_docs._html(reference / "durable_agents.html")
    missing = [name for name in durable_agents.__all__ if name not in root_page.ids]
    assert missing == []
    # ctx's operations are documented, the waits on the base DurableContext inherits them from.
    for operation in ("step", "parallel", "map", "invoke", "run_in_child_context", "llm"):
        assert f"DurableContext.{operation}" in root_page.ids
    # The waits and the run's values are DurableContext's own methods (one class, no mixins).
    for operation in ("wait", "create_callback", "wait_for_callback", "wait_for_condition"):
        assert f"DurableContext.{operation}" in root_page.ids
    for operation in ("now", "uuid", "random", "memory", "prompt", "model_config"):
        assert f"DurableContext.{operation}" in root_page.ids
    assert (reference / "index.html").exists()
    for module in api_docs.MODULES:
        assert (reference / f"{module.replace('.', '/')}.html").exists(), module


def test_no_internal_link_is_broken(reference: Path) -> None:
    broken = api_docs.broken_links(reference)
    assert broken == [], "\n".join(map(str, broken))


def test_the_link_checker_finds_broken_links(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# Title\n\n## Repeated\n\n## Repeated\n\n"
        "[ok](b.md#the-heading) [ok](#repeated-1) [ok](#title) [web](https://example.com/x)\n"
        "[gone](missing.md) [no anchor](b.md#nope) [self](#absent) [out](../../etc/passwd)\n"
        "`[code](ignored.md)`\n\n```\n[fenced](ignored.md)\n```\n"
    )
    (tmp_path / "docs" / "b.md").write_text("## The heading\n")
    (tmp_path / "README.md").write_text("[docs](docs/a.md#repeated) [bad](docs/c.md)\n")
    broken = {(link.source.name, link.target) for link in api_docs.broken_links(None, tmp_path)}
    assert broken == {
        ("a.md", "missing.md"),
        ("a.md", "b.md#nope"),
        ("a.md", "#absent"),
        ("a.md", "../../etc/passwd"),
        ("README.md", "docs/c.md"),
    }


def test_the_link_checker_checks_html_ids(tmp_path: Path) -> None:
    (tmp_path / "x.html").write_text(
        '<a id="here"></a><a href="#here">ok</a><a href="#gone">bad</a>'
        '<a href="y.html#there">ok</a><a href="y.html#nowhere">bad</a><a href="z.html">bad</a>'
    )
    (tmp_path / "y.html").write_text('<section id="there"></section>')
    links = api_docs._html(tmp_path / "x.html").links
    broken = {link.target for link in api_docs.check_links(tmp_path / "x.html", links, tmp_path)}
    assert broken == {"#gone", "y.html#nowhere", "z.html"}
