"""Builds the API reference from the docstrings (pdoc) and checks every internal link.

``make docs`` runs this into ``build/docs/``; ``tests/unit/test_docs_links.py`` runs the same
build into a temporary directory, so a broken link (in the generated HTML, in ``docs/*.md`` or
in ``README.md``) fails ``make test``.

Usage: ``python scripts/api_docs.py [OUTPUT_DIR]`` (default ``build/docs``). Exits 1 and lists
the broken links when there are any.
"""

from __future__ import annotations

import html.parser
import re
import sys
import urllib.parse
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The package root is the public API (its __all__); these submodules are the ones the docs
# tell users to import from as well (the harness, the model layer, operators' tooling), and
# the bases DurableContext inherits operations from (pdoc hides inherited members whose module
# is not documented: ctx.wait, ctx.wait_for_callback, ... would be missing).
MODULES = (
    "durable_agents",
    "durable_agents.engine.context_scope",
    "durable_agents_local.testing",
    "durable_agents.llm",
    "durable_agents.engine.tool_loop",
    "durable_agents.engine.memory_store",
    "durable_agents.core.serde",
    "durable_agents.retry",
    "durable_agents.plugins",
    "durable_agents.migrations",
    "durable_agents.admin.migration_commit",
    "durable_agents.aws.credentials",
)


def markdown_files(root: Path = ROOT) -> list[Path]:
    """The project's Markdown documentation: README.md and everything under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def build_reference(output_dir: Path) -> list[str]:
    """Renders the API reference for ``MODULES`` into ``output_dir``.

    Returns:
        The warnings pdoc emitted (annotations it could not evaluate, ...): shown, not fatal.
    """
    # pdoc is a dev dependency, needed only here.
    import pdoc
    import pdoc.render

    pdoc.render.configure(
        docformat="google",
        show_source=False,
        footer_text="durable-agents API reference (generated from the docstrings)",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*MODULES, output_directory=output_dir)
    return [str(w.message) for w in caught]


# ---------------------------------------------------------------------------------- links


@dataclass(frozen=True)
class BrokenLink:
    """A link whose target file or anchor does not exist."""

    source: Path
    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.target} ({self.reason})"


class _HtmlLinks(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for key in ("id", "name"):
            if values.get(key):
                self.ids.add(str(values[key]))
        if tag == "a" and values.get("href"):
            self.links.append(str(values["href"]))


def _html(path: Path) -> _HtmlLinks:
    parser = _HtmlLinks()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_MD_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_MD_REF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def _prose(text: str) -> str:
    # Links inside code are examples, not links.
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading (lower case, punctuation dropped, - for space).

    Example:
        >>> github_slug("Retries: presets & the SDK's `default`")
        'retries-presets--the-sdks-default'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file has: its headings' slugs (numbered when repeated)."""
    text = path.read_text(encoding="utf-8")
    anchors: set[str] = set(_HTML_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        slug = github_slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def markdown_links(path: Path) -> list[str]:
    """The link targets of a Markdown file (inline and reference links, outside code)."""
    prose = _prose(path.read_text(encoding="utf-8"))
    return _MD_LINK.findall(prose) + _MD_REF.findall(prose)


def _external(target: str) -> bool:
    return bool(urllib.parse.urlsplit(target).scheme) or target.startswith("//")


def _anchors_of(path: Path, cache: dict[Path, set[str] | None]) -> set[str] | None:
    """The anchors of a file, or None where they cannot be checked (source files, images)."""
    if path not in cache:
        if path.suffix == ".md":
            cache[path] = markdown_anchors(path)
        elif path.suffix == ".html":
            cache[path] = _html(path).ids
        else:
            cache[path] = None
    return cache[path]


def check_links(source: Path, targets: Iterable[str], root: Path) -> list[BrokenLink]:
    """Checks links found in ``source``: relative files must exist, anchors where checkable.

    Args:
        source: The file the links are in (relative targets are resolved from its folder).
        targets: The link targets (``href`` values or Markdown link destinations).
        root: Links may not leave this folder (``../../x`` out of the repository is broken).

    Returns:
        The broken links, empty when all resolve. External links (with a scheme) are not
        fetched: they are outside what a test can check offline.
    """
    broken: list[BrokenLink] = []
    cache: dict[Path, set[str] | None] = {}
    for target in targets:
        if _external(target):
            continue
        parts = urllib.parse.urlsplit(target)
        file_part = urllib.parse.unquote(parts.path)
        path = (source.parent / file_part).resolve() if file_part else source.resolve()
        if not path.is_relative_to(root.resolve()):
            broken.append(BrokenLink(source, target, "points outside the project"))
            continue
        if not path.exists():
            broken.append(BrokenLink(source, target, "no such file"))
            continue
        if parts.fragment and path.is_file():
            anchors = _anchors_of(path, cache)
            fragment = urllib.parse.unquote(parts.fragment)
            if anchors is not None and fragment not in anchors:
                broken.append(BrokenLink(source, target, f"no anchor #{fragment}"))
    return broken


def broken_links(reference_dir: Path | None, root: Path = ROOT) -> list[BrokenLink]:
    """Every broken internal link in the Markdown docs and, if given, the generated reference."""
    broken: list[BrokenLink] = []
    for md in markdown_files(root):
        broken += check_links(md, markdown_links(md), root)
    if reference_dir is not None:
        for page in sorted(reference_dir.rglob("*.html")):
            broken += check_links(page, _html(page).links, reference_dir)
    return broken


def main(argv: list[str]) -> int:
    """Builds the reference into ``argv[0]`` (default build/docs) and checks the links."""
    output_dir = Path(argv[0]) if argv else ROOT / "build" / "docs"
    for warning in build_reference(output_dir):
        print(f"pdoc: {warning}", file=sys.stderr)
    broken = broken_links(output_dir)
    for link in broken:
        print(f"broken link: {link}", file=sys.stderr)
    pages = len(list(output_dir.rglob("*.html")))
    print(f"API reference: {output_dir / 'index.html'} ({pages} pages)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
