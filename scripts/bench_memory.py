"""Benchmarks on the in-memory journal (wall time): continuous mode's overhead per step, faithful
mode's cost against journal length, and cProfile summaries of both.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Sequence

from bench_common import (  # sets sys.path and a safe AWS environment, before any client
    CONTINUOUS_TARGET_MS,
    REMAINING_MS,
    Config,
    Table,
    _ms,
    _runtime,
    _us,
    plain_steps_agent,
)

from durable_agents.engine.outcomes import OutcomeKind
from durable_agents.journal.memory import InMemoryJournal

# -- in-memory timing --------------------------------------------------------------------------


def _continuous_once(steps: int, fixed_name: bool) -> int:
    runtime = _runtime(plain_steps_agent(steps, fixed_name=fixed_name), InMemoryJournal())
    header, _ = runtime.start_run("bench", 0)
    began = time.perf_counter_ns()
    outcome = runtime.execute(header.run_id, budget=None, remaining_ms=REMAINING_MS)
    elapsed = time.perf_counter_ns() - began
    if outcome.kind is not OutcomeKind.SUCCEEDED:
        raise RuntimeError(f"run ended {outcome.kind}: {outcome.detail}")
    return elapsed


def bench_continuous(cfg: Config) -> Table:
    """Runtime overhead per do-nothing step in one continuous invocation (in-memory)."""
    steps = cfg.continuous_steps
    table = Table(
        f"Continuous mode, in-memory journal, {steps} do-nothing steps "
        f"(median of {cfg.continuous_reps})",
        ["step names", "run (ms)", "per step (ms)", "min per step (ms)", "target", "met"],
    )
    _continuous_once(50, False)  # warm up imports and caches
    for fixed, label in ((False, 'f"s{i}" (unique)'), (True, '"s" (fixed)')):
        times = [_continuous_once(steps, fixed) for _ in range(cfg.continuous_reps)]
        med = statistics.median(times)
        per = med / steps / 1e6
        table.add(
            label,
            _ms(med),
            f"{per:.4f}",
            f"{min(times) / steps / 1e6:.4f}",
            f"<= {CONTINUOUS_TARGET_MS}",
            "yes" if per <= CONTINUOUS_TARGET_MS else "NO",
        )
    table.notes.append(
        "One execute(budget=None) call: replay of nothing, then each step is claimed, run and "
        "recorded (2 journal commits) in the in-memory journal. Wall time, machine-dependent."
    )
    return table


def _faithful_once(steps: int) -> tuple[int, list[int]]:
    runtime = _runtime(plain_steps_agent(steps), InMemoryJournal())
    header, _ = runtime.start_run("bench", 0)
    per: list[int] = []
    began = time.perf_counter_ns()
    while True:
        t0 = time.perf_counter_ns()
        outcome = runtime.execute(header.run_id, budget=1, remaining_ms=REMAINING_MS)
        per.append(time.perf_counter_ns() - t0)
        if outcome.kind is not OutcomeKind.CONTINUE:
            break
    total = time.perf_counter_ns() - began
    if outcome.kind is not OutcomeKind.SUCCEEDED or len(per) != steps:
        raise RuntimeError(f"run ended {outcome.kind} after {len(per)} invocations")
    return total, per


def _fit(ys: Sequence[float]) -> tuple[float, float]:
    """``y_n = a + b n``: ``a`` is the measured ``y_0``, ``b`` the least-squares slope."""
    a = ys[0]
    b = sum(n * (y - a) for n, y in enumerate(ys)) / sum(n * n for n in range(len(ys)))
    return a, b


def bench_faithful(cfg: Config) -> list[Table]:
    """Faithful mode on the in-memory journal: totals and per-invocation growth."""
    small = [_faithful_once(100)[0] for _ in range(cfg.faithful_small_reps)]
    large_runs = [_faithful_once(1000) for _ in range(cfg.faithful_large_reps)]
    large = [t for t, _ in large_runs]

    totals = Table(
        "Faithful mode, in-memory journal: whole runs (one step per invocation)",
        ["steps", "repetitions", "total (ms, median)", "per step (ms)", "invocations"],
    )
    totals.add(
        100, len(small), _ms(statistics.median(small)), _ms(statistics.median(small) / 100), 100
    )
    totals.add(
        1000, len(large), _ms(statistics.median(large)), _ms(statistics.median(large) / 1000), 1000
    )
    ratio = statistics.median(large) / statistics.median(small)
    totals.notes.append(
        f"10x the steps took {ratio:,.0f}x the time: each invocation replays the whole journal "
        "from the top, so the N^2 term dominates the total (100x for 10x the steps)."
    )

    # Invocation k (0-based) replays k recorded steps, then executes step k + 1.
    by_length = [statistics.median(run[1][k] for run in large_runs) for k in range(1000)]
    # A rolling median of 11 neighbours drops GC pauses and scheduler noise before the fit.
    smooth = [statistics.median(by_length[max(0, k - 5) : k + 6]) for k in range(1000)]
    a, b = _fit(smooth)
    growth = Table(
        "Faithful mode, in-memory journal: one invocation against journal length",
        [
            "steps already in journal",
            "invocation (ms, median of 11 neighbours)",
            "per journal step (us)",
            "fit a + b*n (ms)",
        ],
    )
    for length in cfg.faithful_lengths:
        k = min(length, 999)
        med = smooth[k]
        growth.add(k, _ms(med), _us(med / k) if k else "-", _ms(a + b * k))
    total_fit = 1000 * a + b * 1000 * 999 / 2
    growth.notes += [
        f"Fit over all 1,000 invocations (rolling medians): a = {_us(a)} us per invocation "
        f"(measured at length 0) plus b = {_us(b)} us per replayed step. The invocation "
        "cost grows linearly with the journal, so a run's total grows quadratically: "
        "total(N) ~ a*N + b*N^2/2 "
        f"({total_fit / 1e9:,.2f} s predicted for N = 1,000; "
        f"{(10_000 * a + b * 10_000 * 9_999 / 2) / 1e9:,.0f} s for N = 10,000).",
        "Wall time, machine-dependent; on a busy machine single points are noisy, the fit less so.",
    ]
    return [totals, growth]


# -- profiling ---------------------------------------------------------------------------------


def profile_summary(cfg: Config, top: int = 15) -> str:
    """cProfile of one continuous 1,000-step run and of one faithful replay of 1,000 steps."""
    out = io.StringIO()
    profiler = cProfile.Profile()
    profiler.enable()
    _continuous_once(cfg.continuous_steps, False)
    profiler.disable()
    out.write(f"-- continuous, {cfg.continuous_steps} steps (tottime) --\n")
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)

    runtime = _runtime(plain_steps_agent(1001), InMemoryJournal())
    header, _ = runtime.start_run("bench", 0)
    runtime.execute(header.run_id, budget=1000, remaining_ms=REMAINING_MS)
    profiler = cProfile.Profile()
    profiler.enable()
    runtime.execute(header.run_id, budget=1, remaining_ms=REMAINING_MS)
    profiler.disable()
    out.write("-- one faithful invocation replaying 1,000 steps (tottime) --\n")
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()
