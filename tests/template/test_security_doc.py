"""docs/security.md names the tests that prove each control: those tests must exist.

A threat model whose "proved by" column points at renamed or deleted tests proves nothing; this
checks every ``tests/...py`` and ``tests/...py::test_name`` reference (a bare ``::test_name``
refers to the file named last before it).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"^(tests/[\w/]+\.py)?(?:::(test_\w+))?$")


def references(markdown: str) -> list[tuple[str, str | None]]:
    """(file, test function or None) for every code span that names a test."""
    found: list[tuple[str, str | None]] = []
    current: str | None = None
    for span in re.findall(r"`([^`\n]+)`", markdown):
        match = REFERENCE.match(span)
        if not match or not any(match.groups()):
            continue
        current = match.group(1) or current
        assert current is not None, f"{span!r} names a test before any file"
        found.append((current, match.group(2)))
    return found


def test_every_test_the_security_doc_names_exists() -> None:
    refs = references((ROOT / "docs" / "security.md").read_text())
    assert len(refs) >= 20  # the threat model's table was found
    for path, name in refs:
        source = ROOT / path
        assert source.is_file(), f"docs/security.md names {path}, which does not exist"
        if name is not None:
            assert f"def {name}(" in source.read_text(), f"{path} has no {name}"


def test_a_bare_test_name_refers_to_the_file_before_it() -> None:
    doc = "`tests/unit/a.py::test_x`, `::test_y`; `tests/b.py` and `make test`"
    assert references(doc) == [
        ("tests/unit/a.py", "test_x"),
        ("tests/unit/a.py", "test_y"),
        ("tests/b.py", None),
    ]
