"""Instructions per step of the durable_agents harness, counted by valgrind: exact under any load.

Run ``python scripts/bench_instructions.py`` (part of ``make bench``; it needs ``valgrind`` on
the PATH and says so if it is missing). Wall-clock ratios on a shared machine move by up to 2x
between identical runs (``docs/benchmarks.md``); the number of instructions a run executes does
not (``PYTHONHASHSEED=0``, one process per count, callgrind's ``Collected`` total).

Each figure is a difference of two whole runs of ``bench_peers.py --child MODE N`` (the same
trivial N-step agent as the side-by-side table), so the interpreter's start, the imports and
the harness's setup cancel out:

* per step, continuous and sticky: ``(I(2N) - I(N)) / N``;
* faithful mode, replaying every invocation: its excess over sticky at ``N`` and ``2N`` is
  ``x * replayed(N) + y * N`` (``replayed(N) = N (N - 1) / 2`` operations replayed in all),
  solved for ``x``, the instructions of one replayed operation (the agent's own loop
  included), and ``y``, what an invocation costs over a sticky one besides its replay (setting
  the replay up, less the parked agent's hand-over).

Options: ``--steps 200`` (N), ``--markdown PATH`` (replaces the text between
``<!-- bench:instructions:start -->`` and ``<!-- bench:instructions:end -->``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_markers import write_section

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- bench:instructions:start -->", "<!-- bench:instructions:end -->"
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def collected(valgrind_stderr: str) -> int:
    """The instruction total callgrind reports at exit.

    Raises:
        ValueError: If the output holds no ``Collected`` line (valgrind failed).
    """
    found = _COLLECTED.search(valgrind_stderr)
    if found is None:
        raise ValueError(f"no instruction count in valgrind's output: {valgrind_stderr[-400:]!r}")
    return int(found.group(1))


def count(mode: str, steps: int) -> int:
    """Instructions of one process running ``bench_peers.py --child da-MODE STEPS``.

    Raises:
        ValueError: If valgrind did not report a count.
        subprocess.CalledProcessError: If the run failed.
    """
    env = dict(os.environ, PYTHONHASHSEED="0")
    paths = [str(ROOT / "layers" / "runtime"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={Path(scratch) / 'out'}",
            sys.executable,
            str(ROOT / "scripts" / "bench_peers.py"),
            "--child",
            f"da-{mode}",
            str(steps),
        ]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return collected(done.stderr)


def replayed(steps: int) -> int:
    """Operations a faithful run of ``steps`` steps replays: invocation k replays k - 1."""
    return steps * (steps - 1) // 2


def per_step(small: int, large: int, steps: int) -> float:
    """Instructions per step from whole runs of ``steps`` and ``2 * steps`` steps."""
    return (large - small) / steps


def replay_costs(excess_small: int, excess_large: int, steps: int) -> tuple[float, float]:
    """``(per replayed operation, per invocation)`` from faithful's excess over sticky.

    The excess at ``n`` steps is ``x * replayed(n) + y * n``; given at ``steps`` and
    ``2 * steps``, the two equations are solved for ``x`` and ``y``.
    """
    n1, n2 = steps, 2 * steps
    r1, r2 = replayed(n1), replayed(n2)
    determinant = r1 * n2 - r2 * n1
    x = (excess_small * n2 - excess_large * n1) / determinant
    y = (r1 * excess_large - r2 * excess_small) / determinant
    return x, y


def measure(steps: int) -> dict[str, float]:
    """Every figure of the table, from six counted runs."""
    runs = {
        (mode, n): count(mode, n)
        for mode in ("continuous", "sticky", "faithful")
        for n in (steps, 2 * steps)
    }
    for (mode, n), total in sorted(runs.items()):
        print(f"  {mode:10s} {n:6d} steps: {total:,} instructions", file=sys.stderr)
    continuous = per_step(runs["continuous", steps], runs["continuous", 2 * steps], steps)
    sticky = per_step(runs["sticky", steps], runs["sticky", 2 * steps], steps)
    excess_small = runs["faithful", steps] - runs["sticky", steps]
    excess_large = runs["faithful", 2 * steps] - runs["sticky", 2 * steps]
    per_op, per_invocation = replay_costs(excess_small, excess_large, steps)
    return {
        "steps": steps,
        "continuous": continuous,
        "sticky": sticky,
        "replayed_operation": per_op,
        "replay_setup": per_invocation,
    }


def markdown(figures: dict[str, float]) -> str:
    """The table ``docs/benchmarks.md`` shows."""
    n = int(figures["steps"])
    continuous, sticky = figures["continuous"], figures["sticky"]
    at_1000 = sticky + figures["replay_setup"] + figures["replayed_operation"] * 999 / 2
    rows = [
        f"Instructions (callgrind, `PYTHONHASHSEED=0`), from runs of {n:,} and {2 * n:,} steps;"
        f" python {sys.version.split()[0]}.",
        "",
        "| figure | instructions |",
        "|---|---|",
        f"| a plain step, continuous mode | {continuous:,.0f} |",
        f"| a plain step, faithful + sticky (one invocation each) | {sticky:,.0f} |",
        f"| sticky against continuous | {sticky / continuous:.2f}x |",
        f"| one replayed operation, faithful mode (the agent's loop included) |"
        f" {figures['replayed_operation']:,.0f} |",
        f"| an invocation's cost over a sticky one, its replay aside, faithful mode |"
        f" {figures['replay_setup']:,.0f} |",
        f"| a step of a 1,000-step faithful run, on average (predicted) | {at_1000:,.0f} |",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("no valgrind on the PATH: instruction counts skipped (apt-get install valgrind)")
        return 0
    text = markdown(measure(args.steps))
    print(text)
    if args.markdown:
        write_section(args.markdown, START, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
