"""The traceback a recorded error keeps: scrubbed, bounded, and the same on every replay.

A failed step, tool, batch branch or run records where it failed beside its type and message
(``ErrorInfo.traceback``). The text is made once, when the error is recorded, and replays
give it back as it was (``recorded_traceback`` on the rebuilt error); it is never made again
from a replay's frames.

The text reads like Python's own, with these differences:

* **Positions, not source**: each frame is its file, line and function, without the source
  line Python would print. The record holds what happened at run time; a source line is code
  text, and one holding a literal (``Secret("…")``, a key pasted into a test) would copy it
  into the journal, the console and the CLI where scrubbing cannot know it. Locals are never
  captured either.
* **Scrubbed**: revealed secrets are masked, as in the message (an exception line can hold a
  key).
* **Runtime frames folded**: a run of frames inside the ``durable_agents`` package reads as
  one ``[durable-agents runtime frames]`` line. What the runtime's frames are differs between a
  first run and a replay (the same error is re-raised from another place), the agent's do not,
  so a story that includes an error re-raised from the journal reads the same both ways. The
  innermost run is kept when the error was raised there (a value the serializer refused).
* **Bounded** to ``MAX_CHARS`` characters: each exception's ``Type: message`` lines are cut to
  ``EXCEPTION_LINE_CHARS`` (the full message is in the record's ``message``); a frame repeated
  more than three times in a row is folded as Python does (``[Previous line repeated N more
  times]``); and when the frames are still too many the *outermost* ones are left out (a
  marker says how many): where the error was raised, and the exception lines, are what a
  reader needs. An error re-raised from the journal carries its recorded story, which stands in
  for its causes (on a first run the live cause is there too, on a replay it is not: leaving
  it out keeps both the same).
"""

from __future__ import annotations

import contextlib
import os
import traceback
from pathlib import Path

from durable_agents.core.scrub import scrub

MAX_CHARS = 8192
"""At most this many characters of traceback per recorded error (DynamoDB items stop at
400 KB; a batch's error keeps up to ten branch errors)."""

EXCEPTION_LINE_CHARS = 1024
"""At most this many characters of each ``Type: message`` line in the traceback."""

ATTRIBUTE = "recorded_traceback"
"""The attribute a rebuilt error carries its recorded traceback in (never recorded itself)."""

MAX_CHAIN = 5
"""At most this many exceptions of a ``__cause__`` / ``__context__`` chain are told."""

RUNTIME_FRAMES = "  [durable-agents runtime frames]\n"
_HEADER = "Traceback (most recent call last):\n"
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"
_REPLAYED = "\nThe above was recorded, and the error re-raised from the journal here:\n\n"
_FRAME_CHARS = 1024  # one frame's line (a very long path or name is cut, not the frame)
_REPEATS_SHOWN = 3  # as Python's own tracebacks: three, then "[Previous line repeated N ...]"
_RUNTIME_DIR = str(Path(__file__).resolve().parent.parent) + os.sep


def recorded_traceback(exc: BaseException) -> str | None:
    """The traceback text a failure of ``exc`` is recorded with.

    Args:
        exc: The exception being recorded.

    Returns:
        The scrubbed text, at most ``MAX_CHARS`` characters; ``None`` when ``exc`` was never
        raised (an error the runtime builds and records without raising has no frames) and
        carries no recorded traceback.
    """
    chain = _chain(exc)
    if all(e.__traceback__ is None and carried(e) is None for e, _ in chain):
        return None
    budget = MAX_CHARS // len(chain)
    parts: list[str] = []
    for e, joint in chain:
        parts.append(joint)
        parts.append(_segment(e, budget))
    return _tail(scrub("".join(parts)), MAX_CHARS)


