"""Cold start: import + init of each Lambda handler, side by side with a bare ``import boto3``.

Run ``python scripts/bench_cold_start.py`` (``--python /path/to/python3.13`` to measure another
interpreter, ``--runs 30``, ``--quick``, ``--breakdown``, ``--tracing on``, ``--markdown FILE``;
``--against DIR`` times a second copy of the sources, e.g. before a change, in the same rounds).

Each handler is imported by fresh interpreters, alternating with a bare ``import boto3`` on the
same interpreter, so both sides see the same machine load. A child times its own import
(``time.perf_counter_ns`` around ``__import__``; the handler module's import is its whole init:
Logger, Tracer, Metrics, ``import_agent_modules()``), and the CPU time of that import, which a
busy machine disturbs less. Then it times the set-up its first invocation adds
(``get_runtime()``: the boto3 clients, the model scripts; the Relay's EventBridge client; the
handler's tracer), reported beside the ratio, not in it. The time from the process's start to
the end of the import (the interpreter's start-up included) is reported too.

What is imported is what Lambda runs: each source tree's function package and layer code are
built by its own Makefiles (functions/Makefile ``build-<Function>``, layers/runtime/Makefile
``layer-source``, as ``sam build`` runs them, with ``--python`` as the runtime's Python), and
the children cannot write bytecode (``PYTHONDONTWRITEBYTECODE``: Lambda's /opt and /var/task are
read-only), so a build that ships none pays for compiling every module at every start. The
layer's third-party packages are the interpreter's installed ones (the same pins, compiled).
The environment is the template's (Globals plus the function's own variables, a parameter's
default or a placeholder for a resource), with fake credentials: no request is sent. By
default tracing is off, as anywhere but on Lambda (Powertools' Tracer disables itself without
``LAMBDA_TASK_ROOT``); ``--tracing on`` sets ``LAMBDA_TASK_ROOT`` as Lambda does (the
template's ``Tracing: Active``), so the X-Ray SDK patches what it patches there.

``--breakdown`` adds, per handler, the modules it imports that ``import boto3`` does not,
grouped by package, with their median self time under ``python -X importtime``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import yaml
from bench_instructions import collected
from bench_markers import write_section

ROOT = Path(__file__).resolve().parents[1]
HANDLERS = {
    "StepRunner": ("StepRunnerFunction", "step_runner.app"),
    "Api": ("ApiFunction", "api.app"),
    "Reconciler": ("ReconcilerFunction", "reconciler.app"),
    "Relay": ("RelayFunction", "relay.app"),
}
BASELINE = "boto3"
START = "<!-- bench:cold-start:start -->"
END = "<!-- bench:cold-start:end -->"
# The child: times its own import of argv[1] (wall and CPU), then, unless argv[2] is "no",
# the first invocation's set-up, if any; prints the four figures and the moment its import
# ended, and leaves without the interpreter's clean-up (a Lambda environment is not torn down
# between invocations, and a count of instructions would include it).
CHILD = """
import os, sys, time
c0, t0 = time.process_time_ns(), time.perf_counter_ns()
__import__(sys.argv[1])
t1, c1 = time.perf_counter_ns(), time.process_time_ns()
module = sys.modules[sys.argv[1]]
# The Api builds its runtime in api.services, beside the app that mounts the routes.
services = sys.modules.get(sys.argv[1].rpartition(".")[0] + ".services")
setup = (
    getattr(module, "get_runtime", None)
    or getattr(services, "get_runtime", None)
    or getattr(module, "_events_client", None)
)
if setup is not None and sys.argv[2] != "no":
    setup()
    tracer = getattr(module, "tracer", None)
    if tracer is not None:
        tracer.provider  # what the first invocation's tracing reads (a deferred Tracer: made)
t2 = time.perf_counter_ns()
print(t1 - t0, c1 - c0, t2 - t1 if setup is not None else -1, t1, flush=True)
os._exit(0)
"""
NOTHING = "sys"  # an import that costs nothing: the interpreter's start, for instruction counts


class _Loader(yaml.SafeLoader):
    """A SafeLoader that reads CloudFormation's short-form intrinsics (!Ref, !GetAtt...)."""


