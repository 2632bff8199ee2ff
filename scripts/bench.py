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
import collections
import cProfile
import io
import itertools
import os
import platform
import pstats
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "layers" / "runtime"))

# Never reach a real AWS account: everything below runs on in-process moto.
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ.pop("AWS_PROFILE", None)
os.environ.pop("AWS_ENDPOINT_URL", None)

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from durable_agents import (  # noqa: E402
    AgentRegistry,
    EventBridgePublisher,
    InMemoryJournal,
    OutcomeKind,
    Runtime,
    SkipClock,
    agent,
)
from durable_agents.agent import AgentDefinition  # noqa: E402
from durable_agents.journal.dynamodb import DynamoDBJournal  # noqa: E402
from durable_agents.journal.store import JournalStore  # noqa: E402
from durable_agents.local.template import create_journal_table  # noqa: E402

TEMPLATE = ROOT / "template.yaml"
TABLE = "journal"
BUS = "durable-agents-bench"
REMAINING_MS = 60_000  # what the StepRunner passes as the Lambda's remaining time
ONE_MB = 1_048_576  # DynamoDB's Query page limit (moto uses 1,000,000 bytes)
CONTINUOUS_TARGET_MS = 0.1
REQUEST_COLUMNS = ("Query", "GetItem", "PutItem", "UpdateItem", "TransactWriteItems", "PutEvents")
WRITES = frozenset({"PutItem", "UpdateItem", "TransactWriteItems", "DeleteItem", "BatchWriteItem"})
MARK_START = "<!-- bench:results:start -->"
MARK_END = "<!-- bench:results:end -->"


@dataclass(frozen=True)
class Config:
    """Sizes and repetitions of one benchmark session."""

    quick: bool
    moto_steps: int
    big_value_bytes: int
    big_steps: int
    continuous_steps: int
    continuous_reps: int
    faithful_small_reps: int
    faithful_large_reps: int
    faithful_lengths: tuple[int, ...] = (0, 100, 250, 500, 1000)

    @classmethod
    def make(cls, quick: bool) -> Config:
        """The full or the quick configuration."""
        if quick:
            return cls(
                quick,
                moto_steps=30,
                big_value_bytes=50_000,
                big_steps=30,
                continuous_steps=1000,
                continuous_reps=3,
                faithful_small_reps=3,
                faithful_large_reps=1,
            )
        return cls(
            quick,
            moto_steps=100,
            big_value_bytes=10_000,
            big_steps=150,
            continuous_steps=1000,
            continuous_reps=9,
            faithful_small_reps=9,
            faithful_large_reps=3,
        )


# -- output ------------------------------------------------------------------------------------


@dataclass
class Table:
    """A titled table, printed as text and written as Markdown."""

    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        """Appends a row."""
        self.rows.append([str(c) for c in cells])

    def text(self) -> str:
        """A plain-text rendering for the terminal."""
        widths = [
            max(len(h), *(len(r[i]) for r in self.rows)) if self.rows else len(h)
            for i, h in enumerate(self.headers)
        ]
        line = "  ".join("-" * w for w in widths)
        out = [
            self.title,
            "=" * len(self.title),
            "  ".join(h.ljust(w) for h, w in zip(self.headers, widths, strict=True)),
            line,
        ]
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in self.rows]
        out += [f"  * {_plain(n)}" for n in self.notes]
        return "\n".join(out)

    def markdown(self) -> str:
        """A Markdown rendering for docs/benchmarks.md."""
        out = [
            f"### {self.title}",
            "",
            "| " + " | ".join(self.headers) + " |",
            "|" + "|".join("---" for _ in self.headers) + "|",
        ]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.notes:
            out.append("")
            out += [f"- {n}" for n in self.notes]
        return "\n".join(out)


def _plain(text: str) -> str:
    return text.replace("`", "").replace("**", "")


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f}"


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.1f}"


# -- agents ------------------------------------------------------------------------------------


def plain_steps_agent(
    steps: int, *, fixed_name: bool = False, value_bytes: int = 0
) -> AgentDefinition[Any, Any]:
    """An agent of ``steps`` steps that do nothing (or return ``value_bytes`` characters)."""
    registry = AgentRegistry()
    payload = "x" * value_bytes

    @agent(name="bench", version="1", registry=registry)
    def bench(ctx: Any, _: int) -> int:
        for i in range(steps):
            if value_bytes:
                ctx.step(lambda: payload, name="s" if fixed_name else f"s{i}")
            else:
                ctx.step(lambda i=i: i, name="s" if fixed_name else f"s{i}")
        return steps

    return bench


def _runtime(definition: AgentDefinition[Any, Any], store: JournalStore, **kw: Any) -> Runtime:
    registry = AgentRegistry()
    registry.add(definition)
    return Runtime(store, registry=registry, clock=SkipClock(), **kw)


# -- counting AWS requests ---------------------------------------------------------------------


