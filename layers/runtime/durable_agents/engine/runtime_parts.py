"""The parts of a runtime every invocation holds, kept as one dict (``RuntimeParts``).

An ``Invocation`` holds the runtime's clock, credentials, model providers, stream sink,
registry, wait scheduler and memory store as attributes of its own: its operations read them
on every step. A new invocation is given them as keyword arguments, and a parked agent's
invocation is renewed with them (``Invocation.renew``, ADR 0017). Both take them from
``RuntimeParts.invocation_services``, one dict that is made again only when one of the parts
is set on the runtime, so a parked agent whose invocation holds that very dict is not handed
it again on every step, and a part set meanwhile still reaches it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parts' types only
    from durable_agents.agent import AgentRegistry
    from durable_agents.core.clock import Clock
    from durable_agents.core.credentials import CredentialProvider
    from durable_agents.engine.memory_store import MemoryStore
    from durable_agents.engine.ports import InvocationServices
    from durable_agents.engine.wait_scheduler import WaitScheduler
    from durable_agents.llm.types import LlmProvider, StreamSink

__all__ = ["PARTS", "RuntimeParts"]

PARTS = frozenset(
    {"clock", "credentials", "providers", "stream_sink", "registry", "wait_scheduler", "memory"}
)
"""The attributes of a runtime that every invocation holds (``RuntimeParts.current_parts``)."""


class RuntimeParts:
    """Keeps ``invocation_services`` as the runtime's parts are (a base class of ``Runtime``).

    The subclass sets every name of ``PARTS`` in its ``__init__`` and then calls
    ``keep_parts``; from then on, setting one of them makes the dict again.

    Attributes:
        invocation_services: The parts every invocation holds, by attribute name (read it,
            never change it).

    Example:
        >>> from durable_agents.core.clock import SkipClock
        >>> from durable_agents.journal.memory import InMemoryJournal
        >>> from durable_agents.engine.runtime import Runtime
        >>> runtime = Runtime(InMemoryJournal(), clock=SkipClock())
        >>> parts = runtime.invocation_services
        >>> runtime.invocation_services is parts  # the same dict while nothing is set
        True
        >>> runtime.clock = later = SkipClock(start_ms=1_800_000_000_000)
        >>> runtime.invocation_services is parts, runtime.invocation_services["clock"] is later
        (False, True)
    """

    invocation_services: InvocationServices
    clock: Clock
    credentials: CredentialProvider | None
    providers: dict[str, LlmProvider]
    stream_sink: StreamSink | None
    registry: AgentRegistry
    wait_scheduler: WaitScheduler | None
    memory: MemoryStore | None

    def keep_parts(self) -> None:
        """Makes ``invocation_services`` from the parts as they are now (once all are set)."""
        self.invocation_services = self.current_parts()

    def current_parts(self) -> InvocationServices:
        """The parts, by attribute name, as they are now.

        One list for a new invocation and a renewed one, so a part added here (and to
        ``PARTS``) reaches both.
        """
        return {
            "clock": self.clock,
            "credentials": self.credentials,
            # The runtime's own dict (what is added to it later reaches invocations); a
            # caller may have set None.
            "providers": {} if self.providers is None else self.providers,
            "stream_sink": self.stream_sink,
            "registry": self.registry,
            "wait_scheduler": self.wait_scheduler,
            "memory": self.memory,
        }

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in PARTS and "invocation_services" in self.__dict__:
            # The next invocation, a parked agent's too, holds the new part.
            self.invocation_services = self.current_parts()
