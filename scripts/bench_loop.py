"""The local developer loop: one run, 50 at once, a full store, a restart (issue 33).

Run ``python scripts/bench_loop.py``. The yardstick is the time of a fresh ``import boto3``
on the same machine: the median wall time of 7 ``python -c "import boto3"`` subprocesses
(this interpreter, the checkout as working directory). Then one ``durable-agents local``
worker on a fresh state directory in a temporary directory (it starts its own store,
``--state-dir``; with ``--worker-args "--store moto"`` also a free ``--moto-port``), with the
agent ``bench-ten-steps`` of
``scripts/bench_loop_agent.py`` (ten trivial steps; ``--agents bench_loop_agent``,
``scripts/`` on ``PYTHONPATH``), ``--log-level WARNING`` and without ``--quiet`` (so that it
prints one line per invocation on stderr, which is how the reconciler's sweeps are timed):

1. one run, from ``POST /runs`` to its result (``GET /runs/{id}`` every ~5 ms until
   SUCCEEDED; FAILED aborts): two warm-ups, then ``--runs`` sequential runs, median and max;
   goal: at most 1.5x the import time;
2. ``--at-once`` runs started at once (POSTs from a pool of 10 threads), the time until all
   SUCCEEDED (each run polled in turn, ~5 ms apart); goal: at most 60x the import time;
3. ``--fill`` runs more, in batches of 50 (each batch waited for), then 1 and 2 again on the
   full store;
4. the longest reconciler sweep of the whole measurement, from the worker's
   ``ReconcilerFunction ... (0.12s)`` lines (``local/durable_agents_local/invoke.py``; an idle
   sweep prints its ``idle (0.01s)`` line only at ``--log-level DEBUG``: pass
   ``--worker-args "--log-level DEBUG"`` to time every sweep); goal: none over 1 s;
5. restart: SIGTERM to the worker (it stops its store), wait for the exit, start it again on
   the same state directory and time from the spawn to the first ``GET /runs`` that answers
   200 (polled every ~10 ms) and to the ``ready`` line on stderr; the store's size is the
   count of items in the journal table (a ``Scan`` of the store, each item written at least
   once; the embedded store: the rows of its ``runs`` and ``entries`` tables), else runs x
   steps; goal: at most 2 s with at least 10,000 writes;
6. hostile input: ``--hostile`` requests (default 1,000, from 10 threads) of the kinds that once
   got past the Api's parsers or grew the old store's memory (``HOSTILE``: bodies over the
   JSON limit up to 9 MB, malformed JSON, lone surrogates, inputs of the wrong type, limits
   of thousands of digits, Unicode digits and 600-byte ids in paths, 5,000-character
   Idempotency-Keys, foreign ``Origin``/``Host`` headers); none may get a 5xx;
7. memory: VmRSS and VmHWM (``/proc/PID/status``) of the worker and of every process under
   it (the store), after the fill, after the hostile requests, at the end of the measurement
   and after the restart.

Options: ``--runs N`` (default 10), ``--at-once N`` (default 50), ``--fill N`` (default
1000), ``--hostile N`` (default 1000), ``--worker-args "..."`` (more ``durable-agents local``
flags, shlex-split, e.g. another store: ``--store moto``, to which the script adds a free
``--moto-port`` unless ``--moto-port`` or ``--moto-endpoint`` is among them), ``--markdown
PATH`` (replace the text between ``<!-- bench:loop:start -->`` and ``<!-- bench:loop:end -->``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import shlex
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(ROOT / "layers" / "runtime"))

from bench_markers import write_section  # noqa: E402

from durable_agents_local.moto_server import free_port  # noqa: E402
from durable_agents_local.processes import WorkerProcess, http_json  # noqa: E402
from durable_agents_local.store_key import read_key  # noqa: E402

AGENT = "bench-ten-steps"
STEPS = 10
START, END = "<!-- bench:loop:start -->", "<!-- bench:loop:end -->"
BASE_ARGS = ["--log-level", "WARNING", "--agents", "bench_loop_agent"]
IMPORTS = 7
WARM_UPS = 2
POOL = 10
BATCH = 50
POLL = 0.005
RUN_TIMEOUT = 300.0
# ``HH:MM:SS.mmm [ERROR: ]ReconcilerFunction <phrase> (0.12s)[ [note]]``: invoke.py's line.
SWEEP = re.compile(r"^\S+ (?:[A-Z]+: )?ReconcilerFunction\s.*\((\d+(?:\.\d+)?)s\)(?: \[.*\])?$")
MEMORY_KEYS = ("VmRSS", "VmHWM")


class RunFailedError(RuntimeError):
    """A run ended FAILED (or otherwise not SUCCEEDED), or did not end in time."""


@dataclass
class Log:
    """What the worker said on stderr that the benchmark reads, with the phase it was in."""

    phase: str = "start"
    sweeps: list[tuple[str, float, str]] = field(default_factory=list)
    ready_at: float | None = None
    journal: str = ""  # the banner's ``journal`` line: which store
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_ready(self, timeout: float) -> float | None:
        """The time of the ``ready`` line, waited for up to ``timeout`` s; None if not seen."""
        deadline = time.monotonic() + timeout
        while self.ready_at is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.ready_at

    def on_line(self, line: str) -> None:
        """Called by ``WorkerProcess`` with each stderr line."""
        if line.strip().startswith("journal "):
            self.journal = " ".join(line.split()[1:])
        if line.startswith("ready"):
            with self.lock:
                if self.ready_at is None:
                    self.ready_at = time.monotonic()
        match = SWEEP.match(line)
        if match:
            with self.lock:
                self.sweeps.append((self.phase, float(match.group(1)), line))


def import_time() -> tuple[float, list[float]]:
    """The median wall time (s) of ``IMPORTS`` fresh ``python -c "import boto3"``, and all."""
    times = []
    for _ in range(IMPORTS):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import boto3"], cwd=ROOT, check=True)
        times.append(time.perf_counter() - began)
    return statistics.median(times), times


def post_run(worker: WorkerProcess, value: int) -> str:
    """Starts one run of the agent; returns its id."""
    status, body = http_json("POST", f"{worker.base_url}/runs", {"agent": AGENT, "input": value})
    if status != 201:
        raise RuntimeError(f"POST /runs answered {status}: {body}")
    return str(body["run"]["run_id"])


def _run_of(body: Any) -> dict[str, Any]:
    return body["run"] if isinstance(body, dict) and isinstance(body.get("run"), dict) else body


def wait_run(worker: WorkerProcess, run_id: str, expected: int | None = None) -> None:
    """Polls ``GET /runs/{id}`` every ~5 ms until the run SUCCEEDED.

    Raises:
        RunFailedError: If it FAILED (or ended otherwise), answered a wrong result, or is still
            running after ``RUN_TIMEOUT``.
    """
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        status, body = http_json("GET", f"{worker.base_url}/runs/{run_id}", timeout=30)
        if status != 200:
            raise RuntimeError(f"GET /runs/{run_id} answered {status}: {body}")
        run = _run_of(body)
        state = run.get("status")
        if state == "SUCCEEDED":
            result = run.get("result", run.get("output"))
            if expected is not None and result is not None and result != expected:
                raise RunFailedError(f"{run_id} answered {result!r}, not {expected}")
            return
        if state in ("FAILED", "TIMED_OUT", "STOPPED", "CANCELLED"):
            raise RunFailedError(f"{run_id} ended {state}: {run.get('error')}")
        if time.monotonic() > deadline:
            raise RunFailedError(f"{run_id} still {state} after {RUN_TIMEOUT} s")
        time.sleep(POLL)


def one_run(worker: WorkerProcess, value: int) -> float:
    """Seconds from ``POST /runs`` to the run's result."""
    began = time.perf_counter()
    wait_run(worker, post_run(worker, value), value + STEPS)
    return time.perf_counter() - began


