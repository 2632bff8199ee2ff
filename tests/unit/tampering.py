"""Forged tokens for tests: a copy of a base64url text with one character certainly changed.

Why not ``text[:-2] + "AA"``: the real text ends in ``AA`` one run in a few hundred, and the
last character of a base64 text carries padding bits a lenient decoder ignores, so a change
there may decode to the same bytes. A character in the middle carries six bits that count.
"""

from __future__ import annotations


def changed_in_the_middle(text: str) -> str:
    """Return ``text`` with its middle character replaced by a different one.

    Raises:
        ValueError: if ``text`` has fewer than three characters (no middle to change).
    """
    if len(text) < 3:
        raise ValueError(f"nothing to change in the middle of {text!r}")
    at = len(text) // 2
    replacement = "B" if text[at] == "A" else "A"
    return f"{text[:at]}{replacement}{text[at + 1 :]}"
