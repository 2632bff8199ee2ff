"""What every benchmark module shares: a safe environment, sizes, tables, the benchmark agent.

Imported first by the other ``bench_*`` modules: it puts the runtime on ``sys.path`` and points
AWS at nothing real before boto3 or the runtime is used (everything runs on in-process moto).
"""

from __future__ import annotations

import os
import sys
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

from durable_agents import AgentRegistry, SkipClock, agent  # noqa: E402
from durable_agents.agent import AgentDefinition  # noqa: E402
from durable_agents.core.models import Entry, EntryType, OpKind  # noqa: E402
from durable_agents.engine.runtime import Runtime  # noqa: E402
from durable_agents.journal.store import JournalStore  # noqa: E402

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


def step_entry(run_id: str, position: int, type_: EntryType, value: str = '"v"') -> Entry:
    """One entry of a plain step ``s`` at ``position``: its claim (STARTED) or its result."""
    started = type_ is EntryType.STARTED
    return Entry(
        run_id=run_id,
        position=f"{position:08d}",
        op_id=f"{run_id}:s:{position}",
        kind=OpKind.STEP,
        name="s",
        type=type_,
        attempt=1 if started else 0,
        value=value if type_ is EntryType.SUCCEEDED else None,
        recorded_at_ms=1_767_225_600_000,
        lease_expires_at_ms=1_767_225_660_000 if started else None,
    )


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
