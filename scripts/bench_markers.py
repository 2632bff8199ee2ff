"""Where a benchmark script writes its results in a Markdown file: between its two markers.

Kept apart from ``bench_common`` (which imports the runtime and sets up a moto environment) so
that every script, ``bench_peers``' children under ``.venv-bench`` included, can use it.
"""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, start: str, end: str, body: str) -> None:
    """Replaces what ``path`` holds between the ``start`` and ``end`` markers with ``body``.

    A file without the markers gets them, around ``body``, at its end (a file that does not
    exist yet: just the section).

    Raises:
        OSError: If the file cannot be read or written.
    """
    doc = path.read_text() if path.exists() else ""
    head, _, rest = doc.partition(start)
    _, _, tail = rest.partition(end)
    path.write_text(f"{head}{start}\n{body.rstrip(chr(10))}\n{end}{tail}")
