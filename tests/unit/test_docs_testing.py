"""docs/testing.md's examples are executed, so what it says of the two modes cannot drift.

Each block runs in order in one namespace (the first holds the imports), as a reader would
paste them; each of the page's sections on a difference between the modes has its example.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def _sections() -> dict[str, list[str]]:
    """The page's ``###`` sections (and what precedes the first), each with its code blocks."""
    sections: dict[str, list[str]] = {}
    title = "(top)"
    for part in re.split(r"^(#{2,3} .*)$", DOC.read_text(), flags=re.MULTILINE):
        if re.match(r"#{2,3} ", part):
            title = part.lstrip("# ").strip()
            continue
        sections.setdefault(title, []).extend(
            re.findall(r"```python\n(.*?)```", part, flags=re.DOTALL)
        )
    return sections


def test_testing_doc_examples_run() -> None:
    namespace: dict[str, object] = {"__name__": "testing_doc"}
    number = 0
    for blocks in _sections().values():
        for block in blocks:
            exec(compile(block, f"{DOC}:block{number}", "exec"), namespace)
            number += 1
    assert number >= 10


def test_every_difference_has_an_example() -> None:
    sections = _sections()
    differences = [title for title in sections if title.startswith(("Code outside", "How many"))]
    assert differences, "the page lost its sections on the differences"
    start = list(sections).index("What differs between the two modes")
    end = list(sections).index(
        "Finding code outside operations whose effects change between replays"
    )
    between = list(sections)[start + 1 : end]
    assert len(between) >= 7
    for title in between:
        assert sections[title], f"section {title!r} has no executed example"
