"""A deterministic model for local mode, tests and the demo: answers come from a script.

A script is a list of turns. The turn answering a request is chosen by the **number of
assistant messages already in the request** (the conversation's turn index), not by call order:
a replayed run never calls the model, a retried call asks for the same turn again, and two runs
sharing one provider each start at turn 0. Several scripts can live in one file; a request is
answered by the first script whose ``match`` is a substring of the conversation's first user
message (and whose ``model_config``, if set, is the ``ModelConfig.name``), else by the script
without ``match``; scripts scoped to the request's ``model_config`` are tried before unscoped
ones. ``merge`` and ``scoped`` combine files: one per agent or model config.

File format (JSON)::

    [                                   # one script: a list of turns, or
      {"expect": "refund",              # optional: the last user message must contain this
       "content": [                     # the answer's blocks (our ContentBlock shape)
         {"type": "text", "text": "Let me look that up."},
         {"type": "tool_use", "name": "find_order", "input": {"order": "A-1"}}],
       "stop_reason": "tool_use",       # optional: tool_use if there are tool calls, else end_turn
       "usage": {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42},   # optional
       "fail_first": 0},                # optional: the first N calls raise ScriptedModelBusyError
      {"text": "Done."}                 # shorthand for one text block
    ]

    {"scripts": [{"name": "refunds", "match": "refund", "turns": [...]},
                 {"name": "default", "turns": [...]}]}

The provider counts calls per ``(script, turn)`` so a test can assert how often the model was
really asked (``calls_by_turn``). It is thread-safe.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from durable_agents.errors import ConfigurationError
from durable_agents.llm.types import (
    ContentBlock,
    LlmRequest,
    LlmResponse,
    Message,
    ModelConfig,
    ModelRequestError,
    StopReason,
    Usage,
)

_CHUNK = re.compile(r"\s*\S+\s*|\s+")


class ScriptMismatchError(ModelRequestError):
    """The conversation does not fit the script (an ``expect`` failed): the script drifted."""


class ScriptExhaustedError(ModelRequestError):
    """The conversation asked for a turn the script does not have (or no script matched)."""


class ScriptedModelBusyError(Exception):
    """A transient failure the script asked for (``fail_first``); retrying helps."""


class ScriptTurn(BaseModel):
    """One scripted answer.

    Attributes:
        expect: A substring the request's last user message (a question or tool results) must
            contain; tool results that are not text are matched as JSON.
        content: The answer's content blocks.
        text: Shorthand for a single text block (appended after ``content``).
        stop_reason: Why the model stopped (defaults from the content).
        usage: Token usage (defaults to word counts of the request and the answer).
        fail_first: The first N calls of this turn raise ``ScriptedModelBusyError``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    expect: str | None = None
    content: list[ContentBlock] = Field(default_factory=list)
    text: str | None = None
    stop_reason: StopReason | None = None
    usage: Usage | None = None
    fail_first: int = 0

    @model_validator(mode="after")
    def _has_answer(self) -> ScriptTurn:
        if not self.content and self.text is None:
            raise ValueError("a turn needs content or text")
        return self