def sequential(worker: WorkerProcess, count: int, warm_ups: int) -> list[float]:
    """The times (s) of ``count`` runs one after the other, after ``warm_ups`` untimed ones."""
    for index in range(warm_ups):
        one_run(worker, -1 - index)
    times = [one_run(worker, index) for index in range(count)]
    print(
        f"  {count} sequential: median {statistics.median(times) * 1000:.0f} ms, "
        f"max {max(times) * 1000:.0f} ms",
        flush=True,
    )
    return times


def at_once(worker: WorkerProcess, count: int, pool: ThreadPoolExecutor) -> float:
    """Seconds from starting ``count`` runs at once until all SUCCEEDED."""
    began = time.perf_counter()
    ids = list(pool.map(lambda i: post_run(worker, i), range(count)))
    for run_id in ids:  # in turn: the last answer is seen within one poll of its end
        wait_run(worker, run_id)
    return time.perf_counter() - began


def fill(worker: WorkerProcess, count: int, pool: ThreadPoolExecutor) -> float:
    """Starts ``count`` runs in batches of ``BATCH``, each waited for; returns the seconds."""
    began = time.perf_counter()
    done = 0
    while done < count:
        size = min(BATCH, count - done)
        at_once(worker, size, pool)
        done += size
        elapsed = time.perf_counter() - began
        print(f"  fill: {done}/{count} in {elapsed:.0f} s", flush=True)
    return time.perf_counter() - began