def told_because(exc: BaseException, what: str, story: str | None) -> str | None:
    """The traceback of an error the runtime raises because of an earlier recorded failure.

    A batch that fails beyond its policy is such an error (``BatchFailedError``): it was
    never raised where anything went wrong, so its own frames say nothing. Its story is the
    recorded traceback of the failure that caused it, then its own exception line.

    Args:
        exc: The error being recorded (not raised yet).
        what: What failed first, as a reader knows it (``branch-1 of map 'prices'``).
        story: That failure's recorded traceback (None: it has none, nor has ``exc``).

    Returns:
        The scrubbed text, at most ``MAX_CHARS`` characters, or None.
    """
    if story is None:
        return None
    own = _told(exc, MAX_CHARS // 4, keep_inner_runtime=False)
    joint = f"\nThe failure of {what} above made the following error:\n\n"
    room = max(MAX_CHARS - len(own) - len(joint), 0)
    return _tail(scrub(_tail(story.rstrip("\n") + "\n", room) + joint + own), MAX_CHARS)


def carried(exc: BaseException) -> str | None:
    """The traceback ``exc`` was rebuilt with from the journal, if it was."""
    text = getattr(exc, ATTRIBUTE, None)
    return text if isinstance(text, str) else None


def attach(exc: BaseException, text: str | None) -> None:
    """Gives a rebuilt ``exc`` its recorded traceback (as ``recorded_traceback``).

    An exception class that refuses attributes (``__slots__`` without ``__dict__``) goes
    without: the record still holds the text.
    """
    with contextlib.suppress(AttributeError, TypeError):
        setattr(exc, ATTRIBUTE, text)


def _chain(exc: BaseException) -> list[tuple[BaseException, str]]:
    """``exc`` and the exceptions it was raised from or during, the earliest first.

    Each comes with the line that joins it to the one before (``""`` for the first).
    """
    links: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    joint = ""
    while current is not None and id(current) not in seen and len(links) < MAX_CHAIN:
        seen.add(id(current))
        links.append((current, joint))
        if carried(current) is not None:
            break  # its recorded story stands in for its causes (see the module docstring)
        if current.__cause__ is not None:
            current, joint = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, joint = current.__context__, _CONTEXT
        else:
            current = None
    # Reversed, each joint belongs before the exception that was raised because of the other.
    ordered = list(reversed(links))
    return [(e, ordered[i - 1][1] if i else "") for i, (e, _) in enumerate(ordered)]


def _segment(exc: BaseException, budget: int) -> str:
    recorded = carried(exc)
    own = _told(exc, budget // 4 if recorded is not None else budget, recorded is None)
    if recorded is None:
        return own
    story = _tail(recorded.rstrip("\n") + "\n", max(budget - len(own) - len(_REPLAYED), 0))
    return story + _REPLAYED + own


def _told(exc: BaseException, budget: int, keep_inner_runtime: bool) -> str:
    """One exception's frames and lines, outer frames left out past ``budget``."""
    # lookup_lines=False: positions only, no source read (see the module docstring).
    summary = traceback.TracebackException(
        type(exc), exc, exc.__traceback__, lookup_lines=False, capture_locals=False
    )
    lines = "".join(summary.format_exception_only())
    if len(lines) > EXCEPTION_LINE_CHARS:
        lines = lines[: EXCEPTION_LINE_CHARS - 2] + "…\n"
    frames = _frames(list(summary.stack), keep_inner_runtime)
    if not frames:
        return lines
    left_out = 0
    room = budget - len(_HEADER) - len(lines) - 80  # 80: the marker line
    while frames and sum(len(f) for f in frames) > room:
        frames.pop(0)  # the outermost goes first: where it was raised is what matters
        left_out += 1
    marker = f"  [{left_out} outer frame line(s) left out]\n" if left_out else ""
    return _HEADER + marker + "".join(frames) + lines


def _frames(stack: list[traceback.FrameSummary], keep_inner_runtime: bool) -> list[str]:
    groups: list[tuple[bool, list[traceback.FrameSummary]]] = []
    for frame in stack:
        runtime = frame.filename.startswith(_RUNTIME_DIR)
        if groups and groups[-1][0] == runtime:
            groups[-1][1].append(frame)
        else:
            groups.append((runtime, [frame]))
    out: list[str] = []
    for i, (runtime, frames) in enumerate(groups):
        if runtime and not (i == len(groups) - 1 and keep_inner_runtime):
            out.append(RUNTIME_FRAMES)
        else:
            out.extend(_positions(frames))
    return out


def _positions(frames: list[traceback.FrameSummary]) -> list[str]:
    """``File "…", line N, in name`` per frame; a frame repeated in a row is folded."""
    out: list[str] = []
    start = 0
    while start < len(frames):
        frame = frames[start]
        end = start + 1
        while end < len(frames) and _where(frames[end]) == _where(frame):
            end += 1
        text = f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n'
        if len(text) > _FRAME_CHARS:
            text = text[: _FRAME_CHARS - 2] + "…\n"
        count = end - start
        out.extend([text] * min(count, _REPEATS_SHOWN))
        if count > _REPEATS_SHOWN:
            out.append(f"  [Previous line repeated {count - _REPEATS_SHOWN} more times]\n")
        start = end
    return out


def _where(frame: traceback.FrameSummary) -> tuple[str, int | None, str]:
    return frame.filename, frame.lineno, frame.name


def _tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text``, from a line start, marked as cut."""
    if len(text) <= limit:
        return text
    marker = "[earlier lines left out]\n"
    cut = text[len(text) - max(limit - len(marker), 0) :]
    newline = cut.find("\n")
    return marker + (cut[newline + 1 :] if newline >= 0 else cut)
