"""Benchmarks of the durable-agents runtime: AWS request counts per step and runtime overhead.

Run ``python scripts/bench.py`` (``make bench``). Options:

* ``--quick``          fewer repetitions and smaller runs (about half a minute).
* ``--markdown PATH``  also write the results as Markdown; if PATH already holds the
  ``<!-- bench:results:start -->`` / ``<!-- bench:results:end -->`` markers (as
  docs/benchmarks.md does), only the text between them is replaced.
* ``--profile``        print cProfile summaries of a continuous run and of a faithful replay.

What is measured:

1. Requests per plain step on DynamoDB + EventBridge (in-process moto, real boto3 clients,
   counted with botocore ``before-call`` hooks). Exact and machine-independent.
2. Journal Query pages per invocation once the journal outgrows one 1 MB Query page.
3. Runtime overhead per step in continuous mode on the in-memory journal (wall time).
4. Faithful mode (one step per invocation, replay from the top) on the in-memory journal:
   total time and time per invocation against journal length (wall time).
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Sequence
from pathlib import Path

from bench_aws import bench_query_pages, bench_request_counts
from bench_common import MARK_END, MARK_START, Config, Table
from bench_memory import bench_continuous, bench_faithful, profile_summary

# -- main --------------------------------------------------------------------------------------


def machine_info() -> Table:
    """Python, platform and CPU count."""
    table = Table("Machine", ["python", "implementation", "platform", "CPUs"])
    table.add(
        platform.python_version(),
        platform.python_implementation(),
        platform.platform(),
        os.cpu_count(),
    )
    return table


def render_markdown(tables: Sequence[Table], command: str) -> str:
    """The results section of docs/benchmarks.md."""
    parts = ["## Results", "", f"Produced by `{command}`.", ""]
    parts += [t.markdown() + "\n" for t in tables]
    return "\n".join(parts).rstrip() + "\n"


def write_markdown(path: Path, section: str) -> None:
    """Writes ``section`` between the result markers of ``path`` (or as the whole file)."""
    if path.exists():
        text = path.read_text()
        start, end = text.find(MARK_START), text.find(MARK_END)
        if 0 <= start < end:
            path.write_text(text[: start + len(MARK_START)] + "\n" + section + text[end:])
            return
    path.write_text(f"{MARK_START}\n{section}{MARK_END}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmarks and prints the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and smaller runs")
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="PATH",
        help="write the results section to PATH (e.g. docs/benchmarks.md)",
    )
    parser.add_argument("--profile", action="store_true", help="print cProfile summaries")
    args = parser.parse_args(argv)
    cfg = Config.make(args.quick)
    command = "python scripts/bench.py" + (" --quick" if args.quick else "")

    tables: list[Table] = []

    def show(new: Table | list[Table]) -> None:
        for table in new if isinstance(new, list) else [new]:
            tables.append(table)
            print(table.text(), end="\n\n", flush=True)

    show(machine_info())
    show(bench_request_counts(cfg))
    show(bench_query_pages(cfg))
    show(bench_continuous(cfg))
    show(bench_faithful(cfg))
    if args.profile:
        print(profile_summary(cfg))
    if args.markdown:
        write_markdown(args.markdown, render_markdown(tables, command))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
