"""Unicode digits where the Api expects a number answered 500 (issue 31, 4).

``?generation=²`` and the operation id ``run-x:g²/step:1``: ``str.isdigit`` accepts "²" and
``int`` then raises ValueError, a 500 (a 502 from API Gateway). A number is ASCII digits;
anything else is refused as malformed: 400 for the generation, and for an operation id the
404 that every other operation id the Api cannot have gets.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from tests.unit.approvals_harness import Pending, request
from tests.unit.test_api_approvals import api, pending  # noqa: F401 - the fixtures
from tests.unit.test_api_reviews import paused  # noqa: F401 - the fixture

CONSOLE_FORM = {
    "Content-Type": "application/x-www-form-urlencoded",
    "Sec-Fetch-Site": "same-origin",
    "Accept": "text/html",
}


# ---------------------------------------------------------------------- (4) Unicode digits
@pytest.mark.parametrize("generation", ["²", "٣", "1\n", "-1", "99", "1" * 5000])
def test_a_history_generation_that_is_not_ascii_digits_is_400(
    pending: Pending,  # noqa: F811
    generation: str,
) -> None:
    reply = request(
        "GET",
        f"/runs/{pending.run_id}/history",
        query={"generation": generation},
        headers={"Accept": "application/json"},
    )
    assert reply.status == 400, reply.text
    assert "generation must be a whole number from 0 to 0" in reply.json["error"]["message"]


def test_a_history_generation_in_ascii_digits_is_read(pending: Pending) -> None:  # noqa: F811
    reply = request(
        "GET",
        f"/runs/{pending.run_id}/history",
        query={"generation": "0"},
        headers={"Accept": "application/json"},
    )
    assert reply.status == 200, reply.text
    assert reply.json["generation"] == 0


# (A trailing newline is refused before routing: see the control-character test below.)
HOSTILE_OPERATION_IDS = ["run-x:g²/step:1", "run-x:g٣/step:1", "run-x:step:²"]


@pytest.mark.parametrize("operation_id", HOSTILE_OPERATION_IDS)
def test_a_review_of_a_malformed_operation_id_is_404_like_any_unknown_one(
    paused: Any,  # noqa: F811
    operation_id: str,
) -> None:
    path = f"/reviews/{quote(operation_id, safe=':')}"
    reply = request("POST", path, {"decision": "retry"}, headers={"Accept": "application/json"})
    assert reply.status == 404, reply.text
    assert reply.json["error"]["type"] == "EffectNotFoundError"


@pytest.mark.parametrize("operation_id", HOSTILE_OPERATION_IDS)
def test_the_console_review_form_of_a_malformed_operation_id_is_404(
    paused: Any,  # noqa: F811
    operation_id: str,
) -> None:
    path = f"/console/reviews/{quote(operation_id, safe=':')}"
    reply = request("POST", path, raw_body="decision=retry", headers=CONSOLE_FORM)
    assert reply.status == 404, reply.text


# ------------------------------------------------------ control characters in the path
@pytest.mark.parametrize("suffix", ["\n", "%0A", "\r", "%0d", "\x00", "%00", "\x1b", "%7F"])
def test_a_path_with_a_control_character_is_400_before_routing(
    pending: Pending,  # noqa: F811
    suffix: str,
) -> None:
    # The router matches a path with ^...$, which also takes a trailing newline: /runs/<id>\n
    # answered as /runs/<id>, a second spelling of every id. No id has a control character.
    reply = request(
        "GET", f"/runs/{pending.run_id}{suffix}", headers={"Accept": "application/json"}
    )
    assert reply.status == 400, reply.text
    assert "control character" in reply.json["error"]["message"]
