"""Side by side: the same trivial N-step workflow on durable_agents and on its peers.

Run ``python scripts/bench_peers.py`` (``make bench``, which first creates ``.venv-bench``
with the peers and matplotlib: ``make venv-bench``). Runtimes:

* ``aws-local``: the AWS durable functions local runner, in memory
  (``aws-durable-execution-sdk-python-testing``'s ``DurableFunctionTestRunner``);
* ``dbos-sqlite``: DBOS Transact on a fresh SQLite file;
* ``da-continuous``, ``da-faithful``: the durable_agents harness,
  ``AgentTestRunner(agent, mode=...)`` on the in-memory journal;
* ``da-sticky``: faithful mode with sticky continuation (``sticky=True``): one operation per
  invocation as on Lambda, the agent parked between invocations (``STICKY_RUNS``, opt-in).

Every measurement is its own process (``--child RUNTIME N``), so imports, caches and garbage
of one runtime never reach another; rounds alternate the runtimes (the order rotates each
round) and the table shows medians. Peers run with ``.venv-bench``'s Python, durable_agents
with this one. A runtime whose package is missing is skipped with a message. Faithful mode
replays from the top per step (quadratic): a size whose time, predicted from the size below,
is over ``--budget`` seconds is not run and its prediction is shown instead.

Options: ``--sizes 100,1000,10000``, ``--rounds 3``, ``--budget 60``, ``--markdown PATH``
(replaces the text between ``<!-- bench:peers:start -->`` and ``<!-- bench:peers:end -->``),
``--plot PATH`` (a PNG, drawn by ``.venv-bench``'s matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_markers import write_section

ROOT = Path(__file__).resolve().parent.parent
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
RUNTIMES = ("aws-local", "dbos-sqlite", "da-continuous", "da-faithful", "da-sticky")
PEERS = {"aws-local": "aws_durable_execution_sdk_python_testing", "dbos-sqlite": "dbos"}
LABELS = {
    "aws-local": "AWS durable functions local runner (in memory)",
    "dbos-sqlite": "DBOS Transact on SQLite",
    "da-continuous": "durable_agents harness, continuous",
    "da-faithful": "durable_agents harness, faithful",
    "da-sticky": "durable_agents harness, faithful + sticky",
}
START, END = "<!-- bench:peers:start -->", "<!-- bench:peers:end -->"
BASELINE = "da-continuous"


# -- one measurement, in its own process ---------------------------------------------------------


def _aws_local(steps: int) -> float:
    from aws_durable_execution_sdk_python import durable_execution
    from aws_durable_execution_sdk_python_testing.runner import (
        DurableFunctionTestRunner,
    )

    @durable_execution
    def handler(event: Any, context: Any) -> int:
        for i in range(steps):
            context.step(lambda _step_ctx, i=i: i, name=f"s{i}")
        return steps

    with DurableFunctionTestRunner(handler=handler, execution_timeout=3600) as runner:
        began = time.perf_counter()
        result = runner.run(input="{}", execution_timeout=3600)
        elapsed = time.perf_counter() - began
    if str(result.result) != str(steps):
        raise RuntimeError(f"aws-local ended {result.status}: {result.result!r}")
    return elapsed


def _dbos_sqlite(steps: int) -> float:
    from dbos import DBOS

    @DBOS.step()
    def step(i: int) -> int:
        return i

    @DBOS.workflow()
    def workflow(n: int) -> int:
        for i in range(n):
            step(i)
        return n

    with tempfile.TemporaryDirectory(prefix="bench-dbos-") as tmp:
        DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{tmp}/dbos.sqlite"})
        DBOS.launch()
        try:
            began = time.perf_counter()
            out = workflow(steps)
            elapsed = time.perf_counter() - began
        finally:
            DBOS.destroy()
    if out != steps:
        raise RuntimeError(f"dbos-sqlite returned {out!r}")
    return elapsed


def harness_seconds(steps: int, mode: str, prepare: Callable[[Any], None] | None = None) -> float:
    """Seconds one run of ``steps`` trivial steps takes in the durable_agents harness.

    Args:
        steps: The run's length.
        mode: ``continuous``, ``faithful`` or ``sticky`` (faithful, with the agent parked
            between invocations: ``STICKY_RUNS``, ADR 0017, opt-in since ADR 0021).
        prepare: Given the ``AgentTestRunner`` before the run starts (``bench_sticky_floor``
            replaces its runtime's ``execute``).

    Raises:
        RuntimeError: If the run did not succeed.
    """
    sys.path.insert(0, str(ROOT / "layers" / "runtime"))
    from durable_agents import AgentRegistry, agent
    from durable_agents_local.testing import AgentTestRunner

    @agent(name="bench", version="1", registry=AgentRegistry())
    def bench(ctx: Any, _: int) -> int:
        for i in range(steps):
            ctx.step(lambda i=i: i, name=f"s{i}")
        return steps

    sticky = mode == "sticky"
    runner = AgentTestRunner(bench, mode="faithful" if sticky else mode, sticky=sticky)  # type: ignore[arg-type]
    if prepare is not None:
        prepare(runner)
    began = time.perf_counter()
    result = runner.run(0)
    elapsed = time.perf_counter() - began
    if result.status != "SUCCEEDED":
        raise RuntimeError(f"{mode} ended {result.status}")
    return elapsed


def child(runtime: str, steps: int) -> float:
    """Seconds one run of ``steps`` trivial steps takes on ``runtime`` (this process)."""
    if runtime == "aws-local":
        return _aws_local(steps)
    if runtime == "dbos-sqlite":
        return _dbos_sqlite(steps)
    return harness_seconds(steps, runtime.removeprefix("da-"))


# -- the orchestra -------------------------------------------------------------------------------


def _python(runtime: str) -> Path | None:
    """The interpreter for ``runtime``, or None (with a message) if it cannot run here."""
    if runtime not in PEERS:
        return Path(sys.executable)
    if not BENCH_PYTHON.exists():
        print(f"skip {runtime}: no {BENCH_PYTHON} (make venv-bench)", flush=True)
        return None
    probe = subprocess.run(
        [str(BENCH_PYTHON), "-c", f"import {PEERS[runtime]}"], capture_output=True, check=False
    )
    if probe.returncode:
        print(f"skip {runtime}: {PEERS[runtime]} is not installed in .venv-bench", flush=True)
        return None
    return BENCH_PYTHON


def measure_once(python: Path, runtime: str, steps: int, timeout: float) -> float | None:
    """One child process; its seconds, or None if it failed or ran out of time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "runtime")])}
    try:
        done = subprocess.run(
            [str(python), __file__, "--child", runtime, str(steps)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        print(f"  {runtime} {steps}: over {timeout:.0f} s, stopped", flush=True)
        return None
    if done.returncode:
        print(f"  {runtime} {steps}: failed\n{done.stderr[-2000:]}", flush=True)
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def run_all(sizes: list[int], rounds: int, budget: float) -> dict[str, Any]:
    """Every runtime at every size, ``rounds`` times, alternated; medians and predictions."""
    pythons = {r: p for r in RUNTIMES if (p := _python(r)) is not None}
    samples: dict[str, dict[int, list[float]]] = {r: {n: [] for n in sizes} for r in pythons}
    predicted: dict[str, dict[int, float]] = {r: {} for r in pythons}
    for index in range(rounds):
        order = list(pythons)[index % len(pythons) :] + list(pythons)[: index % len(pythons)]
        for steps in sizes:
            for runtime in order:
                guess = _predict(samples[runtime], steps, runtime)
                if guess is not None and guess > budget:
                    predicted[runtime][steps] = guess
                    continue
                seconds = measure_once(pythons[runtime], runtime, steps, timeout=budget * 3)
                if seconds is not None:
                    samples[runtime][steps].append(seconds)
                    print(
                        f"  round {index + 1} {runtime:14} {steps:6} {seconds:9.3f} s", flush=True
                    )
    return {"sizes": sizes, "rounds": rounds, "samples": samples, "predicted": predicted}


def _predict(done: dict[int, list[float]], steps: int, runtime: str) -> float | None:
    """Seconds ``steps`` would take, from the largest size measured below it (quadratic for
    faithful mode, linear otherwise); None if nothing smaller was measured.
    """
    below = [n for n, s in done.items() if n < steps and s]
    if not below:
        return None
    n = max(below)
    power = 2 if runtime == "da-faithful" else 1
    return statistics.median(done[n]) * (steps / n) ** power


def markdown(results: dict[str, Any]) -> str:
    """The table of medians and ratios."""
    sizes: list[int] = results["sizes"]
    samples, predicted = results["samples"], results["predicted"]
    head = "| runtime | " + " | ".join(f"{n:,} steps (s)" for n in sizes) + " |"
    rows = [head, "|---|" + "---|" * len(sizes)]
    medians: dict[str, dict[int, float]] = {}
    for runtime, by_size in samples.items():
        cells = []
        for n in sizes:
            values = by_size.get(n) or by_size.get(str(n)) or []
            if values:
                medians.setdefault(runtime, {})[n] = statistics.median(values)
                cells.append(f"{statistics.median(values):,.3f} ({len(values)} runs)")
            elif n in predicted.get(runtime, {}) or str(n) in predicted.get(runtime, {}):
                guess = predicted[runtime].get(n, predicted[runtime].get(str(n)))
                cells.append(f"~{guess:,.0f} (predicted, not run)")
            else:
                cells.append("-")
        rows.append(f"| {LABELS[runtime]} | " + " | ".join(cells) + " |")
    ratio_rows = [
        "| runtime | " + " | ".join(f"{n:,} steps" for n in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    base = medians.get(BASELINE, {})
    for runtime, by_size in medians.items():
        cells = [
            f"{by_size[n] / base[n]:,.2f}x" if n in by_size and n in base else "-" for n in sizes
        ]
        ratio_rows.append(f"| {LABELS[runtime]} | " + " | ".join(cells) + " |")
    return "\n".join(
        [
            f"Medians of {results['rounds']} alternated rounds, one process per measurement; "
            f"python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.platform()}.",
            "",
            *rows,
            "",
            f"Time relative to {LABELS[BASELINE]} (lower is faster):",
            "",
            *ratio_rows,
        ]
    )


def plot(results_path: Path, png: Path) -> None:
    """Draws the medians (log-log) into ``png``; runs in ``.venv-bench`` (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = json.loads(results_path.read_text())
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for runtime, by_size in results["samples"].items():
        points = sorted((int(n), statistics.median(v)) for n, v in by_size.items() if v)
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=LABELS[runtime])
        guesses = sorted((int(n), s) for n, s in results["predicted"].get(runtime, {}).items())
        if points and guesses:
            line = [points[-1], *guesses]
            ax.plot(*zip(*line, strict=True), linestyle=":", color=ax.lines[-1].get_color())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steps in the run")
    ax.set_ylabel("seconds per run (median)")
    ax.set_title("One run of N trivial steps (dotted: predicted, not run)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", nargs=2, metavar=("RUNTIME", "STEPS"))
    parser.add_argument("--draw", nargs=2, metavar=("RESULTS_JSON", "PNG"), help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--save", type=Path, help="also write the raw results as JSON")
    parser.add_argument("--load", type=Path, help="render saved results instead of measuring")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps({"seconds": child(args.child[0], int(args.child[1]))}))
        return 0
    if args.draw:
        plot(Path(args.draw[0]), Path(args.draw[1]))
        return 0
    if args.load:
        results = _loaded(json.loads(args.load.read_text()))
    else:
        results = run_all([int(n) for n in args.sizes.split(",")], args.rounds, args.budget)
    if args.save:
        args.save.write_text(json.dumps(results, indent=1))
    text = markdown(results)
    print(text)
    if args.markdown:
        write_section(args.markdown, START, END, text)
    if args.plot:
        if BENCH_PYTHON.exists():
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tmp:
                json.dump(results, tmp)
            draw = [str(BENCH_PYTHON), __file__, "--draw", tmp.name, str(args.plot)]
            subprocess.run(draw, check=True)
            os.unlink(tmp.name)
            print(f"wrote {args.plot}")
        else:
            print(f"no plot: no {BENCH_PYTHON} (make venv-bench)")
    return 0


def _loaded(raw: dict[str, Any]) -> dict[str, Any]:
    """Saved results with their sizes as numbers again (JSON keys are strings)."""
    return {
        **raw,
        "samples": {r: {int(n): v for n, v in d.items()} for r, d in raw["samples"].items()},
        "predicted": {r: {int(n): v for n, v in d.items()} for r, d in raw["predicted"].items()},
    }


if __name__ == "__main__":
    sys.exit(main())
