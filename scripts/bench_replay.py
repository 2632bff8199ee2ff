"""What replaying costs: CPU per replayed operation, and a faithful map, against a baseline.

Run ``python scripts/bench_replay.py`` (part of ``make bench``). Two measurements, each in its
own process so nothing is shared between them:

* ``replay N``: a run of ``N`` recorded plain steps that waits for a callback; one more
  invocation replays all ``N`` and suspends again. Best of ``--repeat`` invocations, in CPU
  time (``time.process_time``), per replayed operation. The first invocation after the run
  was recorded is cold (nothing of the run grouped yet in this process), the later ones warm.
  ``warm with plugin`` is the warm case with a plugin listening as the Lambda functions'
  does (the StepRunner always has one); ``agent`` is the agent function alone against a
  context that does nothing (its loop, its lambdas and names): the part of a replayed
  operation no runtime can take away.
* ``map N``: ``ctx.map`` over ``N`` items, one operation per invocation (faithful harness),
  from start to finish, in CPU seconds.

``--baseline REV`` runs the same measurements on a git revision too (checked out into a
temporary worktree), round by round alternating with this tree, and prints the ratio: on a
loaded machine only the ratio is worth reading. Options: ``--sizes 1000,10000``,
``--map-items 800``, ``--rounds 3``, ``--repeat 5``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _child_replay(n: int, repeat: int) -> dict[str, float]:
    from datetime import timedelta

    from durable_agents import AgentRegistry, agent
    from durable_agents_local.testing import AgentTestRunner

    registry = AgentRegistry()

    @agent(name="replayed", version="1", registry=registry)
    def replayed(ctx: Any, steps: int) -> int:
        for i in range(steps):
            ctx.step(lambda i=i: i, name=f"s{i}")
        ctx.create_callback("park", timeout=timedelta(days=30)).result()
        return steps

    measured: dict[str, float] = {}
    for label, plugins in (("", []), ("plugin_", [_EndsOnly()])):
        runner = AgentTestRunner(replayed, mode="continuous", plugins=plugins)
        run_id = runner.run(n).run_id
        times = []
        for _ in range(repeat + 1):
            started = time.process_time()
            runner.runtime.execute(run_id, budget=1, remaining_ms=60_000)
            times.append(time.process_time() - started)
        if not label:
            measured["cold_us_per_op"] = times[0] * 1e6 / n
        measured[f"warm_{label}us_per_op"] = min(times[1:]) * 1e6 / n
    measured["agent_us_per_op"] = _agent_alone(replayed.fn, n, repeat) * 1e6 / n
    return measured


class _EndsOnly:
    """A plugin as the Lambda functions' ``PowertoolsPlugin`` listens: operation ends only,
    replayed ones not asked for (the StepRunner always runs with one)."""

    replayed_operations = False  # as PowertoolsPlugin: no report per replayed operation

    def on_operation_end(self, info: Any) -> None:
        if info.replayed:
            return


class _Stub:
    """A context whose ``step`` does nothing: what the agent's own loop costs."""

    def step(self, fn: Any, *args: Any, name: str | None = None, **options: Any) -> Any:
        return None

    def create_callback(self, name: str, **options: Any) -> Any:
        return self

    def result(self) -> None:
        return None


def _agent_alone(fn: Any, n: int, repeat: int) -> float:
    """CPU seconds of the agent function's own work (its loop, lambdas, names), best of all."""
    times = []
    for _ in range(repeat + 1):
        started = time.process_time()
        fn(_Stub(), n)
        times.append(time.process_time() - started)
    return min(times)


def _child_map(n: int) -> dict[str, float]:
    from durable_agents import AgentRegistry, agent
    from durable_agents_local.testing import AgentTestRunner

    registry = AgentRegistry()

    @agent(name="mapped", version="1", registry=registry)
    def mapped(ctx: Any, items: int) -> int:
        batch = ctx.map(
            list(range(items)),
            lambda child, item, index: child.step(lambda: item * 2, name="double"),
            name="items",
        )
        return len(batch.all_results())

    started = time.process_time()
    result = AgentTestRunner(mapped, mode="faithful", max_invocations=10 * n + 100).run(n)
    assert result.status == "SUCCEEDED", result.status
    return {"cpu_s": time.process_time() - started}


def _measure(tree: Path, args: list[str]) -> dict[str, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(tree / p) for p in ("layers/runtime", "functions", "."))
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_replay.py"), "--child", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    parsed: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def main() -> None:
    """Runs the measurements and prints a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", help="a git revision to compare with")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--map-items", type=int, default=800)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.child:
        kind, n = args.child[0], int(args.child[1])
        out = _child_replay(n, args.repeat) if kind == "replay" else _child_map(n)
        print(json.dumps(out))
        return
    trees: dict[str, Path] = {"this tree": ROOT}
    scratch = None
    if args.baseline:
        scratch = tempfile.mkdtemp(prefix="bench-replay-")
        base = Path(scratch) / "baseline"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.baseline],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        trees = {f"baseline {args.baseline}": base, **trees}
    cases = [["replay", s, "--repeat", str(args.repeat)] for s in args.sizes.split(",")]
    cases.append(["map", str(args.map_items)])
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for _ in range(args.rounds):
            for case in cases:
                for label, tree in trees.items():  # alternated, round by round
                    results.setdefault((label, " ".join(case[:2])), []).append(_measure(tree, case))
    finally:
        if scratch is not None:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(Path(scratch) / "baseline")],
                cwd=ROOT,
                check=False,
            )
    _print(results, list(trees), cases)


def _median(values: list[dict[str, float]], key: str) -> float:
    return statistics.median(v[key] for v in values)


def _print(
    results: dict[tuple[str, str], list[dict[str, Any]]], labels: list[str], cases: list[list[str]]
) -> None:
    print("| measurement | " + " | ".join(labels) + (" | ratio |" if len(labels) > 1 else " |"))
    print("|---" * (len(labels) + 1 + (len(labels) > 1)) + "|")
    for case in cases:
        name = " ".join(case[:2])
        keys = (
            ["cold_us_per_op", "warm_us_per_op", "warm_plugin_us_per_op", "agent_us_per_op"]
            if case[0] == "replay"
            else ["cpu_s"]
        )
        for key in keys:
            if any(key not in r for label in labels for r in results[(label, name)]):
                continue  # a baseline that does not measure it
            got = [_median(results[(label, name)], key) for label in labels]
            unit = "µs per replayed op" if key.endswith("per_op") else "s CPU"
            title = (
                f"{name} ({key.rsplit('_us', 1)[0].replace('_', ' with ')}, {unit})"
                if case[0] == "replay"
                else f"{name} items, faithful ({unit})"
            )
            row = " | ".join(f"{g:,.2f}" for g in got)
            ratio = f" | {got[0] / got[-1]:.1f}x |" if len(got) > 1 and got[-1] else " |"
            print(f"| {title} | {row}{ratio}")


if __name__ == "__main__":
    main()