def item_size(item: dict[str, Any]) -> int:
    """Approximate DynamoDB item size (AWS's rules: names + values, numbers ~1 byte/2 digits)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(str(raw).encode())
    if kind == "N":
        digits = re.sub(r"[^0-9]", "", str(raw)).lstrip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) + 1 for k, v in raw.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in raw)
    return len(str(raw).encode())


class RequestRecorder:
    """Counts API calls per operation on boto3 clients (botocore event hooks) and their time.

    ``before-call`` fires once per API call, before the request is sent (moto answers at
    ``before-send``); ``after-call`` gives the parsed response, whose Query items are sized.
    """

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.aws_ns = 0
        self.query_bytes = 0
        self._started: list[int] = []

    def attach(self, client: Any) -> None:
        """Starts counting the calls ``client`` makes."""
        client.meta.events.register("before-call", self._before)
        client.meta.events.register("after-call", self._after)

    def _before(self, model: Any, **_: Any) -> None:
        self.counts[model.name] += 1
        self._started.append(time.perf_counter_ns())

    def _after(self, model: Any, parsed: dict[str, Any] | None = None, **_: Any) -> None:
        if self._started:
            self.aws_ns += time.perf_counter_ns() - self._started.pop()
        if model.name == "Query" and parsed:
            self.query_bytes += sum(item_size(i) for i in parsed.get("Items", []))

    def take(self) -> collections.Counter[str]:
        """Returns the counts so far and starts again from zero."""
        counts, self.counts = self.counts, collections.Counter()
        self.query_bytes = 0
        return counts


@contextmanager
def moto_runtime(
    definition: AgentDefinition[Any, Any],
) -> Iterator[tuple[Runtime, RequestRecorder]]:
    """A runtime on a moto DynamoDB table (from template.yaml) and a moto EventBridge bus."""
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        events = boto3.client("events", region_name="us-east-1")
        create_journal_table(dynamodb, TABLE, TEMPLATE)
        events.create_event_bus(Name=BUS)
        recorder = RequestRecorder()
        recorder.attach(dynamodb)
        recorder.attach(events)
        runtime = _runtime(
            definition,
            DynamoDBJournal(dynamodb, TABLE),
            publisher=EventBridgePublisher(events, BUS),
        )
        yield runtime, recorder


def drive_faithful(
    runtime: Runtime, run_id: str, on_invocation: Callable[[int], None] | None = None
) -> int:
    """Calls ``execute(budget=1)`` like the StepRunner until the run stops; returns the count."""
    invocations = 0
    while True:
        outcome = runtime.execute(run_id, budget=1, remaining_ms=REMAINING_MS)
        invocations += 1
        if on_invocation is not None:
            on_invocation(invocations)
        if outcome.kind is not OutcomeKind.CONTINUE:
            if outcome.kind is not OutcomeKind.SUCCEEDED:
                raise RuntimeError(f"run ended {outcome.kind}: {outcome.detail}")
            return invocations


def _counts_row(label: str, counts: collections.Counter[str]) -> list[object]:
    writes = sum(n for op, n in counts.items() if op in WRITES)
    other = {op: n for op, n in counts.items() if op not in REQUEST_COLUMNS}
    return [
        label,
        *(counts.get(c, 0) for c in REQUEST_COLUMNS),
        writes,
        ", ".join(f"{k}={v}" for k, v in sorted(other.items())) or "-",
    ]


def bench_request_counts(cfg: Config) -> list[Table]:
    """Exact request counts per plain step, per run start and finish (faithful, moto)."""
    steps = cfg.moto_steps
    per_invocation: list[collections.Counter[str]] = []
    with moto_runtime(plain_steps_agent(steps)) as (runtime, recorder):
        header, _ = runtime.start_run("bench", 0)
        start = recorder.take()
        stamps = [time.perf_counter_ns()]
        recorder.aws_ns = 0

        def record(_: int) -> None:
            stamps.append(time.perf_counter_ns())
            per_invocation.append(recorder.take())

        drive_faithful(runtime, header.run_id, record)
        wall_ns = stamps[-1] - stamps[0]
        durations = [b - a for a, b in itertools.pairwise(stamps)]
        aws_ns = recorder.aws_ns
        runtime.start_run("bench", 0, idempotency_key="bench-key")
        start_idem = recorder.take()
        runtime.start_run("bench", 0, idempotency_key="bench-key")
        start_repeat = recorder.take()

    steady = per_invocation[:-1]
    kinds = {tuple(sorted(c.items())) for c in steady}
    if len(kinds) != 1:
        raise RuntimeError(f"steady-state invocations differ: {kinds}")
    step = steady[0]
    last = per_invocation[-1]
    finish = last - step
    total = sum(per_invocation, collections.Counter()) + start

    counts = Table(
        f"AWS requests per plain step, faithful mode, {steps}-step run (exact)",
        ["", *REQUEST_COLUMNS, "writes", "other"],
    )
    counts.rows.append(
        [
            str(c)
            for c in _counts_row(f"each step's invocation (all {len(steady)} but the last)", step)
        ]
    )
    counts.rows.append([str(c) for c in _counts_row("last invocation (last step + finish)", last)])
    counts.rows.append([str(c) for c in _counts_row("fixed: start_run", start)])
    counts.rows.append(
        [str(c) for c in _counts_row("fixed: start_run with idempotency key", start_idem)]
    )
    counts.rows.append([str(c) for c in _counts_row("repeated start_run, same key", start_repeat)])
    counts.rows.append([str(c) for c in _counts_row("fixed: finish (last minus a step)", finish)])
    counts.rows.append([str(c) for c in _counts_row(f"whole run, {steps} steps", total)])
    counts.notes += [
        "Targets per plain step: at most 2 writes, 1 journal Query page (journal under 1 MB), "
        f"1 PutEvents. Measured: {sum(step[w] for w in WRITES)} writes, {step['Query']} Query "
        f"page, {step['PutEvents']} PutEvents: "
        + (
            "**met**."
            if sum(step[w] for w in WRITES) <= 2 and step["Query"] == 1 and step["PutEvents"] == 1
            else "**NOT met**."
        ),
        "The finish adds one UpdateItem to the last step's invocation; its Run Finished event "
        "takes the place of that invocation's Step Ready.",
        "A start with an idempotency key writes the run header and the key item in one "
        "TransactWriteItems (2 items, billed at 2x write units each).",
        f"Wall time of the {steps} invocations on moto: {_ms(wall_ns)} ms "
        f"({_ms(wall_ns / steps)} ms per invocation), {100 * aws_ns / wall_ns:.0f}% of it inside "
        "boto3 calls to moto: moto-bound, not a prediction of AWS latency. The invocation "
        f"time grows with the journal (first 10: {_ms(statistics.mean(durations[:10]))} ms, "
        f"last 10: {_ms(statistics.mean(durations[-10:]))} ms each), mostly moto's Query.",
    ]

    with moto_runtime(plain_steps_agent(steps)) as (runtime, recorder):
        header, _ = runtime.start_run("bench", 0)
        recorder.take()
        runtime.execute(header.run_id, budget=None, remaining_ms=REMAINING_MS)
        batch = recorder.take()
        snapshot_bytes = _journal_bytes(runtime, header.run_id, recorder)
    batch_table = Table(
        f"Same {steps} steps in one invocation (budget=None), for comparison",
        ["", *REQUEST_COLUMNS, "writes", "other"],
    )
    batch_table.rows.append(
        [str(c) for c in _counts_row(f"one invocation, {steps} steps + finish", batch)]
    )
    per_step_bytes = snapshot_bytes / steps
    batch_table.notes += [
        "Executing several operations per invocation amortizes the journal Query and the "
        "Step Ready event; the 2 writes per step remain.",
        f"Journal size of this run: ~{snapshot_bytes:,} bytes (DynamoDB item-size rules), "
        f"~{per_step_bytes:,.0f} bytes per plain step (2 entries), so one 1 MB Query page "
        f"holds ~{ONE_MB / per_step_bytes:,.0f} plain steps.",
    ]
    return [counts, batch_table]


def _journal_bytes(runtime: Runtime, run_id: str, recorder: RequestRecorder) -> int:
    recorder.take()
    runtime.store.load(run_id)
    size = recorder.query_bytes
    recorder.take()
    return size


def bench_query_pages(cfg: Config) -> Table:
    """Query pages per invocation as the journal grows past 1 MB (steps with big values)."""
    steps, value = cfg.big_steps, cfg.big_value_bytes
    rows: list[tuple[int, int, collections.Counter[str]]] = []
    with moto_runtime(plain_steps_agent(steps, value_bytes=value)) as (runtime, recorder):
        header, _ = runtime.start_run("bench", 0)
        recorder.take()

        def record(n: int) -> None:
            size = recorder.query_bytes
            rows.append((n - 1, size, recorder.take()))

        drive_faithful(runtime, header.run_id, record)
    table = Table(
        f"Journal Query pages per invocation, steps returning {value // 1000} KB values "
        f"({steps} steps, moto)",
        [
            "steps already in journal",
            "journal read (bytes, approx.)",
            "Query pages",
            "writes",
            "PutEvents",
        ],
    )
    first_two = next((r for r in rows if r[2]["Query"] >= 2), None)
    rows = rows[:-1]  # the last invocation also finishes the run (one more write)
    shown: set[int] = {0, steps // 4, steps // 2, steps - 2}
    if first_two is not None:
        shown |= {first_two[0] - 1, first_two[0]}
    previous = 0
    for done, size, counts in rows:
        if done in shown or counts["Query"] != previous:
            table.add(
                done,
                f"{size:,}",
                counts["Query"],
                sum(counts[w] for w in WRITES),
                counts["PutEvents"],
            )
        previous = counts["Query"]
    if first_two is not None:
        table.notes.append(
            f"The second Query page starts at {first_two[0]} recorded steps "
            f"(~{first_two[1]:,} bytes read): from there each invocation pays one more "
            "sequential, strongly consistent Query per ~1 MB of journal. moto cuts pages at "
            "1,000,000 bytes, DynamoDB at 1 MB; writes and events per step do not change."
        )
    return table


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
