"""The default serializer: every supported type round-trips, plain JSON keeps its exact form."""

from __future__ import annotations

import enum
import json
from collections import namedtuple
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel, SecretStr

from durable_agents.core.credentials import Secret
from durable_agents.core.serde import (
    DEFAULT_SERDES,
    FunctionSerdes,
    as_serdes,
    decode_value,
    encode_value,
    register_type,
)
from durable_agents.core.serde_values import TAG
from durable_agents.errors import PayloadError, SecretSerializationError


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str


@dataclass
class Order:
    id: UUID
    lines: list[Money]
    tags: set[str]
    placed: datetime
    total: Decimal = field(init=False)

    def __post_init__(self) -> None:
        self.total = sum((m.amount for m in self.lines), Decimal(0))


class Invoice(BaseModel):
    number: int
    due: date
    raw: bytes


Pair = namedtuple("Pair", "left right")

VALUES: list[Any] = [
    datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
    datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Paris")),
    datetime(2026, 1, 2, 3, 4, 5),  # naive stays naive
    date(2026, 2, 28),
    time(23, 59, 59, 5),
    time(8, 30, tzinfo=UTC),
    timedelta(days=-1, seconds=5, microseconds=7),
    Decimal("10.50"),
    Decimal("-0"),
    UUID("12345678-1234-5678-1234-567812345678"),
    {1, 2, 3},
    frozenset({"a", "b"}),
    (1, "two", None),
    (),
    b"\x00\xffbinary",
    bytearray(b"abc"),
    Colour.RED,
    Level.HIGH,
    Money(Decimal("1.10"), "EUR"),
    Invoice(number=7, due=date(2026, 3, 1), raw=b"\x01\x02"),
    Pair(1, Decimal(2)),
    {1: "int key", (1, 2): "tuple key"},
    {TAG: "not a tag", "x": 1},  # user data that looks like a tag is escaped
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_value_round_trips_with_its_type(value: Any) -> None:
    back = decode_value(encode_value(value))
    assert back == value
    assert type(back) is type(value)
    if isinstance(value, datetime | time):
        assert back.tzinfo == value.tzinfo or back.utcoffset() == value.utcoffset()


def test_zoneinfo_is_kept_by_name() -> None:
    moment = datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Paris"))
    back = decode_value(encode_value(moment))
    assert back.tzinfo == ZoneInfo("Europe/Paris")
    assert (back + timedelta(days=180)).utcoffset() == timedelta(hours=1)  # DST rules kept


def test_nested_values_round_trip() -> None:
    order = Order(
        id=UUID(int=5),
        lines=[Money(Decimal("2.5"), "EUR"), Money(Decimal("1"), "EUR")],
        tags={"gift", "rush"},
        placed=datetime(2026, 1, 1, tzinfo=UTC),
    )
    value = {"order": order, "history": [(Colour.BLUE, {date(2026, 1, 1)})], "n": 1}
    back = decode_value(encode_value(value))
    assert back == value
    assert back["order"].total == Decimal("3.5")  # init=False field restored as recorded
    assert isinstance(back["history"][0], tuple)


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -3, 1.5, "text", "ünïcode", [], {}, [1, [2, {"a": None}]], {"b": 1, "a": 2}],
)
def test_plain_json_keeps_its_exact_recorded_form(value: Any) -> None:
    text = encode_value(value)
    assert text == json.dumps(value, separators=(",", ":"))
    assert decode_value(text) == value


def test_sets_are_recorded_in_a_stable_order() -> None:
    assert encode_value({"b", "a", "c"}) == encode_value({"c", "a", "b"})
    assert encode_value({"b", "a"}) == '{"__durable__":"set","items":["a","b"]}'


def test_a_recorded_dict_that_looks_like_a_tag_is_not_decoded_as_one() -> None:
    # An external system completing a callback cannot make the agent build an object.
    text = encode_value({TAG: "enum", "class": f"{__name__}:Colour", "value": "red"})
    assert decode_value(text) == {TAG: "enum", "class": f"{__name__}:Colour", "value": "red"}


