"""Ids and names are checked whole: ``$`` would let a trailing newline through (issue 31, 9).

``re.match(r"^...$")`` matches ``"run-1\\n"`` (``$`` matches before a final newline), so a run
id or a name with a newline reached the journal's keys and the logs. Operation ids the Api
parses (``locate``) are held to the same rule, and to ASCII digits: ``str.isdigit`` accepts
``"²"``, which ``int`` then refuses with a ValueError (a 500 from the Api).
"""

from __future__ import annotations

import pytest

from durable_agents.core.ids import check_name, check_run_id
from durable_agents.errors import EffectNotFoundError, InvalidNameError
from durable_agents.journal.generation_keys import locate, split_op_id


@pytest.mark.parametrize("run_id", ["run-1\n", "run-1\r\n", "\nrun-1", "run-1\x00"])
def test_a_run_id_with_a_line_break_is_refused(run_id: str) -> None:
    with pytest.raises(InvalidNameError, match="run id"):
        check_run_id(run_id)


@pytest.mark.parametrize("name", ["fetch\n", "fetch\r\n", "fetch\x00"])
def test_a_name_with_a_line_break_is_refused(name: str) -> None:
    with pytest.raises(InvalidNameError, match="name"):
        check_name(name)


def test_valid_ids_and_names_still_pass() -> None:
    assert check_run_id("run-1") == "run-1"
    assert check_run_id("r" * 128) == "r" * 128
    assert check_name("fetch-1.v2_x") == "fetch-1.v2_x"


@pytest.mark.parametrize(
    "operation_id",
    [
        "run-x:g²/step:1",  # superscript two: str.isdigit() is True, int() raises
        "run-x:g٣/step:1",  # Arabic-Indic three: int() takes it, so it must be refused first
        "run-x:step:²",
        "run-x:step:1\n",
        "run-x:g2\n/step:1",
        "run-x:g/step:1",
        "run-x:g1234567890/step:1",  # more digits than a generation has
    ],
)
def test_locate_refuses_an_operation_id_that_is_not_ours(operation_id: str) -> None:
    with pytest.raises(EffectNotFoundError):
        locate(operation_id)


def test_split_op_id_takes_ascii_digits_only() -> None:
    assert split_op_id("g3/fetch:2") == ("G000003:", "fetch:2")
    # Not a generation prefix: left for the caller to refuse as a position.
    assert split_op_id("g²/fetch:2") == ("", "g²/fetch:2")
    assert split_op_id("g٣/fetch:2") == ("", "g٣/fetch:2")


@pytest.mark.parametrize("wait_id", ["apr-é", "apr-٣", "apr-\uff21", "cb-ß1"])
def test_a_wait_id_with_a_character_outside_ascii_is_not_found_without_a_read(
    wait_id: str,
) -> None:
    # Ids are made of [A-Za-z0-9_-]; str.isalnum also takes every Unicode letter and digit.
    from api.routes.common import check_wait_id
    from durable_agents.errors import WaitNotFoundError

    with pytest.raises(WaitNotFoundError):
        check_wait_id(wait_id)
    assert check_wait_id("apr-0123_abcXYZ") == "apr-0123_abcXYZ"
