"""The limits every request body, id, key and cursor is held to (docs/security.md, "Limits").

Each one turns a request that would crash the function (a 502 from API Gateway, and an
invocation spent) into a 4xx that says what is wrong. They are checked before anything is
parsed or read from the table.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

# The limits every request is held to (docs/security.md, "Limits"): each one turns a request
# that would crash the function (a 502 from API Gateway) into a 4xx that says what is wrong.
MAX_JSON_BODY_BYTES = 256 * 1024  # the largest payload the journal and the bus carry
MAX_LINK_BODY_BYTES = 16 * 1024  # a decision and a comment; the route is auth NONE
MAX_JSON_DEPTH = 32  # json.loads recurses: ~1,000 levels is a RecursionError
MAX_NUMBER_CHARS = 100  # int() of 4,300+ digits raises ValueError (and is quadratic below)
MAX_FORM_FIELDS = 20
MAX_KEY_CHARS = 256  # Idempotency-Key, stream cursors
MAX_CURSOR_CHARS = 1024  # a DynamoDB key is at most 2,048 bytes (hash) + 1,024 (range)

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class BadRequest(Exception):
    """The request is malformed (not JSON, wrong parameter)."""


class PayloadTooLargeError(Exception):
    """The body is larger than the route accepts (413)."""


def body_text(event: APIGatewayProxyEvent, *, limit: int = MAX_JSON_BODY_BYTES) -> str | None:
    """The body as text (None when empty), at most ``limit`` bytes of UTF-8.

    Raises:
        PayloadTooLargeError: If it is longer than ``limit`` bytes.
        BadRequest: If it is marked base64 but is not, or is not UTF-8.
    """
    body = event.body
    if body is None or body == "":
        return None
    too_large = PayloadTooLargeError(f"the body exceeds {limit} bytes, the most this route accepts")
    if event.is_base64_encoded:
        if len(body) > (limit + 2) // 3 * 4 + 4:  # checked before decoding anything
            raise too_large
        try:
            data = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest("the body is marked base64 but is not valid base64") from exc
    else:
        if len(body) > limit:  # a character is at least a byte: no need to encode first
            raise too_large
        data = body.encode("utf-8", errors="surrogatepass")
    if len(data) > limit:
        raise too_large
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"the body is not UTF-8 (invalid byte at position {exc.start})") from exc


def _check_depth(text: str) -> None:
    """Rejects JSON nested deeper than ``MAX_JSON_DEPTH`` before ``json.loads`` recurses into it."""
    depth = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            raise BadRequest(f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels")


def _number(parse: type[int] | type[float]) -> Any:
    def parse_bounded(literal: str) -> int | float:
        if len(literal) > MAX_NUMBER_CHARS:
            raise BadRequest(
                f"a number in the body has {len(literal)} characters; at most "
                f"{MAX_NUMBER_CHARS} digits are accepted"
            )
        return parse(literal)

    return parse_bounded


def _no_constant(literal: str) -> Any:
    raise BadRequest(f"{literal} is not JSON; send numbers as finite values")


def parse_json(text: str) -> Any:
    """Parses JSON under the depth and number-length limits, into valid Unicode only.

    Raises:
        BadRequest: If it is not JSON, too deep, has a number too long, NaN or Infinity, or a
            string (a key or a value, at any depth) with a lone surrogate.
    """
    _check_depth(text)
    try:
        value = json.loads(
            text,
            parse_int=_number(int),
            parse_float=_number(float),
            parse_constant=_no_constant,
        )
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc.msg} at position {exc.pos}") from exc
    except RecursionError as exc:  # the depth check counts brackets; this is a second fence
        raise BadRequest(f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels") from exc
    check_unicode(text, value)
    return value


# A JSON escape of a UTF-16 surrogate (``\ud800``-``\udfff``): the only way valid UTF-8 text
# parses into a string with one. (A backslash escaped before a "u" matches too: a false
# alarm that costs a walk, never a miss.)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def check_unicode(text: str, value: Any) -> None:
    r"""Refuses a parsed body holding a string that is not valid Unicode (a lone surrogate).

    ``json.loads`` turns ``"\ud83d"`` (an escape, in a body that is valid UTF-8) into a
    ``str`` that nothing can encode: taken in, it was recorded as an event or an outcome,
    and the run that read it failed (``PayloadError ... surrogates not allowed``). A pair
    (``"\ud83d\ude00"``) is one character, and accepted.

    Raises:
        BadRequest: If ``text`` or any key or string of ``value`` has a lone surrogate.
    """
    if not _encodes(text):
        raise BadRequest(_NOT_UNICODE.format(where="the body"))
    if _SURROGATE_ESCAPE.search(text) is None:
        return  # nothing was escaped as a surrogate: every string is what the text held
    pending: list[tuple[str, Any]] = [("$", value)]
    while pending:  # no recursion: the depth is bounded, but a loop needs no stack at all
        path, item = pending.pop()
        if isinstance(item, str):
            if not _encodes(item):
                raise BadRequest(_NOT_UNICODE.format(where=f"the string at {path}"))
        elif isinstance(item, dict):
            for key, child in item.items():
                if not _encodes(key):
                    raise BadRequest(_NOT_UNICODE.format(where=f"a key in {path}"))
                pending.append((f"{path}.{key}"[:200], child))
        elif isinstance(item, list):
            pending.extend((f"{path}[{i}]"[:200], child) for i, child in enumerate(item))


_NOT_UNICODE = (
    "{where} is not valid Unicode (a lone surrogate, such as an unpaired \\ud83d escape); "
    "send text as UTF-8, or escape a character outside the BMP as a surrogate pair"
)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_key(value: str, what: str) -> str:
    """Rejects a client-chosen key (``Idempotency-Key``, a stream cursor) that is not a key.

    Raises:
        BadRequest: If it is longer than ``MAX_KEY_CHARS`` or has unprintable characters.
    """
    if len(value) > MAX_KEY_CHARS:
        raise BadRequest(f"{what} is {len(value)} characters; at most {MAX_KEY_CHARS} accepted")
    if not value.isprintable():
        raise BadRequest(f"{what} must be printable characters (no control characters)")
    return value