def _hostile_request(index: int) -> tuple[str, str, bytes, dict[str, str]]:
    """The ``index``-th hostile request: method, path, body, headers (``HOSTILE`` kinds)."""
    json_type = {"Content-Type": "application/json"}
    kind = index % 11
    if kind == 0:  # a body over the JSON limit (256 KB) and up to 9 MB: 413
        size = (300 + (index * 7919) % 9_000) * 1024
        body = b'{"agent": "' + AGENT.encode() + b'", "input": "' + b"x" * size + b'"}'
        return "POST", "/runs", body, json_type
    if kind == 1:  # a valid body of 200 KB whose input has the wrong type: 422
        body = json.dumps({"agent": AGENT, "input": "y" * 200_000}).encode()
        return "POST", "/runs", body, json_type
    if kind == 2:  # malformed JSON
        return "POST", "/runs", b'{"agent": "' + AGENT.encode() + b'", "input": ', json_type
    if kind == 3:  # a lone surrogate, escaped and as bytes
        return "POST", "/runs", b'{"agent": "\ud83d", "input": 1}', json_type
    if kind == 4:
        return "POST", "/runs", b'{"agent": "\xed\xa0\xbd", "input": 1}', json_type
    if kind == 5:  # a limit of thousands of digits
        return "GET", "/runs?limit=" + "9" * 5_000, b"", {}
    if kind == 6:  # Unicode digits and a 600-byte id in a path
        return "GET", "/runs/run-%C2%B2%D9%A3", b"", {}
    if kind == 7:
        return "GET", "/runs/run-" + "a" * 600 + "/history", b"", {}
    if kind == 8:  # a 5,000-character Idempotency-Key
        body = json.dumps({"agent": AGENT, "input": 1}).encode()
        return "POST", "/runs", body, {**json_type, "Idempotency-Key": "k" * 5_000}
    if kind == 9:  # another site's page
        body = json.dumps({"agent": AGENT, "input": 1}).encode()
        return "POST", "/runs", body, {**json_type, "Origin": "http://evil.example"}
    return "GET", "/runs", b"", {"Host": "evil.example"}  # a rebound name: 421


def hostile(worker: WorkerProcess, count: int, pool: ThreadPoolExecutor) -> Counter[int]:
    """Sends ``count`` hostile requests; returns how many got each status (0: no answer)."""
    port = worker.api_port

    def send(index: int) -> int:
        method, path, body, headers = _hostile_request(index)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            connection.putrequest(method, path, skip_host="Host" in headers)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                connection.putheader(name, value)
            connection.endheaders(body or None)
            response = connection.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            return 0
        finally:
            connection.close()

    return Counter(pool.map(send, range(count)))


