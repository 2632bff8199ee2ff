"""Fixed-length views of lists that are only appended to: snapshots handed out in O(1).

A run's journal only grows: entries are written once and never changed or removed while the
run lives. So a store can keep each run's entries in one list and hand every load a
``PrefixView`` of it, the list's first ``n`` items for a load that saw ``n``, instead of a copy
(a copy of a 10,000-entry journal is ~140 µs of increfs per load, every load). Appending leaves
every view handed out as it was; anything else a view could see (an insert before the end, a
replacement) is made on a copy, which the owner then appends to instead (copy-on-write:
``KeyedLog``, ``extend_view``). See ADR 0018 (docs/adr/0018-o-tail-loads.md).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")

_EXTEND = threading.Lock()
"""Held while ``extend_view`` decides whether it may append to a view's list in place."""


class PrefixView(Sequence[T]):
    """The first ``length`` items of a list that is only ever appended to (read-only).

    Equal to a list, a tuple or another view holding equal items in the same order.
    Iterating is ``itertools.islice`` over the list (C speed); an index past ``length`` is an
    ``IndexError`` even while the list has more; a slice is a new list.

    Args:
        items: The list (the view's owner may append to it, never change what it holds).
        length: How many of its items the view holds (default: all it holds now).

    Raises:
        ValueError: If ``length`` is negative or more than ``items`` holds.
    """

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[T], length: int | None = None):
        n = len(items) if length is None else length
        if not 0 <= n <= len(items):
            raise ValueError(f"a view of {n} items of a list of {len(items)}")
        self._items = items
        self._length = n

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        n = self._length
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step == 1:
                return self._items[start:stop] if start < stop else []
            return [self._items[i] for i in range(start, stop, step)]
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("view index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[T]:
        return islice(self._items, self._length)

    def __reversed__(self) -> Iterator[T]:
        return reversed(self._items[: self._length])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PrefixView):
            if other._items is self._items:
                return other._length == self._length
            return self._length == other._length and self._items[: self._length] == list(other)
        if isinstance(other, list | tuple):
            return self._length == len(other) and self._items[: self._length] == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

    def __repr__(self) -> str:
        return repr(self._items[: self._length])

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (and deep-copied) as what it holds, not the whole list behind it.
        return (PrefixView, (self._items[: self._length],))

    def bisect_left(self, value: Any) -> int:
        """How many items sort below ``value`` (the items are in ascending order)."""
        return bisect.bisect_left(self._items, value, 0, self._length)


def extend_view(view: Sequence[T], more: Iterable[T]) -> PrefixView[T]:
    """``view``'s items followed by ``more``: appended in place when nothing can see it.

    In place when ``view`` is a ``PrefixView`` that ends where its list ends (no longer view
    of the list was made, so the items appended are past every view); otherwise on a copy of
    ``view``'s items. Only for views whose list belongs to the caller's cache (never one a
    store handed out: the store appends to that list itself).
    """
    if isinstance(view, PrefixView):
        with _EXTEND:
            items = view._items
            if len(items) == view._length:
                items.extend(more)
                return PrefixView(items)
    copied = list(view)
    copied.extend(more)
    return PrefixView(copied)


class KeyedLog(Generic[T]):
    """Items in ascending key order, handed out as views; copied before a view could change.

    Appending (a key after every other, the usual case) works in place. Inserting before the
    end or replacing an item works in place only if no view of the current list was handed
    out since it was made; otherwise on a copy, which later views are then made of. Not
    thread-safe: the owner holds its lock.
    """

    __slots__ = ("_items", "_keys", "_shared")

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._items: list[T] = []
        self._shared = False

    def __len__(self) -> int:
        return len(self._keys)

    def put(self, key: str, item: T) -> None:
        """Adds ``item`` under ``key``, or replaces the item ``key`` holds."""
        keys = self._keys
        if not keys or key > keys[-1]:
            keys.append(key)
            self._items.append(item)
            return
        if self._shared:
            self._items = list(self._items)
            self._shared = False
        at = bisect.bisect_left(keys, key)
        if keys[at] == key:
            self._items[at] = item
        else:
            keys.insert(at, key)
            self._items.insert(at, item)

    def view(self) -> PrefixView[T]:
        """The items as they are now (unchanged by anything ``put`` does later)."""
        self._shared = True
        # ``PrefixView(items)`` without its checks or call: a warm sticky invocation reads two
        # views per step.
        view: PrefixView[T] = object.__new__(PrefixView)
        view._items = items = self._items
        view._length = len(items)
        return view
