"""DynamoDB's size limits, measured the way DynamoDB measures them.

DynamoDB refuses an item over 400 KB (``ITEM_LIMIT_BYTES``) and a transaction whose items add
up to more than 4 MB (``TRANSACTION_LIMIT_BYTES``). The limit is per *item*, not per value, so
the codec decides spilling to S3 per item: it measures the whole item and moves its largest
values out until the item is under ``ITEM_BUDGET_BYTES``.

Budgets (the margins are for safety, not precision — the measurement below follows the AWS
rules, but a wrong guess costs a refused write mid-run):

* ``ITEM_BUDGET_BYTES`` = 350,000: an item is filled to at most this (the limit less ~60 KB, the
  same margin AWS's own large-item helpers use).
* ``HEADER_VALUE_BUDGET_BYTES`` = 100,000: the run header is updated in place without being read
  first, so its large values (``input``, ``result``, ``error``) are each kept inline only up to
  this. Three of them plus the rest of the header (``HEADER_REST_BUDGET_BYTES``) stay under
  ``ITEM_BUDGET_BYTES`` whatever combination of updates lands.
* ``TRANSACTION_BUDGET_BYTES`` = 3,500,000: the items of one TransactWriteItems call together.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from durable_agents.errors import PayloadError

ITEM_LIMIT_BYTES = 400 * 1024
TRANSACTION_LIMIT_BYTES = 4 * 1024 * 1024
ITEM_BUDGET_BYTES = 350_000
HEADER_VALUE_BUDGET_BYTES = 100_000
HEADER_REST_BUDGET_BYTES = ITEM_BUDGET_BYTES - 3 * HEADER_VALUE_BUDGET_BYTES
TRANSACTION_BUDGET_BYTES = 3_500_000


class ItemTooLargeError(PayloadError):
    """An item stays over its size budget even with every spillable value moved to S3.

    Attributes:
        key: The item's ``pk``/``sk``.
        size: Its size in bytes, after spilling what could be spilled.
        budget: The size it had to fit.
        reason: Why it did not fit (no payload bucket, or what is left is too large).
    """

    def __init__(self, key: str, size: int, budget: int, reason: str):
        self.key = key
        self.size = size
        self.budget = budget
        self.reason = reason
        super().__init__(f"item {key} is {size} bytes, over the {budget}-byte budget: {reason}")


def item_size(item: dict[str, Any]) -> int:
    """The size DynamoDB counts for an item: every attribute name plus its value."""
    return sum(attribute_size(name, value) for name, value in item.items())


def attribute_size(name: str, value: dict[str, Any]) -> int:
    """The size of one attribute (its name in UTF-8 plus its typed value)."""
    return len(name.encode()) + value_size(value)


def value_size(value: dict[str, Any]) -> int:
    """The size of one typed attribute value (``{"S": ...}``, ``{"M": {...}}``, ...).

    Raises:
        ValueError: If the value is not a DynamoDB attribute value.
    """
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "B":
        return len(inner)
    if kind == "N":
        return _number_size(str(inner))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode()) for s in inner)
    if kind == "NS":
        return sum(_number_size(str(n)) for n in inner)
    if kind == "BS":
        return sum(len(b) for b in inner)
    # Lists and maps: 3 bytes of overhead plus 1 byte per element (AWS's rule).
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + value_size(v) for k, v in inner.items())
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in inner)
    raise ValueError(f"not a DynamoDB attribute value: {kind!r}")


def _number_size(text: str) -> int:
    # One byte per two significant digits, plus one; leading and trailing zeros do not count.
    try:
        digits = format(abs(Decimal(text)).normalize(), "f").replace(".", "").strip("0")
    except InvalidOperation:
        digits = text
    return (len(digits) + 1) // 2 + 1


def transaction_put_budget(puts: int, *, with_update: bool) -> int:
    """The budget of each Put in one TransactWriteItems call.

    The run header update counts at its whole budget (it is never larger), and the Puts share
    what is left of ``TRANSACTION_BUDGET_BYTES`` — so a transaction of many large items spills
    more of them instead of being refused.
    """
    left = TRANSACTION_BUDGET_BYTES - (ITEM_BUDGET_BYTES if with_update else 0)
    return min(ITEM_BUDGET_BYTES, left // max(puts, 1))
