"""A lower bound for sticky continuation: the least an invocation of a parked run can do.

Run ``python scripts/bench_sticky_floor.py [--steps 1000] [--rounds 5]`` (not part of
``make bench``: it answers one question, recorded in ``docs/benchmarks.md``). It times the
side-by-side table's agent (N trivial steps, one run) three ways, each in a process of its own,
alternated, medians shown:

* ``continuous``: the harness in continuous mode (one invocation for the whole run);
* ``sticky``: faithful mode with sticky continuation, as the StepRunner runs it;
* ``floor``: the same, but every invocation of the parked run does only what no sticky
  invocation can skip: read the journal, check it is as the agent left it, hand the agent
  its new invocation, let it take its one step and park again, say what happened, and ask for
  the next ``Step Ready``. No cancel or time-limit check, no log context, no plugin span, no
  budget from the agent's definition, no scrubbing of the event: a *measurement*, never a
  runtime path (a run it drives is not protected the way the runtime protects it).

What it shows (issue 14's target, sticky within 2x of continuous): if the floor itself is near
2x on a machine, no trimming of the runtime's invocation path gets below it there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import types
from typing import Any

from bench_peers import harness_seconds

from durable_agents.engine.events import step_ready
from durable_agents.engine.outcomes import InvocationOutcome, OutcomeKind
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.carriers import PARKED

WAYS = ("continuous", "sticky", "floor")


def floor_execute(runtime: Any, run_id: str, **options: Any) -> Any:
    """One invocation of a parked run doing only what cannot be skipped (see the docstring).

    Anything else (the run's first invocation, the one that finishes it, a journal that
    changed) goes through ``Runtime.execute`` as usual.
    """
    snapshot = runtime.store.load(run_id)
    parked = runtime.sticky.take(run_id)
    if parked is None or not parked.matches(snapshot):
        if parked is not None:
            runtime.sticky.keep(run_id, parked)
        return Runtime.execute(runtime, run_id, **options)
    inv = parked.invocation
    inv.store, inv.header, inv.budget, inv.executed = parked.tally, snapshot.header, 1, []
    inv.park = parked.thread.park
    value = parked.thread.advance()
    if value is not PARKED:  # the agent returned: the floor does not record a run's end
        raise RuntimeError(f"the floor cannot finish a run (it returned {value!r})")
    runtime.sticky.keep(run_id, parked)
    runtime.publisher.publish([step_ready(run_id, "continue")])
    return InvocationOutcome(run_id, OutcomeKind.CONTINUE, list(inv.executed))


def measure(way: str, steps: int) -> float:
    """Seconds one run of ``steps`` trivial steps takes ``way`` (in this process).

    Raises:
        RuntimeError: If the run did not succeed.
    """

    def floor(runner: Any) -> None:
        runner.runtime.execute = types.MethodType(_floor_until_last(steps), runner.runtime)

    mode = "continuous" if way == "continuous" else "sticky"
    return harness_seconds(steps, mode, floor if way == "floor" else None)


def _floor_until_last(steps: int) -> Any:
    """``floor_execute`` for every invocation but the last (which executes the last step and
    finishes the run: the floor does not record a run's end).

    Counted, not read from the journal, so that the floor pays no read of its own.
    """
    invocations = [0]

    def execute(runtime: Any, run_id: str, **options: Any) -> Any:
        invocations[0] += 1
        if invocations[0] >= steps:  # invocation k executes step k; the last one finishes
            return Runtime.execute(runtime, run_id, **options)
        return floor_execute(runtime, run_id, **options)

    return execute


def main(argv: list[str] | None = None) -> int:
    """Runs the three ways alternated and prints their medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("WAY", "STEPS"))
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps({"seconds": measure(args.child[0], int(args.child[1]))}))
        return 0
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for round_ in range(args.rounds):
        for way in WAYS[round_ % 3 :] + WAYS[: round_ % 3]:
            out = subprocess.run(
                [sys.executable, __file__, "--child", way, str(args.steps)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            times[way].append(json.loads(out.stdout)["seconds"])
    base = statistics.median(times["continuous"])
    print(f"{args.steps} steps, medians of {args.rounds} alternated rounds:")
    for way in WAYS:
        median = statistics.median(times[way])
        print(f"  {way:10s} {median * 1000:8.2f} ms  {median / base:5.2f}x continuous")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