class Script(BaseModel):
    """A named conversation.

    Attributes:
        name: The script's name (the key of its call counts).
        match: A substring of the conversation's first user message that selects this script.
        model_config_name: Only for this ``ModelConfig.name`` (JSON key ``model_config``).
        turns: The answers, by turn index.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, protected_namespaces=()
    )

    name: str = "default"
    match: str | None = None
    model_config_name: str | None = Field(default=None, alias="model_config")
    turns: list[ScriptTurn]


def _block_text(block: ContentBlock) -> str:
    if block.type == "text":
        return block.text or ""
    if block.type == "tool_result":
        content = block.content
        return content if isinstance(content, str) else json.dumps(content, default=str)
    return json.dumps(block.input or {}, default=str)


def _message_text(message: Message) -> str:
    return "\n".join(_block_text(b) for b in message.content)


def _words(text: str) -> int:
    return len(text.split())


class ScriptedProvider:
    """An ``LlmProvider`` whose answers are scripted (see the module docstring).

    Args:
        scripts: The scripts; at most one without ``match`` (the fallback).

    Raises:
        ConfigurationError: If two scripts share a name.
    """

    def __init__(self, scripts: Sequence[Script]):
        names = [s.name for s in scripts]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"scripted model: duplicate script names in {names}")
        self.scripts = list(scripts)
        self._lock = threading.Lock()
        self._calls: Counter[tuple[str, int]] = Counter()

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_turns(cls, turns: Iterable[Mapping[str, Any] | ScriptTurn]) -> ScriptedProvider:
        """A provider with one script.

        Raises:
            ConfigurationError: If a turn is malformed.
        """
        return cls.from_data(list(turns))

    @classmethod
    def from_data(cls, data: Any) -> ScriptedProvider:
        """A provider from the parsed JSON of a script file.

        Raises:
            ConfigurationError: If the data is not a valid script.
        """
        try:
            if isinstance(data, list):
                scripts = [Script(turns=data)]
            elif isinstance(data, Mapping) and "scripts" in data:
                scripts = [Script.model_validate(s) for s in data["scripts"]]
            else:
                raise ConfigurationError("a script is a list of turns or {'scripts': [...]}")
        except ValidationError as exc:
            raise ConfigurationError(f"invalid model script: {exc}") from exc
        return cls(scripts)

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedProvider:
        """A provider from a JSON script file.

        Raises:
            ConfigurationError: If the file cannot be read or is not a valid script.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigurationError(f"cannot read model script {path}: {exc}") from exc
        return cls.from_data(data)

    def scoped(self, config_name: str) -> ScriptedProvider:
        """The same scripts, answering only ``ModelConfig(name=config_name)`` requests.

        A script without a name of its own (a file that is a list of turns) is named after the
        config.

        Raises:
            ConfigurationError: If a script is already scoped to another config.
        """
        scripts = []
        for script in self.scripts:
            if script.model_config_name not in (None, config_name):
                raise ConfigurationError(
                    f"script {script.name!r} is for model config {script.model_config_name!r}, "
                    f"not {config_name!r}"
                )
            name = config_name if script.name == "default" else script.name
            scripts.append(
                script.model_copy(update={"model_config_name": config_name, "name": name})
            )
        return ScriptedProvider(scripts)

    @classmethod
    def merge(cls, sources: Sequence[tuple[str, ScriptedProvider]]) -> ScriptedProvider:
        """One provider answering from the scripts of several (one per agent or model config).

        Args:
            sources: ``(label, provider)`` pairs, in order; the label (a file) names a
                conflict.

        Raises:
            ConfigurationError: If two scripts share a name, or two fallbacks (no ``match``)
                would compete for the same model config.
        """
        scripts: list[Script] = []
        origin: dict[str, str] = {}
        fallbacks: dict[str | None, str] = {}
        for label, provider in sources:
            for script in provider.scripts:
                if script.name in origin:
                    raise ConfigurationError(
                        f"scripted model: script {script.name!r} of {label} is also in "
                        f"{origin[script.name]}; rename one"
                    )
                origin[script.name] = label
                if script.match is None:
                    scope = script.model_config_name
                    if scope in fallbacks:
                        what = f"model config {scope!r}" if scope else "every model config"
                        raise ConfigurationError(
                            f"scripted model: {label} and {fallbacks[scope]} both have a "
                            f"fallback script for {what}; scope one to its model config "
                            '(CONFIG=file, or "model_config" in the file)'
                        )
                    fallbacks[scope] = label
                scripts.append(script)
        return cls(scripts)

    # -- counting -------------------------------------------------------------------------------

    @property
    def calls(self) -> int:
        """How many times the model was called (failed calls included)."""
        with self._lock:
            return sum(self._calls.values())

    def calls_by_turn(self, script: str | None = None) -> dict[int, int]:
        """Calls per turn index of ``script`` (the only / fallback script by default)."""
        name = script if script is not None else self._default_name()
        with self._lock:
            return {turn: n for (s, turn), n in sorted(self._calls.items()) if s == name}

    def reset(self) -> None:
        """Forgets every call."""
        with self._lock:
            self._calls.clear()

    def _default_name(self) -> str:
        fallback = [s.name for s in self.scripts if s.match is None]
        return (fallback or [self.scripts[0].name])[0] if self.scripts else "default"

    # -- answering ------------------------------------------------------------------------------

    def select(self, config: ModelConfig, request: LlmRequest) -> tuple[Script, int]:
        """The script and turn index that answer this request.

        Raises:
            ScriptExhaustedError: If no script fits.
        """
        first = next((m for m in request.messages if m.role == "user"), None)
        opening = _message_text(first) if first else ""
        # Scripts scoped to this model config first: another agent's unscoped fallback (the
        # example's, say) never answers a config that has scripts of its own.
        candidates = [s for s in self.scripts if s.model_config_name == config.name]
        candidates += [s for s in self.scripts if s.model_config_name is None]
        chosen = next((s for s in candidates if s.match and s.match in opening), None)
        chosen = chosen or next((s for s in candidates if s.match is None), None)
        if chosen is None:
            raise ScriptExhaustedError(
                f"no script matches the conversation {opening[:80]!r}", code="NoScript"
            )
        return chosen, sum(1 for m in request.messages if m.role == "assistant")

    def _answer(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        script, index = self.select(config, request)
        with self._lock:
            self._calls[(script.name, index)] += 1
            seen = self._calls[(script.name, index)]
        if index >= len(script.turns):
            raise ScriptExhaustedError(
                f"script {script.name!r} has {len(script.turns)} turns; turn {index} was asked",
                code="ScriptExhausted",
            )
        turn = script.turns[index]
        users = [m for m in request.messages if m.role == "user"]
        last = _message_text(users[-1]) if users else ""
        if turn.expect is not None and turn.expect not in last:
            raise ScriptMismatchError(
                f"script {script.name!r} turn {index} expects {turn.expect!r} in the last "
                f"user message, got {last[:200]!r}",
                code="ScriptMismatch",
            )
        if seen <= turn.fail_first:
            raise ScriptedModelBusyError(
                f"scripted throttling ({seen}/{turn.fail_first}) at turn {index}"
            )
        content = [
            b.model_copy(update={"tool_use_id": f"tooluse-{script.name}-{index}-{i}"})
            if b.type == "tool_use" and not b.tool_use_id
            else b
            for i, b in enumerate(turn.content)
        ]
        if turn.text is not None:
            content.append(ContentBlock.of_text(turn.text))
        stop = turn.stop_reason or (
            "tool_use" if any(b.type == "tool_use" for b in content) else "end_turn"
        )
        usage = turn.usage
        if usage is None:
            asked = sum(_words(_message_text(m)) for m in request.messages)
            asked += _words(config.system_prompt)
            answered = sum(_words(_block_text(b)) for b in content)
            usage = Usage(input_tokens=asked, output_tokens=answered, total_tokens=asked + answered)
        return LlmResponse(content=content, stop_reason=stop, usage=usage, model_id=config.model_id)

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        """Returns the scripted answer for this conversation's turn.

        Raises:
            ScriptExhaustedError: If the script has no such turn (or no script fits).
            ScriptMismatchError: If the turn's ``expect`` is not in the last user message.
            ScriptedModelBusyError: For the first ``fail_first`` calls of a turn.
        """
        return self._answer(config, request)

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Callable[[str], Any]
    ) -> LlmResponse:
        """Like ``converse``, sending each text block to ``on_text`` word by word first.

        Raises:
            ScriptExhaustedError: If the script has no such turn (or no script fits).
            ScriptMismatchError: If the turn's ``expect`` is not in the last user message.
            ScriptedModelBusyError: For the first ``fail_first`` calls of a turn.
        """
        response = self._answer(config, request)
        for block in response.content:
            if block.type == "text" and block.text:
                for chunk in _CHUNK.findall(block.text):
                    on_text(chunk)
        return response