def _children(pid: int) -> list[int]:
    """Every process under ``pid`` (from ``/proc/*/stat``'s parent ids)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _name(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in argv if a]
    if "-m" in words:  # python -m module ...: the module names it
        module = words[words.index("-m") + 1] if len(words) > words.index("-m") + 1 else ""
        return f"{module} {words[words.index('-m') + 2]}".strip() if "cli" in module else module
    return " ".join(words[:2])


def memory(worker: WorkerProcess) -> list[tuple[int, str, dict[str, int]]]:
    """(pid, name, {VmRSS, VmHWM in kB}) of the worker and every process under it."""
    out = []
    for pid in [worker.pid, *_children(worker.pid)]:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        values = {}
        for line in status.splitlines():
            key, _, rest = line.partition(":")
            if key in MEMORY_KEYS:
                values[key] = int(rest.split()[0])
        out.append((pid, _name(pid), values))
    return out


def journal_items(moto_port: int | None, state_dir: Path) -> int | None:
    """The journal's size: items in the moto store's journal table (a ``Scan``), or rows of
    the embedded store's ``runs`` and ``entries`` tables (``local.sqlite3``, read only); None
    if it cannot be counted."""
    if moto_port is None:
        return _sqlite_rows(state_dir / "local.sqlite3")
    try:
        import boto3  # here only: the yardstick imports it in fresh interpreters

        key = read_key(moto_port)
        if key is None:
            return None
        client = boto3.client(
            "dynamodb",
            endpoint_url=f"http://127.0.0.1:{moto_port}",
            region_name="us-east-1",
            aws_access_key_id=key,
            aws_secret_access_key="bench",
        )
        tables = [t for t in client.list_tables()["TableNames"] if "journal" in t.lower()]
        if len(tables) != 1:
            return None
        count = 0
        for page in client.get_paginator("scan").paginate(TableName=tables[0], Select="COUNT"):
            count += int(page["Count"])
        return count
    except Exception as exc:  # the fallback (runs x steps) is reported instead
        print(f"  journal items: not counted ({type(exc).__name__}: {exc})", flush=True)
        return None


def _sqlite_rows(path: Path) -> int | None:
    if not path.exists():
        return None
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=30)) as db:
            return sum(
                int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
                for table in ("runs", "entries")
            )
    except sqlite3.Error as exc:
        print(f"  journal rows: not counted ({exc})", flush=True)
        return None


@contextmanager
def local_mode(
    state_dir: Path, extra: list[str], log: Log, on_spawn: Callable[[str], None] | None = None
) -> Iterator[tuple[WorkerProcess, float, float, int | None]]:
    """A started worker on ``state_dir``, when it was spawned, when its Api answered, and the
    port of the store it started (None if ``extra`` chose the store).

    ``on_spawn`` is called with the worker's base URL just before the spawn. The worker is
    stopped (SIGTERM), and every process found under it ended, on the way out (exceptions and
    Ctrl-C included).
    """
    # The moto store (``--store moto``) gets a free port of its own unless ``extra`` names one.
    own_store = "moto" in _store_of(extra) and not {"--moto-port", "--moto-endpoint"} & set(extra)
    args = [*BASE_ARGS, "--state-dir", str(state_dir), *extra]
    moto_port = free_port() if own_store else None
    if moto_port is not None:
        args += ["--moto-port", str(moto_port)]
    path = os.pathsep.join(p for p in (str(SCRIPTS), os.environ.get("PYTHONPATH", "")) if p)
    worker = WorkerProcess(
        api_port=free_port(), moto_endpoint=None, args=args, cwd=ROOT,
        env={"PYTHONPATH": path}, on_line=log.on_line,
    )  # fmt: skip
    seen: set[tuple[int, str]] = set()  # (pid, start time): a recycled pid is not ours
    try:
        if on_spawn is not None:
            on_spawn(worker.base_url)
        spawned = time.monotonic()
        worker.start(timeout=120)
        answered = time.monotonic()
        seen.update(_identified(_children(worker.pid)))
        yield worker, spawned, answered, moto_port
    finally:
        if worker.returncode is None and _started(worker):
            seen.update(_identified(_children(worker.pid)))
        worker.stop(timeout=60)
        for pid, started in seen:  # the store runs in a session of its own: never leave it
            _kill(pid, started)


def _store_of(extra: list[str]) -> str:
    """The ``--store`` ``extra`` chooses (``--store X`` or ``--store=X``); ``""`` if none."""
    for index, word in enumerate(extra):
        if word == "--store" and index + 1 < len(extra):
            return extra[index + 1]
        if word.startswith("--store="):
            return word.partition("=")[2]
    return ""


def _started(worker: WorkerProcess) -> bool:
    try:
        return worker.pid > 0
    except RuntimeError:
        return False


def _start_time(pid: int) -> str:
    """The process's start time (``/proc/PID/stat`` field 22); ``""`` if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""


