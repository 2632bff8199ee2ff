"""``durable-agents local --crash-at OPERATION:POINT``: the worker SIGKILLs itself, once.

The runtime calls ``InvocationHooks`` at four points of every operation (steps and tool
calls alike); ``CrashHooks`` kills the worker process at one of them for one operation, the
way a Lambda dies when its host goes away: no ``finally``, no flush, nothing handed back.

=================  ========================================================================
point              the process dies …
=================  ========================================================================
``before_claim``   before the operation writes its claim (a tool: its PREPARE record)
``before_execute`` after the claim / PREPARE is recorded, before the code or provider runs
``after_execute``  after the code returned (a tool: the provider acted) but before COMMIT
``after_record``   after the result is recorded, before anything else happens
=================  ========================================================================
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.runtime import Runtime

CRASH_POINTS = ("before_claim", "before_execute", "after_execute", "after_record")

log = logging.getLogger("durable_agents_local")


def _name_of(op_id: str) -> str:
    """The operation name in ``<run_id>:<name>:<n>`` (nested: ``…/<name>:<n>``)."""
    parts = op_id.rsplit("/", 1)[-1].rsplit(":", 2)
    return parts[-2] if len(parts) >= 2 else op_id


@dataclass(frozen=True, slots=True)
class CrashSpec:
    """Where to crash: one operation, one point.

    Attributes:
        operation: An operation name (``charge-card``), an id without its run prefix
            (``gather:2/fetch-1:1``) or a full operation id (``run-…:charge-card:1``).
        point: One of ``CRASH_POINTS``.
    """

    operation: str
    point: str

    @classmethod
    def parse(cls, text: str) -> CrashSpec:
        """Parses ``OPERATION:POINT`` (the point is after the last colon).

        Raises:
            ValueError: If the text is not ``OPERATION:POINT`` with a known point.
        """
        operation, colon, point = text.strip().rpartition(":")
        if not colon or not operation or not point:
            raise ValueError(
                f"expected OPERATION:POINT (e.g. charge-card:after_execute), got {text!r}"
            )
        if point not in CRASH_POINTS:
            raise ValueError(f"unknown crash point {point!r}: use one of {', '.join(CRASH_POINTS)}")
        return cls(operation, point)

    def matches(self, op_id: str) -> bool:
        """Whether ``op_id`` is the operation this spec names."""
        # Run ids have no colons: what follows the first one is the id within the run.
        return self.operation in (op_id, op_id.partition(":")[2], _name_of(op_id))

    def __str__(self) -> str:
        return f"{self.operation}:{self.point}"


def sigkill_self() -> None:
    """Kills this process with SIGKILL (no cleanup of any kind)."""
    os.kill(os.getpid(), signal.SIGKILL)


class CrashHooks(InvocationHooks):
    """Invocation hooks that call ``kill`` the first time ``spec`` is reached.

    Args:
        spec: Where to crash.
        kill: What crashing means (SIGKILL to this process; tests pass a recorder).
    """

    def __init__(self, spec: CrashSpec, kill: Callable[[], None] = sigkill_self):
        self.spec = spec
        self._kill = kill
        self._lock = threading.Lock()
        self.fired: str | None = None

    def _reached(self, point: str, op_id: str, attempt: int | None = None) -> None:
        if point != self.spec.point or not self.spec.matches(op_id):
            return
        with self._lock:
            if self.fired is not None:
                return
            self.fired = op_id
        where = f"{point} of {op_id}" + (f" (attempt {attempt})" if attempt else "")
        log.warning(
            "--crash-at %s: SIGKILL to myself (pid %d) at %s", self.spec, os.getpid(), where
        )
        for handler in log.handlers:
            handler.flush()
        sys.stderr.flush()
        self._kill()

    def before_claim(self, op_id: str) -> None:
        """Crashes here if the spec says so."""
        self._reached("before_claim", op_id)

    def before_execute(self, op_id: str, attempt: int) -> None:
        """Crashes here if the spec says so."""
        self._reached("before_execute", op_id, attempt)

    def after_execute(self, op_id: str, attempt: int) -> None:
        """Crashes here if the spec says so."""
        self._reached("after_execute", op_id, attempt)

    def after_record(self, op_id: str) -> None:
        """Crashes here if the spec says so."""
        self._reached("after_record", op_id)


def install(modules: Iterable[Any], hooks: InvocationHooks) -> list[str]:
    """Sets ``hooks`` on the runtime of every handler module that has ``get_runtime()``.

    The project's handlers build their ``Runtime`` once per execution environment through a
    module-level ``get_runtime()`` (the reconciler's returns ``(runtime, settings)``); calling
    it here builds it now, and every later invocation uses the same object, so
    ``Runtime.execute`` picks up ``runtime.hooks``.

    Args:
        modules: The imported handler modules.
        hooks: The hooks to install.

    Returns:
        The names of the modules whose runtime got the hooks.
    """
    installed: list[str] = []
    for module in modules:
        get_runtime = getattr(module, "get_runtime", None)
        if not callable(get_runtime):
            continue
        built = get_runtime()
        for runtime in built if isinstance(built, tuple) else (built,):
            if isinstance(runtime, Runtime):
                runtime.hooks = hooks
                installed.append(module.__name__)
    return installed
