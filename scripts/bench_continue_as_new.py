"""What continue-as-new bounds: per-invocation replay time and journal reads of a looping agent.

Run ``python scripts/bench_continue_as_new.py`` (``--iterations 1000 --every 50``). A chat-like
agent loops for ``--iterations`` turns (one step each) in faithful mode: one operation per
invocation, the whole journal replayed each time. Twice: without ``ctx.continue_as_new``
(one ever-growing journal) and with it every ``--every`` turns. For each, over the last 50
invocations of the run:

* ``entries loaded``: the journal entries ``load`` returned (what replay had to go through);
* ``cpu ms``: CPU time of one invocation (load + replay + one new step), in-memory journal;
* ``items read``: on DynamoDB (moto), the items the invocation's Queries returned (the read
  capacity a load costs grows with them), ``--dynamodb-iterations`` turns (moto is slow).

Each measurement runs in its own process. Only ratios are worth reading on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TAIL = 50  # invocations measured at the end of each run


def _agent(every: int | None) -> Any:
    from durable_agents import AgentRegistry, agent

    @agent(name="looping", version="1", registry=AgentRegistry())
    def looping(ctx: Any, state: dict[str, int]) -> int:
        turn, total = state["turn"], state["total"]
        since = 0
        while turn < total:
            turn = ctx.step(lambda t: t + 1, turn, name="turn")
            since += 1
            if every is not None and since >= every and turn < total:
                ctx.continue_as_new({"turn": turn, "total": total})
        return turn

    return looping


def _child(iterations: int, every: int | None, backend: str) -> dict[str, float]:
    from durable_agents.journal.memory import InMemoryJournal
    from durable_agents_local.testing import AgentTestRunner

    reads: list[int] = []
    if backend == "dynamodb":
        import boto3
        from moto import mock_aws

        from durable_agents.journal.dynamodb import DynamoDBJournal
        from durable_agents_local.template import create_journal_table

        mock = mock_aws()
        mock.start()
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_journal_table(client, "journal", ROOT / "template.yaml")

        class Counting:
            def __getattr__(self, name: str) -> Any:
                return getattr(client, name)

            def query(self, **kwargs: Any) -> Any:
                page = client.query(**kwargs)
                reads[-1] += int(page["Count"])
                return page

        journal: Any = DynamoDBJournal(Counting(), "journal")
    else:
        journal = InMemoryJournal()
    runner = AgentTestRunner(_agent(every), journal=journal, mode="faithful")
    header, _ = runner.runtime.start_run("looping", {"turn": 0, "total": iterations})
    cpu: list[float] = []
    loaded: list[int] = []
    for _ in range(iterations * 3):
        reads.append(0)
        started = time.process_time()
        outcome = runner.runtime.execute(header.run_id, budget=1, remaining_ms=60_000)
        cpu.append(time.process_time() - started)
        reads.append(0)  # the measuring load below is not the invocation's
        loaded.append(len(journal.load(header.run_id).entries))
        reads.pop()
        if outcome.kind.value == "succeeded":
            break
    tail = slice(-TAIL - 1, -1)  # the last invocations before the one that finished
    return {
        "invocations": len(cpu),
        "generation": journal.get_run(header.run_id).generation,
        "entries_loaded": statistics.mean(loaded[tail]),
        "cpu_ms": statistics.median(cpu[tail]) * 1000,
        "items_read": statistics.mean(reads[tail]) if backend == "dynamodb" else 0.0,
    }


def _measure(iterations: int, every: int | None, backend: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "layers/runtime"), str(ROOT)])}
    args = [sys.executable, __file__, "--child", str(iterations), str(every or 0), backend]
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    """Prints the table (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--dynamodb-iterations", type=int, default=200)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        iterations, every, backend = int(args.child[0]), int(args.child[1]), args.child[2]
        print(json.dumps(_child(iterations, every or None, backend)))
        return
    print(f"{'run':<44} {'invocations':>11} {'generation':>10} {'entries':>8} "
          f"{'cpu ms':>7} {'items read':>10}")  # fmt: skip
    for backend, iterations in (
        ("memory", args.iterations),
        ("dynamodb", args.dynamodb_iterations),
    ):
        for every in (None, args.every):
            row = _measure(iterations, every, backend)
            label = f"{backend}, {iterations} turns, " + (
                "one journal" if every is None else f"continue_as_new every {every}"
            )
            items = f"{row['items_read']:>10.0f}" if backend == "dynamodb" else f"{'-':>10}"
            cpu = f"{row['cpu_ms']:>7.2f}" if backend == "memory" else f"{'-':>7}"
            print(f"{label:<44} {row['invocations']:>11.0f} {row['generation']:>10.0f} "
                  f"{row['entries_loaded']:>8.0f} {cpu} {items}")  # fmt: skip


if __name__ == "__main__":
    main()
