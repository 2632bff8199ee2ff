"""``PrefixView``, ``extend_view`` and ``KeyedLog``: what a snapshot's entries are (ADR 0018)."""

from __future__ import annotations

import copy
import pickle

import pytest

from durable_agents.journal.prefix_view import KeyedLog, PrefixView, extend_view


def test_a_view_holds_its_length_of_items_while_the_list_grows() -> None:
    items = [1, 2, 3]
    view = PrefixView(items)
    items.append(4)
    assert len(view) == 3
    assert list(view) == [1, 2, 3]
    assert view[-1] == 3
    assert view[0] == 1
    with pytest.raises(IndexError):
        view[3]
    with pytest.raises(IndexError):
        view[-4]
    assert list(reversed(view)) == [3, 2, 1]
    assert 4 not in view and 3 in view
    assert repr(view) == "[1, 2, 3]"


def test_slices_stop_at_the_view_and_are_lists() -> None:
    items = [1, 2, 3, 4, 5]
    view = PrefixView(items, 3)
    assert view[1:] == [2, 3] and type(view[1:]) is list
    assert view[:10] == [1, 2, 3]
    assert view[5:] == []
    assert view[::-1] == [3, 2, 1]
    assert view[::2] == [1, 3]
    assert view[-2:] == [2, 3]


def test_a_view_equals_lists_tuples_and_views_of_the_same_items() -> None:
    items = [1, 2, 3, 4]
    view = PrefixView(items, 2)
    assert view == [1, 2]
    assert [1, 2] == view  # noqa: SIM300  (the list on the left: its __eq__ defers to the view)
    assert view == (1, 2)
    assert view == PrefixView([1, 2])
    assert view == PrefixView(items, 2)
    assert view != PrefixView(items, 3)
    assert view != [1, 2, 3]
    assert view != [1, 3]
    assert view != "12"
    assert PrefixView([]) == []
    with pytest.raises(TypeError):
        hash(view)


def test_a_view_is_copied_and_pickled_as_what_it_holds() -> None:
    view = PrefixView([1, 2, 3, 4], 2)
    for other in (copy.deepcopy(view), pickle.loads(pickle.dumps(view)), copy.copy(view)):
        assert other == [1, 2]
        assert len(other) == 2


def test_a_view_longer_than_its_list_is_refused() -> None:
    with pytest.raises(ValueError):
        PrefixView([1], 2)
    with pytest.raises(ValueError):
        PrefixView([1], -1)


def test_extending_the_last_view_of_a_list_appends_in_place() -> None:
    view = PrefixView([1, 2])
    longer = extend_view(view, [3])
    assert longer == [1, 2, 3] and view == [1, 2]
    # ``view`` no longer ends where its list does: extending it again copies.
    other = extend_view(view, [9])
    assert other == [1, 2, 9] and longer == [1, 2, 3] and view == [1, 2]
    assert extend_view(longer, [4]) == [1, 2, 3, 4]
    assert extend_view((1, 2), [3]) == [1, 2, 3]  # not a view: a copy


def test_a_log_copies_itself_before_a_change_a_view_could_see() -> None:
    log: KeyedLog[str] = KeyedLog()
    log.put("b", "B")
    log.put("d", "D")
    before = log.view()
    log.put("e", "E")  # an append: in place, past the view
    log.put("a", "A")  # an insert: on a copy
    log.put("d", "D2")  # a replacement: in place now (no view of the copy yet)
    after = log.view()
    log.put("c", "C")  # an insert: on another copy
    assert before == ["B", "D"]
    assert after == ["A", "B", "D2", "E"]
    assert log.view() == ["A", "B", "C", "D2", "E"]
    assert len(log) == 5
