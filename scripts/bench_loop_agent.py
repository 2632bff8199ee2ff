"""The agent ``scripts/bench_loop.py`` measures: ten trivial steps, nothing else.

``bench-ten-steps`` takes an int and adds one to it in ten steps (``s0`` .. ``s9``), each a
call of the module-level pure function ``inc``: no I/O, no sleep, no model. What a run costs
is then local mode's own work (the Api, the bus, the StepRunner, the journal writes), not the
agent's. Loaded by the worker with ``--agents bench_loop_agent`` and ``scripts/`` on
``PYTHONPATH``.
"""

from __future__ import annotations

from durable_agents import DurableContext, agent

STEPS = 10


def inc(value: int) -> int:
    """``value + 1``: a pure step."""
    return value + 1


@agent(name="bench-ten-steps", version="1")
def bench_ten_steps(ctx: DurableContext, start: int) -> int:
    """Adds one to ``start`` in ten steps; returns ``start + 10``."""
    total = start
    for index in range(STEPS):
        total = ctx.step(inc, total, name=f"s{index}")
    return total
