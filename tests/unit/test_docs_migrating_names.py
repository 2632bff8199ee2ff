"""The migration guide names only what AWS's durable execution SDK has (issue 32).

Every name the guide's SDK column puts in code (a call, an attribute, a keyword, a class) must be
a public name of `aws-durable-execution-sdk-python` or its testing library, as pinned in
tests/fixtures/aws_durable_sdk_names.txt; where the benchmark environment (.venv-bench, `make
venv-bench`) has the SDK, the pinned list must be the SDK's own (`scripts/aws_sdk_names.py`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "migrating-from-aws-durable-functions.md"
PINNED = ROOT / "tests" / "fixtures" / "aws_durable_sdk_names.txt"
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"

SDK_COLUMNS = ("SDK", "AWS SDK", "SDK testing library")
# Names the SDK column uses that are not the SDK's: Python's own, and the Lambda service's API
# operations (the SDK calls them; they are not Python names of it).
NOT_THE_SDKS = {
    "True",
    "False",
    "None",
    "random",
    "uuid4",
    "datetime",
    "now",
    "SendDurableExecutionCallbackSuccess",
    "SendDurableExecutionCallbackFailure",
    "SendDurableExecutionCallbackHeartbeat",
}
IDENTIFIER = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)")


def sdk_cells(text: str) -> list[str]:
    """The first cell of every row of the tables whose first header is the SDK's."""
    cells: list[str] = []
    in_sdk_table = False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_sdk_table = False
            continue
        row = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if set(line) <= set("|-: "):
            continue
        if row[0] in SDK_COLUMNS:
            in_sdk_table = True
            continue
        if in_sdk_table:
            cells.append(row[0])
    return cells


def named(cell: str) -> set[str]:
    """The names a cell's code spans use as SDK names: called, dotted, keywords, classes."""
    found: set[str] = set()
    for span in re.findall(r"`([^`]+)`", cell):
        for match in IDENTIFIER.finditer(span):
            name = match.group(1)
            before, after = span[: match.start()], span[match.end() :]
            if name.startswith("_"):  # `on_x_start` / `_end`: a suffix, not a name
                continue
            if (
                before.endswith(".")
                or after.startswith(("(", "="))
                or name[0].isupper()
                or span.strip() == name
            ):
                found.add(name)
    return found


def test_the_guide_has_sdk_tables() -> None:
    cells = sdk_cells(GUIDE.read_text(encoding="utf-8"))
    assert len(cells) > 30
    assert "step" in set().union(*(named(c) for c in cells))


def test_every_sdk_name_in_the_guide_is_the_sdks() -> None:
    pinned = set(PINNED.read_text(encoding="utf-8").split())
    unknown = {
        name: cell
        for cell in sdk_cells(GUIDE.read_text(encoding="utf-8"))
        for name in named(cell)
        if name not in pinned and name not in NOT_THE_SDKS
    }
    assert not unknown, "the guide names what the SDK does not have:\n" + "\n".join(
        f"  {name}: {cell[:120]}" for name, cell in sorted(unknown.items())
    )


def test_a_name_the_sdk_lacks_is_caught() -> None:
    cell = "`DurableExecutionPlugin` hooks: `on_execution_start` / `_end`, `context.step(func)`"
    assert named(cell) == {"DurableExecutionPlugin", "on_execution_start", "step"}


def test_the_pinned_names_are_the_sdks_own() -> None:
    if not BENCH_PYTHON.exists():
        pytest.skip("no .venv-bench with the SDK (make venv-bench): the pinned list is used as is")
    listed = subprocess.run(
        [str(BENCH_PYTHON), str(ROOT / "scripts" / "aws_sdk_names.py")],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.split()
    assert listed == PINNED.read_text(encoding="utf-8").split(), (
        "the SDK in .venv-bench differs from the pinned list: regenerate it with `.venv-bench/"
        "bin/python scripts/aws_sdk_names.py > tests/fixtures/aws_durable_sdk_names.txt` and "
        "check the guide"
    )
