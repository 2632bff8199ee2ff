"""Input fingerprints are stable across processes and never hash what must not be recorded."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from durable_agents import ReplayDivergedError, Secret
from durable_agents.engine.fingerprints import Fingerprint

ROOT = Path(__file__).resolve().parents[2]


class Order(BaseModel):
    order_id: str
    tags: set[str]


def test_the_fingerprint_is_sha256_of_sorted_compact_json() -> None:
    expected = hashlib.sha256(b'[1,"a",{"a":1,"b":[2,3]}]').hexdigest()[:16]
    assert Fingerprint.of_args((1, "a", {"b": [2, 3], "a": 1})).value == expected
    assert Fingerprint.of_args(()).value == hashlib.sha256(b"[]").hexdigest()[:16]


def test_sets_inside_models_are_sorted() -> None:
    one = Order(order_id="o", tags={"b", "a", "c"})
    other = Order(order_id="o", tags={"c", "b", "a"})
    assert Fingerprint.of_value(one).value == Fingerprint.of_value(other).value
    expected = hashlib.sha256(b'{"order_id":"o","tags":["a","b","c"]}')
    assert Fingerprint.of_value(one).value == expected.hexdigest()[:16]


def test_the_fingerprint_is_the_same_in_other_processes() -> None:
    """``hash()`` of strings changes per process (PYTHONHASHSEED); fingerprints must not."""
    code = (
        "from tests.unit.test_fingerprints import Order\n"
        "from durable_agents.engine.fingerprints import Fingerprint\n"
        "tags = {f'tag-{i}' for i in range(50)}\n"
        "print(Fingerprint.of_value([Order(order_id='o', tags=tags), {'z': 1.5, 'a': None}]).value)"
    )
    seen = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(  # our own interpreter, fixed code
            [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        seen.add(out.stdout.strip())
    assert len(seen) == 1 and len(seen.pop()) == 16


def test_values_that_are_not_json_or_are_secrets_have_no_fingerprint() -> None:
    assert Fingerprint.of_args((object(),)).value is None
    assert Fingerprint.of_args((float("nan"),)).value is None
    assert Fingerprint.of_args((Secret("sk-live-1"),)).value is None
    assert Fingerprint.of_args(({"key": SecretStr("hunter2")},)).value is None
    assert Fingerprint.of_args(({1: "a", "b": 2},)).value is None  # mixed keys cannot sort
    assert Fingerprint.of_args((1,)).meta() == {"fp": Fingerprint.of_args((1,)).value}
    assert Fingerprint.of_args((object(),)).meta() == {}


def test_the_fingerprint_is_computed_at_most_once_and_only_when_asked() -> None:
    calls: list[int] = []

    def serialise() -> str:
        calls.append(1)
        return "[]"

    fingerprint = Fingerprint(serialise)
    assert calls == []
    assert fingerprint.value == fingerprint.value
    assert calls == [1]


def test_a_divergence_error_names_both_fingerprints() -> None:
    err = ReplayDivergedError(
        "run-1:pay:1",
        recorded_kind="tool",
        recorded_name="pay",
        requested_kind="tool",
        requested_name="pay",
        recorded_fingerprint="aaaa",
        requested_fingerprint="bbbb",
    )
    assert "tool 'pay' with input fingerprint aaaa" in str(err)
    assert "tool 'pay' with input fingerprint bbbb" in str(err)
    unserialisable = ReplayDivergedError(
        "run-1:pay:1",
        recorded_kind="step",
        recorded_name="pay",
        requested_kind="step",
        requested_name="pay",
        recorded_fingerprint="aaaa",
    )
    assert "an input that cannot be fingerprinted" in str(unserialisable)


def _dumped(value: Any) -> tuple[str, str]:
    from durable_agents.engine.fingerprints import _jsonable

    try:
        text = json.dumps(
            value, separators=(",", ":"), sort_keys=True, allow_nan=False, default=_jsonable
        )
    except (TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))
    return ("ok", text)


def _canonical(value: Any) -> tuple[str, str]:
    from durable_agents.engine.fingerprints import canonical

    try:
        return ("ok", canonical(value))
    except (TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


def test_the_canonical_text_is_json_dumps_with_the_fingerprint_options() -> None:
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    values: list[Any] = [
        [1, "é", {"b": 2, "a": None}],
        Order(order_id="o-1", tags={"z", "a"}),
        {3, 1, 2},
        float("nan"),
        cyclic,
        object(),
        {"k": SecretStr("hidden")},
        {1: "int key", "1": "str key"},
    ]
    for value in values:
        assert _canonical(value) == _dumped(value), value