_Loader.add_constructor("!Ref", lambda loader, node: {"Ref": loader.construct_scalar(node)})
_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def build(source: Path, function: str, python: str, into: Path) -> tuple[Path, Path]:
    """The function's package and the layer's code, built from ``source`` as ``sam build`` does.

    ``sam build`` runs ``make -f <code dir>/Makefile build-<LogicalId>`` in a copy of the code
    directory with ``ARTIFACTS_DIR`` set; the same here, with ``PYTHON313`` set to ``python``.

    Returns:
        (the function's package directory, the layer's ``python/`` directory).

    Raises:
        subprocess.CalledProcessError: If a Makefile target fails.
    """
    built: list[Path] = []
    for code, target in (("functions", f"build-{function}"), ("layers/runtime", "layer-source")):
        scratch = into / f"{target}-source"
        artifacts = into / target
        if not artifacts.exists():
            shutil.copytree(source / code, scratch, ignore=shutil.ignore_patterns("__pycache__"))
            subprocess.run(
                ["make", "--no-print-directory", "-f", str(source / code / "Makefile"), target],
                cwd=scratch,
                env={**os.environ, "ARTIFACTS_DIR": str(artifacts), "PYTHON313": python},
                check=True,
                capture_output=True,
            )
        built.append(artifacts)
    return built[0], built[1] / "python"


def lambda_env(function: str, tracing: bool, package: Path, layer: Path) -> dict[str, str]:
    """The function's environment as the template sets it, with placeholders for resources.

    ``package`` and ``layer`` are the built function package and layer code
    (:func:`build`), on the path in Lambda's order.
    """
    template = yaml.load((ROOT / "template.yaml").read_text(encoding="utf-8"), Loader=_Loader)
    parameters = template["Parameters"]
    variables = {
        **template["Globals"]["Function"]["Environment"]["Variables"],
        **template["Resources"][function]["Properties"].get("Environment", {}).get("Variables", {}),
    }

    def value(name: str, v: Any) -> str:
        if isinstance(v, dict) and "Ref" in v and v["Ref"] in parameters:
            return str(parameters[v["Ref"]].get("Default", ""))
        return v if isinstance(v, str) else f"placeholder-{name.lower()}"

    env = {k: value(k, v) for k, v in variables.items()}
    env |= {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        # Lambda's layout: the function's code, then the layer's python/.
        "PYTHONPATH": f"{package}{os.pathsep}{layer}",
        "PYTHONDONTWRITEBYTECODE": "1",  # Lambda's code directories are read-only
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",  # no request is sent: clients are only made
    }
    if tracing:
        env["LAMBDA_TASK_ROOT"] = str(package)  # Powertools' Tracer: "on Lambda"
    else:
        env["POWERTOOLS_TRACE_DISABLED"] = "1"
    return env


