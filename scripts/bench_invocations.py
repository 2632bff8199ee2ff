"""Sticky continuation and invocation budgets: time per step, and requests and cost per run.

Run ``python scripts/bench_invocations.py`` (part of ``make bench``). Two measurements:

* **Time per step** of an N-step run of trivial steps on the in-memory journal, driven by the
  faithful harness (one ``Runtime.execute`` per ``Step Ready``, as the StepRunner), in four
  ways: ``continuous`` (the whole run in one invocation: no replay at all, the floor),
  ``faithful`` (one operation per invocation, the journal replayed every time), ``sticky``
  (one operation per invocation, the agent parked between invocations: what a warm Lambda
  container does by default) and ``sticky, 10 per invocation`` (``InvocationBudget
  (operations=10)`` as well). Each measurement is its own process; rounds alternate the
  modes; medians are shown. Faithful mode is quadratic: a size predicted to take over
  ``--budget`` seconds is not run (its prediction is shown).
* **Requests and cost per run** of 100 plain steps on DynamoDB and EventBridge (moto, every
  request billed by ``bench_billing.Ledger``) with 1, 10 and 100 operations per invocation:
  exact figures, any machine (a warm container's load is one Query of the journal's tail,
  whose header echo says the header it keeps is current: ADR 0015, ADR 0019).

Options: ``--sizes 100,1000,10000``, ``--rounds 3``, ``--budget 60``, ``--markdown PATH``
(replaces the text between ``<!-- bench:invocations:start -->`` and
``<!-- bench:invocations:end -->``), ``--quick``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_markers import write_section

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "layers" / "runtime"))
sys.path.insert(0, str(ROOT / "scripts"))

MODES = ("continuous", "faithful", "sticky", "sticky-10")
LABELS = {
    "continuous": "continuous (one invocation)",
    "faithful": "faithful, replayed every invocation",
    "sticky": "faithful + sticky (StepRunner opt-in, ADR 0021)",
    "sticky-10": "faithful + sticky, 10 operations per invocation",
}
START, END = "<!-- bench:invocations:start -->", "<!-- bench:invocations:end -->"


def child(mode: str, steps: int) -> dict[str, float]:
    """One run of ``steps`` trivial steps in ``mode`` (this process): seconds, wall and CPU."""
    from durable_agents import AgentRegistry, InvocationBudget, agent
    from durable_agents_local.testing import AgentTestRunner

    budget = InvocationBudget(operations=10 if mode == "sticky-10" else 1)

    @agent(name="bench", version="1", registry=AgentRegistry(), invocation_budget=budget)
    def bench(ctx: Any, _: int) -> int:
        for i in range(steps):
            ctx.step(lambda i=i: i, name=f"s{i}")
        return steps

    sticky = mode.startswith("sticky")
    runner = AgentTestRunner(
        bench,
        mode="continuous" if mode == "continuous" else "faithful",
        sticky=sticky,
        max_invocations=steps + 10,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    result = runner.run(0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if result.status != "SUCCEEDED":
        raise RuntimeError(f"{mode} ended {result.status}")
    return {"wall": wall, "cpu": cpu}


def _measure(mode: str, steps: int, timeout: float) -> dict[str, float] | None:
    command = [sys.executable, __file__, "--child", mode, str(steps)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    parsed: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def times(sizes: list[int], rounds: int, budget: float) -> dict[str, dict[int, Any]]:
    """Per mode and size: the measured runs (wall and CPU seconds) or a prediction."""
    samples: dict[str, dict[int, list[dict[str, float]]]] = {m: {} for m in MODES}
    predicted: dict[str, dict[int, float]] = {m: {} for m in MODES}
    for size in sizes:
        for r in range(rounds):
            order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
            for mode in order:
                guess = _predict(samples[mode], size, mode)
                if guess is not None and guess > budget:
                    predicted[mode][size] = guess
                    continue
                got = _measure(mode, size, timeout=max(budget * 3, 60))
                if got is None:
                    predicted[mode][size] = budget * 3
                    continue
                samples[mode].setdefault(size, []).append(got)
                print(f"{mode:>10} {size:>6} steps: {got['wall']:.3f} s", file=sys.stderr)
    return {"samples": samples, "predicted": predicted}  # type: ignore[dict-item]


def _predict(done: dict[int, list[dict[str, float]]], size: int, mode: str) -> float | None:
    below = [s for s in done if s < size and done[s]]
    if not below:
        return None
    base = max(below)
    power = 2 if mode == "faithful" else 1
    return float(statistics.median(d["wall"] for d in done[base]) * (size / base) ** power)


def requests_per_run(steps: int = 100) -> list[tuple[int, Any]]:
    """The bill of one run of ``steps`` plain steps, per operations-per-invocation."""
    from bench_kinds import platform as moto_platform

    bills = []
    for per_invocation in (1, 10, 100):
        with moto_platform() as plat:
            began = time.perf_counter()
            bill = plat.run("step", steps, budget=per_invocation)
            bills.append((per_invocation, bill, time.perf_counter() - began))
    return bills


def markdown(results: dict[str, Any], bills: list[tuple[int, Any, float]], steps: int) -> str:
    """The results as the docs' tables."""
    samples, predicted = results["samples"], results["predicted"]
    sizes = sorted({s for m in MODES for s in (*samples[m], *predicted[m])})
    lines = [
        f"python {platform.python_version()}, {platform.machine()}, "
        f"{_cpus()} CPUs; medians of the rounds, each run its own process.",
        "",
        "| mode | " + " | ".join(f"{s:,} steps: ms per step (CPU)" for s in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for mode in MODES:
        cells = []
        for size in sizes:
            if samples[mode].get(size):
                wall = statistics.median(d["wall"] for d in samples[mode][size]) * 1000 / size
                cpu = statistics.median(d["cpu"] for d in samples[mode][size]) * 1000 / size
                cells.append(f"{wall:.3f} ({cpu:.3f})")
            elif size in predicted[mode]:
                cells.append(f"~{predicted[mode][size] * 1000 / size:.1f} (predicted)")
            else:
                cells.append("-")
        lines.append(f"| {LABELS[mode]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"One run of {steps} plain steps on DynamoDB + EventBridge (moto), by operations per "
        "invocation (exact requests; the wall time is moto's):",
        "",
        "| operations per invocation | invocations | Query | GetItem | PutItem | UpdateItem "
        "| PutEvents | WRU | RRU | $ per 1,000 runs | wall on moto (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for per, bill, wall in bills:
        r = bill.requests
        lines.append(
            f"| {per} | {bill.lambdas - 1} | {r['Query']} | {r['GetItem']} | {r['PutItem']} "
            f"| {r['UpdateItem']} | {r['PutEvents']} | {bill.wru:g} | {bill.rru:g} "
            f"| {bill.dollars() * 1000:.4f} | {wall:.2f} |"
        )
    return "\n".join(lines) + "\n"


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    """Runs the measurements and prints (or writes) the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODE", "STEPS"))
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 steps, 1 round")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return 0
    sizes = [100, 1000] if args.quick else [int(s) for s in args.sizes.split(",")]
    rounds = 1 if args.quick else args.rounds
    results = times(sizes, rounds, args.budget)
    steps = 100
    text = markdown(results, requests_per_run(steps), steps)
    print(text)
    if args.markdown:
        write_section(args.markdown, START, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
