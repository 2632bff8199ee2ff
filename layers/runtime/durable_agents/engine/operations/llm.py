"""``ctx.llm``: one model call = one recorded operation; replays never call the model."""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

from durable_agents.core.log_context import log_safely
from durable_agents.core.models import OpKind
from durable_agents.core.semantics import StepSemantics
from durable_agents.engine.fingerprints import Fingerprint
from durable_agents.engine.flow.calls import CallLimits
from durable_agents.engine.flow.rates import model_rate_limit
from durable_agents.engine.operations.step import StepInfo, run_step
from durable_agents.errors import ConfigurationError
from durable_agents.flow_control import BudgetExceededError
from durable_agents.llm.types import (
    LlmProvider,
    LlmRequest,
    LlmResponse,
    ModelConfig,
    ModelRequestError,
    ModelThrottledError,
    StreamSink,
)
from durable_agents.retry import RetryPolicy

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope

_log = logging.getLogger("durable_agents.llm.streams")

# Model calls fail transiently (throttling, timeouts); they are safe to repeat (at least once).
# A bad request or a missing provider fails the same way every time: never retried.
LLM_RETRY = RetryPolicy(
    max_attempts=4,
    initial_delay_seconds=2,
    backoff_rate=2,
    jitter=0.5,
    non_retryable=(ModelRequestError, ConfigurationError, BudgetExceededError),
)


class ProviderNotConfiguredError(ConfigurationError):
    """A model call names a provider this deployment does not configure: the run pauses."""

    recorded_fields = ("provider", "registered")

    def __init__(self, provider: str, registered: list[str]):
        self.provider = provider
        self.registered = registered
        super().__init__(
            f"no model provider {provider!r} is configured here; registered: {registered}; "
            "configure it and redrive the run"
        )


class _SafeSink:
    """Forwards chunks to the stream cache; a failing cache never fails the model call."""

    def __init__(self, sink: StreamSink | None, run_id: str, op_id: str, attempt: int):
        self._sink = sink
        self._key = (run_id, op_id, attempt)
        self._seq = itertools.count(1)
        self.failed = False

    def _call(self, method: str, *args: Any) -> None:
        if self._sink is None or self.failed:
            return
        try:
            getattr(self._sink, method)(*self._key, *args)
        except Exception:
            self.failed = True
            # Even a broken log handler must not fail the model call (log_safely).
            log_safely(
                _log,
                logging.WARNING,
                "stream cache unavailable for %s; the step goes on",
                self._key[1],
            )

    def begin(self) -> None:
        self._call("begin")

    def text(self, chunk: str) -> None:
        self._call("append", next(self._seq), chunk)

    def end(self) -> None:
        self._call("end")


def request_fingerprint(request: LlmRequest, config: ModelConfig) -> Fingerprint:
    """The call's input: the request and which model configuration (name, version, model id).

    The rest of the configuration (prompt, temperature, …) is covered by its version, which
    must change when any of it does.
    """
    model = [config.name, config.version, config.model_id]
    return Fingerprint.of_value({"model": model, "request": request})


def run_llm(
    ctx: OperationScope,
    name: str,
    request: LlmRequest,
    config: ModelConfig,
    *,
    stream: bool,
    retry: RetryPolicy | None,
) -> LlmResponse:
    """Calls the model once per recorded operation (see ``DurableContext.llm``).

    Raises:
        ProviderNotConfiguredError: If no provider is registered for ``config.provider`` (the
            run pauses: nothing is recorded, and a redrive after the fix calls the model).
    """
    inv = ctx.invocation
    provider: LlmProvider | None = None
    # Its tree's budget and its configuration's rate limit (ADR 0030), looked at before the
    # claim: a call that must wait records nothing.
    limits = CallLimits(
        inv,
        f"model#{config.name}",
        model_rate_limit(config.requests_per_minute, config.tokens_per_minute),
        (config.input_usd_per_mtok, config.output_usd_per_mtok),
    )

    def ready() -> None:
        # Looked up here, after the step budget was taken, not before ``run_step``: a parked
        # agent goes on from there in a later invocation, whose runtime may hold another
        # provider, or none (ADR 0017).
        nonlocal provider
        provider = inv.providers.get(config.provider)
        if provider is None:  # a deployment question for a person, not the agent's error
            inv.fault = ProviderNotConfiguredError(config.provider, sorted(inv.providers))
            raise inv.fault
        limits.before()

    def call(info: StepInfo) -> LlmResponse:
        assert provider is not None  # looked up by ready() before the claim
        limits.inside()
        try:
            if not stream:
                answer: LlmResponse = provider.converse(config, request)
            else:
                sink = _SafeSink(inv.stream_sink, inv.run_id, info.operation_id, info.attempt)
                sink.begin()
                answer = provider.converse_stream(config, request, sink.text)
                sink.end()
        except ModelThrottledError:
            # Counted, then backed off durably by the step (not a failed attempt).
            limits.throttled(f"throttle#{config.provider}#{config.model_id}")
            raise
        # Counted before the result is recorded: a call the journal holds was counted, and a
        # repeated one (a crash in between) is not counted again (the charge's key is its id).
        limits.after(info.operation_id, answer.usage.input_tokens, answer.usage.output_tokens)
        return answer

    response: LlmResponse = run_step(
        ctx,
        call,
        (),
        name,
        retry or LLM_RETRY,
        StepSemantics.AT_LEAST_ONCE,
        LlmResponse,
        kind=OpKind.LLM,
        pass_info=True,
        fingerprint=request_fingerprint(request, config),
        ready=ready,
    )
    return response