def run_child(python: str, module: str, env: dict[str, str], cwd: str) -> dict[str, float]:
    """One fresh interpreter's figures (ms): import, its CPU, ready, set-up (-1: none).

    Ready is from the process's start to the end of the import (interpreter start-up included,
    set-up and exit not): perf_counter is CLOCK_MONOTONIC, one clock for both processes.

    Raises:
        RuntimeError: If the child fails (its stderr's tail says why).
    """
    # -P: nothing from the working directory shadows a module (an empty directory anyway).
    start = time.perf_counter_ns()
    result = subprocess.run(
        [python, "-P", "-c", CHILD, module, "yes"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{module} failed:\n{result.stderr[-3000:]}")
    imported, cpu, setup, ready_at = (int(v) for v in result.stdout.split()[-4:])
    return {
        "import": imported / 1e6,
        "cpu": cpu / 1e6,
        "ready": (ready_at - start) / 1e6,
        "setup": setup / 1e6 if setup >= 0 else -1.0,
    }


def instructions(python: str, module: str, env: dict[str, str], cwd: str, *, setup: bool) -> int:
    """Instructions one child executes (callgrind's total), with or without the set-up.

    Raises:
        RuntimeError: If the child or valgrind fails.
    """
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={Path(scratch) / 'out'}",
                python,
                "-P",
                "-c",
                CHILD,
                module,
                "yes" if setup else "no",
            ],
            env={**env, "PYTHONHASHSEED": "0"},
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise RuntimeError(f"{module} failed under valgrind:\n{result.stderr[-3000:]}")
    return collected(result.stderr)


def count_instructions(
    python: str, sides: dict[str, tuple[str, dict[str, str]]], cwd: str
) -> dict[str, float]:
    """Millions of instructions of each side's import and set-up, and the ratios to boto3's.

    The interpreter's own start (a child that imports nothing) is taken off every import.
    """
    start = instructions(python, NOTHING, sides["base"][1], cwd, setup=False)
    counts: dict[str, float] = {}
    for side, (module, env) in sides.items():
        imported = instructions(python, module, env, cwd, setup=False)
        counts[f"{side}_import"] = (imported - start) / 1e6
        if side != "base":
            whole = instructions(python, module, env, cwd, setup=True)
            counts[f"{side}_setup"] = (whole - imported) / 1e6
    for side in sides:
        if side != "base":
            counts[f"{side}_ratio"] = counts[f"{side}_import"] / counts["base_import"]
    return counts


def import_times(python: str, module: str, env: dict[str, str], cwd: str) -> dict[str, int]:
    """Self time (us) of every module one ``python -X importtime`` import of ``module`` loads.

    Raises:
        RuntimeError: If the child fails.
    """
    result = subprocess.run(
        [python, "-P", "-X", "importtime", "-c", f"import {module}"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{module} failed:\n{result.stderr[-3000:]}")
    times: dict[str, int] = {}
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.partition(":")[2].split("|")
        times[name.strip()] = int(own)
    return times


def group_of(module: str) -> str:
    """A breakdown's row: the top-level package, or its subpackage for the big ones."""
    parts = module.split(".")
    deep = {"durable_agents": 2, "aws_lambda_powertools": 3, "aws_xray_sdk": 2, "api": 2}
    return ".".join(parts[: deep.get(parts[0], 1)])


def breakdown(
    python: str, module: str, env: dict[str, str], cwd: str, runs: int
) -> list[tuple[str, float, int]]:
    """(package, median self ms, modules) of what ``module`` imports and boto3 does not."""
    base: set[str] = set()
    samples: dict[str, list[float]] = collections.defaultdict(list)
    counts: dict[str, int] = {}
    for _ in range(runs):
        base |= set(import_times(python, BASELINE, env, cwd))
        grouped: dict[str, float] = collections.Counter()
        members: dict[str, int] = collections.Counter()
        for name, own in import_times(python, module, env, cwd).items():
            grouped[group_of(name)] += own / 1000
            members[group_of(name)] += 1
        for group, ms in grouped.items():
            samples[group].append(ms)
            counts[group] = members[group]
    shared = {group_of(m) for m in base}
    rows = [
        (group, statistics.median(ms + [0.0] * (runs - len(ms))), counts[group])
        for group, ms in samples.items()
        if group not in shared
    ]
    return sorted(rows, key=lambda r: -r[1])


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(p25, median, p75)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every handler, ``args.runs`` times, each run beside a bare ``import boto3``."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-cold-"))
    builds = scratch / "builds"
    cwd = str(scratch / "cwd")  # the children's: empty
    os.mkdir(cwd)
    results: dict[str, Any] = {"handlers": {}}
    try:
        for label in args.handlers:
            function, module = HANDLERS[label]
            tracing = args.tracing == "on"
            here = lambda_env(
                function, tracing, *build(args.source, function, args.python, builds / "source")
            )
            sides = {"base": (BASELINE, here), "handler": (module, here)}
            if args.against:
                built = build(args.against, function, args.python, builds / "against")
                sides["against"] = (module, lambda_env(function, tracing, *built))
            for name, env in [*sides.values(), *sides.values()]:  # warm the caches: not timed
                run_child(args.python, name, env, cwd)
            samples: dict[str, list[float]] = collections.defaultdict(list)
            order = list(sides)
            for i in range(args.runs):
                # Rotate which goes first, so no side always follows the same one.
                for side in order[i % len(order) :] + order[: i % len(order)]:
                    name, env = sides[side]
                    for key, ms in run_child(args.python, name, env, cwd).items():
                        if ms >= 0:
                            samples[f"{side}_{key}"].append(ms)
            row: dict[str, Any] = {key: quartiles(values) for key, values in samples.items()}
            for side in ("handler", "against"):
                if f"{side}_import" in row:
                    row[f"{side}_ratio"] = row[f"{side}_import"][1] / row["base_import"][1]
                    row[f"{side}_ready_ratio"] = row[f"{side}_ready"][1] / row["base_ready"][1]
                    row[f"{side}_cpu_ratio"] = row[f"{side}_cpu"][1] / row["base_cpu"][1]
            if args.instructions:
                row["instructions"] = count_instructions(args.python, sides, cwd)
                print(f"    instructions (millions): {row['instructions']}", flush=True)
            if args.breakdown:
                env = sides["handler"][1]
                row["breakdown"] = breakdown(args.python, module, env, cwd, args.breakdown_runs)
                for group, ms, count in row["breakdown"][:15]:
                    print(f"    {ms:7.1f} ms  {group} ({count} modules)")
            results["handlers"][label] = row
            print(_line(label, row), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    version = subprocess.run(
        [args.python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    results["machine"] = {
        "python": version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "runs": args.runs,
        "tracing": args.tracing,
        "date": date.today().isoformat(),
    }
    return results


def _line(label: str, row: dict[str, Any]) -> str:
    def side(name: str) -> str:
        setup = row.get(f"{name}_setup")
        return (
            f"{row[f'{name}_import'][1]:7.1f} ms ({row[f'{name}_ratio']:.2f}x;"
            f" CPU {row[f'{name}_cpu_ratio']:.2f}x; from process start"
            f" {row[f'{name}_ready_ratio']:.2f}x)"
            + (f", first invocation's set-up {setup[1]:6.1f} ms" if setup else "")
        )

    text = f"{label:<11} import boto3 {row['base_import'][1]:6.1f} ms | handler {side('handler')}"
    if "against_import" in row:
        text += f" | against {side('against')}"
    return text


def markdown(results: dict[str, Any], command: str) -> str:
    """The results as the section ``docs/benchmarks.md`` holds between its markers."""
    machine = results["machine"]
    against = any("against_import" in row for row in results["handlers"].values())
    lines = [
        f"Produced by `{command}` on {machine['date']}: Python {machine['python']},"
        f" {machine['platform']}, {machine['cpus']} CPUs (load average {machine['load']:.1f}),"
        f" {machine['runs']} runs per handler, tracing {machine['tracing']}.",
        "",
    ]
    head = "| handler | import boto3 (ms) | import + init (ms, median [p25-p75]) | ratio |"
    rule = "|---|---|---|---|"
    if against:
        head += " against: import + init (ms) | against: ratio |"
        rule += "---|---|"
    lines += [
        head + " CPU ratio | ratio from process start | first invocation's set-up (ms) |",
        rule + "---|---|---|",
    ]
    for label, row in results["handlers"].items():
        low, mid, high = row["handler_import"]
        setup = row.get("handler_setup")
        cells = [
            label,
            f"{row['base_import'][1]:.1f}",
            f"{mid:.1f} [{low:.1f}-{high:.1f}]",
            f"**{row['handler_ratio']:.2f}x**",
        ]
        if against:
            cells += [f"{row['against_import'][1]:.1f}", f"{row['against_ratio']:.2f}x"]
        cells += [
            f"{row['handler_cpu_ratio']:.2f}x",
            f"{row['handler_ready_ratio']:.2f}x",
            f"{setup[1]:.1f}" if setup else "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    counted = {
        k: row["instructions"] for k, row in results["handlers"].items() if "instructions" in row
    }
    if counted:
        lines += [
            "",
            "Instructions (millions; callgrind, `PYTHONHASHSEED=0`, one run each: exact under"
            " any load; the interpreter's own start taken off):",
            "",
            "| handler | import boto3 | import + init | ratio |"
            + (" against: import + init | against: ratio |" if against else "")
            + " first invocation's set-up |",
            "|---|---|---|---|" + ("---|---|" if against else "") + "---|",
        ]
        for label, c in counted.items():
            cells = [
                label,
                f"{c['base_import']:,.0f}",
                f"{c['handler_import']:,.0f}",
                f"**{c['handler_ratio']:.2f}x**",
            ]
            if against:
                cells += [f"{c['against_import']:,.0f}", f"{c['against_ratio']:.2f}x"]
            cells.append(f"{c['handler_setup']:,.0f}")
            lines.append("| " + " | ".join(cells) + " |")
    for label, row in results["handlers"].items():
        if "breakdown" in row:
            lines += ["", f"{label}: what it imports that `import boto3` does not (self ms):", ""]
            groups = [f"`{g}` {ms:.1f}" for g, ms, _ in row["breakdown"] if ms >= 1.0]
            lines.append(", ".join(groups) or "-")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; prints one line per handler (and writes Markdown if asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter measured")
    parser.add_argument("--source", type=Path, default=ROOT, help="the sources measured")
    parser.add_argument("--against", type=Path, help="a second copy of the sources, compared")
    parser.add_argument("--runs", type=int, default=20, help="rounds per handler (every side once)")
    parser.add_argument("--quick", action="store_true", help="5 rounds per handler")
    parser.add_argument("--handlers", default=",".join(HANDLERS))
    parser.add_argument("--tracing", choices=("off", "on"), default="off")
    parser.add_argument("--breakdown", action="store_true", help="add -X importtime by package")
    parser.add_argument(
        "--instructions", action="store_true", help="add instruction counts (valgrind, slow)"
    )
    parser.add_argument("--breakdown-runs", type=int, default=5)
    parser.add_argument("--markdown", type=Path, help="write the results into this file")
    parser.add_argument("--json", type=Path, help="write the raw results as JSON")
    args = parser.parse_args(argv)
    args.handlers = [h.strip() for h in args.handlers.split(",") if h.strip()]
    unknown = [h for h in args.handlers if h not in HANDLERS]
    if unknown:
        parser.error(f"unknown handlers {unknown}; choose from {', '.join(HANDLERS)}")
    if args.quick:
        args.runs = 5
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind on the PATH (apt-get install valgrind)")
    results = measure(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.markdown:
        given = list(argv if argv is not None else sys.argv[1:])
        if "--markdown" in given:  # the command as it reproduces the table, without the file
            at = given.index("--markdown")
            del given[at : at + 2]
        command = " ".join(["python scripts/bench_cold_start.py", *given])
        write_section(args.markdown, START, END, markdown(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
