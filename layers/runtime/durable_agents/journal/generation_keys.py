"""Which keys of a run's partition belong to which generation (continue-as-new, ADR 0016).

Generation 0 keeps the layout of ADR 0001 (positions are digits and ``/``). Generation
``g >= 1`` prefixes its positions with ``G<g:06d>:``, so its entries are the keys
``J#G<g:06d>:…`` and its side-effect records ``S#G<g:06d>:…``: one key prefix each, which a
DynamoDB Query reads with ``begins_with`` and never touches another generation's items. ``G``
sorts after every digit, so all of generation 0's entries come first.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from durable_agents.core.ids import POSITION_WIDTH
from durable_agents.errors import EffectNotFoundError

GENERATION_DIGITS = 6


def pos_prefix(generation: int) -> str:
    """The position prefix of a generation's root scope (empty for generation 0)."""
    if generation < 0:
        raise ValueError(f"a generation is never negative: {generation}")
    return "" if generation == 0 else f"G{generation:0{GENERATION_DIGITS}d}:"


def id_prefix(run_id: str, generation: int) -> str:
    """The operation-id prefix of a generation's root scope (``<run_id>:`` for generation 0)."""
    return f"{run_id}:" if generation == 0 else f"{run_id}:g{generation}/"


def generation_of(position: str) -> int:
    """The generation a position belongs to."""
    if position.startswith("G"):
        return int(position[1 : 1 + GENERATION_DIGITS])
    return 0


def entry_prefix(generation: int) -> str:
    """The sort-key prefix of a generation's entries (generation >= 1)."""
    return f"J#{pos_prefix(generation)}"


def effect_prefix(generation: int) -> str:
    """The sort-key prefix of a generation's side-effect records (generation >= 1)."""
    return f"S#{pos_prefix(generation)}"


def generation_keys(keys: Sequence[str], generation: int) -> Sequence[str]:
    """The entry keys of one generation, from a run's sorted entry keys (bisections).

    Generation 0's keys are the ones before every ``J#G…`` key, and its migration records
    (``J#~m…``, after them).
    """
    if generation == 0:
        return [*keys[: bisect.bisect_left(keys, "J#G")], *keys[bisect.bisect_left(keys, "J#~") :]]
    prefix = entry_prefix(generation)
    start = bisect.bisect_left(keys, prefix)
    # ":" + 1 is ";": the first key past every key that starts with the prefix.
    return keys[start : bisect.bisect_left(keys, prefix[:-1] + ";", lo=start)]


def key_ranges(kind: str, generation: int) -> list[tuple[str, str]]:
    """The inclusive sort-key ranges of a generation's items of one kind (``J`` or ``S``).

    Generation 0's positions start with a digit (``J#0…`` to before ``J#:``), and its
    migration records with ``~m`` (``J#~…``; DEL, 0x7f, sorts after ``~``); generation
    ``g >= 1``'s all start with ``G<g:06d>:`` (to before ``…;``, the next character after ``:``).
    """
    if generation == 0:
        digits = (f"{kind}#0", f"{kind}#:")
        return [digits, (f"{kind}#~", f"{kind}#\x7f")] if kind == "J" else [digits]
    prefix = f"{kind}#{pos_prefix(generation)}"
    return [(prefix, prefix[:-1] + ";")]


def split_op_id(rest: str) -> tuple[str, str]:
    """Splits what follows ``<run_id>:`` in an op id into its position prefix and the rest.

    ``g3/fetch:2`` is ``("G000003:", "fetch:2")``; an op id of generation 0 is unchanged.
    """
    head, sep, tail = rest.partition("/")
    # ASCII digits only: ``str.isdigit`` also takes "²" (which ``int`` then refuses) and
    # "٣" (which ``int`` reads as 3, a second spelling of the same id).
    if sep and _GENERATION.fullmatch(head):
        return pos_prefix(int(head[1:])), tail
    return "", rest


_GENERATION = re.compile(r"g[0-9]{1,9}")
# Matched with ``fullmatch``: ``$`` would also take a trailing newline.
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}:([0-9]{1,9})")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def locate(operation_id: str) -> tuple[str, str]:
    """Returns the run id and position encoded in an operation id.

    Raises:
        EffectNotFoundError: If the id is not of the form
            ``<run_id>:[g<n>/]<name>:<n>[/<name>:<n>]``, whole (no trailing newline): a run id
            and names as ``core.ids`` checks them, ``<n>`` ASCII digits.
    """
    run_id, sep, rest = operation_id.partition(":")
    # The run id is read from the table next: one that no run can have is not looked up.
    if not sep or not _RUN_ID.fullmatch(run_id):
        raise EffectNotFoundError(operation_id)
    # A generation after the first (continue-as-new) names itself first: ``g<n>/``.
    generation, rest = split_op_id(rest)
    positions = []
    for segment in rest.split("/"):
        match = _SEGMENT.fullmatch(segment)
        if match is None:
            raise EffectNotFoundError(operation_id)
        positions.append(f"{int(match.group(1)):0{POSITION_WIDTH}d}")
    return run_id, generation + "/".join(positions)