def _identified(pids: list[int]) -> list[tuple[int, str]]:
    return [(pid, _start_time(pid)) for pid in pids]


def _kill(pid: int, started: str) -> None:
    """SIGTERM, then SIGKILL after 10 s, to ``pid`` if it is still the process that started
    at ``started``."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if not started or _start_time(pid) != started:
            return
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not Path(f"/proc/{pid}").exists() or _zombie(pid):
                return
            time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def first_answer(base_url: str, stop: threading.Event, out: list[float]) -> None:
    """Polls ``GET /runs?limit=1`` every ~10 ms; appends the time of the first 200.

    A refused connection fails at once; an accepted request is waited for (30 s), so the time
    is that of the first answer, not of a retry after a client-side timeout.
    """
    while not stop.is_set():
        try:
            status, _ = http_json("GET", f"{base_url}/runs?limit=1", timeout=30)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            status = 0
        if status == 200:
            out.append(time.monotonic())
            return
        time.sleep(0.01)


@dataclass
class Results:
    """Everything measured, for the table."""

    flags: str
    load_start: tuple[float, float, float]
    import_median: float = 0.0
    import_all: list[float] = field(default_factory=list)
    first_start: float = 0.0
    fresh_runs: list[float] = field(default_factory=list)
    fresh_at_once: float = 0.0
    fill_seconds: float = 0.0
    full_runs: list[float] = field(default_factory=list)
    full_at_once: float = 0.0
    stop_seconds: float = 0.0
    restart_answer: float = 0.0
    restart_ready: float | None = None
    restart_run: float = 0.0
    journal: int | None = None
    runs_total: int = 0
    state_bytes: int = 0
    memory: dict[str, list[tuple[int, str, dict[str, int]]]] = field(default_factory=dict)
    sweeps: list[tuple[str, float, str]] = field(default_factory=list)
    load_end: tuple[float, float, float] = (0.0, 0.0, 0.0)
    store: str = ""
    hostile: Counter[int] = field(default_factory=Counter)


def measure(args: argparse.Namespace, extra: list[str], results: Results) -> None:
    """Runs every phase, filling ``results``."""
    print("yardstick: import boto3", flush=True)
    results.import_median, results.import_all = import_time()
    print(f"  median {results.import_median * 1000:.0f} ms", flush=True)
    log = Log()
    with (
        tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp,
        ThreadPoolExecutor(POOL) as pool,
    ):
        state = Path(tmp) / "state"
        with local_mode(state, extra, log) as (worker, spawned, answered, moto_port):
            results.first_start = answered - spawned
            print(f"worker answered {results.first_start:.2f} s after its spawn", flush=True)
            log.phase = "fresh store"
            results.fresh_runs = sequential(worker, args.runs, WARM_UPS)
            results.fresh_at_once = at_once(worker, args.at_once, pool)
            print(f"  {args.at_once} at once: {results.fresh_at_once:.1f} s", flush=True)
            log.phase = "fill"
            results.fill_seconds = fill(worker, args.fill, pool)
            results.memory["after the fill"] = memory(worker)
            log.phase = "full store"
            print("full store", flush=True)
            results.full_runs = sequential(worker, args.runs, 0)
            results.full_at_once = at_once(worker, args.at_once, pool)
            print(f"  {args.at_once} at once: {results.full_at_once:.1f} s", flush=True)
            if args.hostile:
                log.phase = "hostile"
                results.hostile = hostile(worker, args.hostile, pool)
                results.memory[f"after {args.hostile:,} hostile requests"] = memory(worker)
                print(f"  {args.hostile} hostile requests: {dict(results.hostile)}", flush=True)
            results.memory["end of the measurement"] = memory(worker)
            results.runs_total = WARM_UPS + 2 * (args.runs + args.at_once) + args.fill
            results.journal = journal_items(moto_port, state)
            log.phase = "stop"
            began = time.monotonic()
            code = worker.stop(timeout=60)
            results.stop_seconds = time.monotonic() - began
            print(f"stopped (exit {code}) in {results.stop_seconds:.2f} s", flush=True)
        results.state_bytes = sum(f.stat().st_size for f in state.rglob("*") if f.is_file())
        log.phase = "restart"
        log.ready_at = None
        first: list[float] = []
        stop = threading.Event()
        pollers: list[threading.Thread] = []

        def spawn(base_url: str) -> None:
            poller = threading.Thread(target=first_answer, args=(base_url, stop, first))
            pollers.append(poller)
            poller.start()

        try:
            with local_mode(state, extra, log, spawn) as (worker, spawned, answered, _):
                for poller in pollers:
                    poller.join(5)
                results.restart_answer = (first[0] if first else answered) - spawned
                ready = log.wait_ready(60)
                results.restart_ready = None if ready is None else ready - spawned
                print(
                    f"restart: GET /runs answered after {results.restart_answer:.2f} s, ready "
                    f"line after {results.restart_ready or float('nan'):.2f} s",
                    flush=True,
                )
                results.memory["after the restart"] = memory(worker)
                results.restart_run = one_run(worker, 0)
                print(f"  one run after the restart: {results.restart_run:.2f} s", flush=True)
        finally:
            stop.set()
            for poller in pollers:
                poller.join()
    results.sweeps = list(log.sweeps)
    results.store = log.journal


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _s(seconds: float) -> str:
    return f"{seconds:,.2f} s"


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in load)


def markdown(r: Results, args: argparse.Namespace) -> str:
    """The results as Markdown: the table of figures and goals, then the details."""
    yard = r.import_median
    one, many = 1.5 * yard, 60 * yard
    writes = r.journal if r.journal is not None else r.runs_total * STEPS
    what = "journal records" if r.journal is not None else "runs x steps"
    sweep = max(r.sweeps, key=lambda s: s[1]) if r.sweeps else None
    rows = [
        "| figure | measured | goal | met? |",
        "|---|---|---|---|",
        f"| yardstick: fresh `import boto3`, median of {IMPORTS} | {_ms(yard)} | | |",
    ]
    for label, runs, batch in (
        ("fresh store", r.fresh_runs, r.fresh_at_once),
        (f"after {args.fill:,} runs filled", r.full_runs, r.full_at_once),
    ):
        median, worst = statistics.median(runs), max(runs)
        rows += [
            f"| one run, {label}: median of {len(runs)} | {_ms(median)} "
            f"({median / yard:.1f}x) | ≤ 1.5x = {_ms(one)} | {_met(median <= one)} |",
            f"| one run, {label}: max of {len(runs)} | {_ms(worst)} ({worst / yard:.1f}x) "
            f"| ≤ 1.5x = {_ms(one)} | {_met(worst <= one)} |",
            f"| {args.at_once} at once, {label}: until all SUCCEEDED | {_s(batch)} "
            f"({batch / yard:.0f}x) | ≤ 60x = {_s(many)} | {_met(batch <= many)} |",
        ]
    if sweep is None:
        rows.append("| longest reconciler sweep | no sweep line seen | ≤ 1 s | ? |")
    else:
        rows.append(
            f"| longest reconciler sweep ({len(r.sweeps)} logged; during: {sweep[0]}) | "
            f"{_s(sweep[1])} | ≤ 1 s | {_met(sweep[1] <= 1.0)} |"
        )
    big = writes >= 10_000
    size = f"{writes:,} {what}"
    rows.append(
        f"| restart: spawn to first `GET /runs` answer ({size}) | {_s(r.restart_answer)} | "
        f"≤ 2 s with ≥ 10,000 writes | {_met(r.restart_answer <= 2)}"
        f"{'' if big else ' (smaller store)'} |"
    )
    ready = "not seen" if r.restart_ready is None else _s(r.restart_ready)
    ready_ok = r.restart_ready is not None and r.restart_ready <= 2
    rows.append(
        f"| restart: spawn to the `ready` line ({size}) | {ready} | ≤ 2 s with ≥ 10,000 "
        f"writes | {_met(ready_ok)}{'' if big else ' (smaller store)'} |"
    )
    for moment, processes in r.memory.items():
        for _pid, name, values in processes:
            rss, hwm = (values.get(k, 0) / 1024 for k in MEMORY_KEYS)
            rows.append(
                f"| memory, {moment}: `{name}` VmRSS / VmHWM | {rss:,.0f} / {hwm:,.0f} MiB | | |"
            )
    per_minute = args.fill / r.fill_seconds * 60 if r.fill_seconds else 0.0
    sweeps_by_phase: dict[str, list[float]] = {}
    for phase, seconds, _line in r.sweeps:
        sweeps_by_phase.setdefault(phase, []).append(seconds)
    phases = ", ".join(
        f"{phase} {len(v)} (max {max(v):.2f} s)" for phase, v in sweeps_by_phase.items()
    )
    imports = ", ".join(f"{t * 1000:.0f}" for t in r.import_all)
    return "\n".join(
        [
            f"`{f'python scripts/bench_loop.py {r.flags}'.strip()}`",
            "",
            f"Agent `{AGENT}` ({STEPS} trivial steps); python {platform.python_version()}, "
            f"{os.cpu_count()} CPUs, {platform.platform()}; load average (1 / 5 / 15 min) "
            f"{_load(r.load_start)} at the start, {_load(r.load_end)} at the end. Journal: "
            f"{r.store or '?'}.",
            "",
            *rows,
            "",
            f"- `import boto3` times (ms): {imports}.",
            f"- First start on the empty state directory: the Api answered "
            f"{_s(r.first_start)} after the spawn.",
            f"- Fill: {args.fill:,} runs in batches of {BATCH} in {_s(r.fill_seconds)} "
            f"({per_minute:.0f} runs/minute).",
            f"- Store before the restart: {r.runs_total:,} runs ({r.runs_total * STEPS:,} "
            f"steps); journal records (moto: items of the journal table; embedded: rows of "
            f"`runs` and `entries`): "
            f"{'not counted' if r.journal is None else f'{r.journal:,}'}; state directory "
            f"{r.state_bytes / 1e6:,.1f} MB. Stop (SIGTERM to exit): {_s(r.stop_seconds)}.",
            f"- One run right after the restart: {_ms(r.restart_run)}.",
            f"- Hostile requests ({args.hostile:,}), answers by status: "
            + (", ".join(f"{k or 'none'}: {v}" for k, v in sorted(r.hostile.items())) or "-")
            + f"; server errors (5xx or no answer): "
            f"{sum(v for k, v in r.hostile.items() if k == 0 or k >= 500)}.",
            f"- Reconciler sweeps logged, by phase: {phases or 'none'} (an idle sweep's line "
            "shows only at `--log-level DEBUG`).",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10, help="sequential runs (default 10)")
    parser.add_argument("--at-once", type=int, default=50, help="runs at once (default 50)")
    parser.add_argument("--fill", type=int, default=1000, help="runs in the store (1000)")
    parser.add_argument("--hostile", type=int, default=1000, help="hostile requests (1000)")
    parser.add_argument("--worker-args", default="", help="more durable-agents local flags")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    # SIGTERM ends the script like Ctrl-C: through the finally blocks that stop every process.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    extra = shlex.split(args.worker_args)
    flags = " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    results = Results(flags=flags, load_start=os.getloadavg())
    measure(args, extra, results)
    results.load_end = os.getloadavg()
    text = markdown(results, args)
    print(text)
    if args.markdown:
        write_section(args.markdown, START, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