@pytest.mark.parametrize(
    "value",
    [
        Secret("sk-live-123456"),
        [1, {"key": Secret("sk-live-123456")}],
        {"k": (SecretStr("hunter22"),)},
        {frozenset({1}), (1, Secret("sk-live-123456"))},
        Money(Decimal(1), Secret("sk-live-123456")),  # type: ignore[arg-type]
    ],
)
def test_secrets_are_refused_inside_any_container(value: Any) -> None:
    with pytest.raises(SecretSerializationError):
        encode_value(value)
    with pytest.raises(SecretSerializationError):
        encode_value(value, serdes=DEFAULT_SERDES)


def test_unsupported_values_are_payload_errors() -> None:
    with pytest.raises(PayloadError, match="object"):
        encode_value(object())
    with pytest.raises(PayloadError):
        encode_value(float("nan"))


def test_a_class_that_cannot_be_resolved_is_a_clear_payload_error() -> None:
    text = '{"__durable__":"dataclass","class":"nowhere.models:Quote","fields":{}}'
    with pytest.raises(PayloadError, match="register_type"):
        decode_value(text)
    # A class that exists but is of another kind is not used either.
    text = f'{{"__durable__":"enum","class":"{__name__}:Money","value":1}}'
    with pytest.raises(PayloadError, match="register_type"):
        decode_value(text)


def test_modules_are_never_imported_because_a_journal_names_them() -> None:
    import sys

    assert "antigravity" not in sys.modules
    with pytest.raises(PayloadError):
        decode_value('{"__durable__":"enum","class":"antigravity:Fly","value":1}')
    assert "antigravity" not in sys.modules


def test_local_classes_resolve_once_registered() -> None:
    @dataclass
    class Local:
        x: int

    text = encode_value(Local(1))
    with pytest.raises(PayloadError, match="register_type"):
        decode_value(text)
    register_type(Local)
    assert decode_value(text) == Local(1)


def test_a_hint_takes_the_pydantic_path() -> None:
    text = encode_value(Invoice(number=1, due=date(2026, 1, 1), raw=b"x"), Invoice)
    assert TAG not in text
    assert decode_value(text, Invoice) == Invoice(number=1, due=date(2026, 1, 1), raw=b"x")
    assert decode_value(encode_value(date(2026, 1, 1), date), date) == date(2026, 1, 1)


def test_a_serdes_replaces_the_default() -> None:
    pair = as_serdes((lambda v: f"<{v}>", lambda t: t.strip("<>")))
    assert isinstance(pair, FunctionSerdes)
    assert encode_value("x", serdes=pair) == "<x>"
    assert decode_value("<x>", serdes=pair) == "x"
    assert decode_value(encode_value({1, 2}, serdes=DEFAULT_SERDES), serdes=DEFAULT_SERDES) == {
        1,
        2,
    }


def test_serdes_failures_are_payload_errors() -> None:
    bad = as_serdes((lambda v: 1 / 0, lambda t: 1 / 0))
    with pytest.raises(PayloadError, match="serialize"):
        encode_value("x", serdes=bad)
    not_text = as_serdes((lambda v: b"bytes", lambda t: t))
    with pytest.raises(PayloadError, match="not str"):
        encode_value("x", serdes=not_text)
    with pytest.raises(PayloadError, match="deserialize"):
        decode_value("x", serdes=bad)


def test_as_serdes_refuses_what_is_not_one() -> None:
    with pytest.raises(TypeError):
        as_serdes((print,))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        as_serdes("json")  # type: ignore[arg-type]


def test_a_value_that_refers_to_itself_is_a_payload_error() -> None:
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(PayloadError, match="refers to itself"):
        encode_value(looped)


def test_dict_subclasses_with_string_keys_stay_plain_json() -> None:
    from collections import OrderedDict, defaultdict

    assert encode_value(OrderedDict(b=1, a=2)) == '{"b":1,"a":2}'
    assert encode_value(defaultdict(list, {"k": [1]})) == '{"k":[1]}'
