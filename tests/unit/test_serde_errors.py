"""Recorded exceptions rebuild with their type, args and attributes (or as a StepError)."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from botocore.exceptions import ClientError

from durable_agents.core.credentials import Secret
from durable_agents.core.models import ErrorInfo
from durable_agents.core.serde import error_info, rebuild_error
from durable_agents.engine.operations.callback import CallbackTimeoutError
from durable_agents.errors import StepError


class QuotaExceededError(Exception):
    def __init__(self, account: str, used: Decimal, limit: Decimal):
        super().__init__(f"{account} used {used} of {limit}")
        self.account = account
        self.used = used
        self.limit = limit


@dataclass
class Detail:
    code: int


class WithDetailError(Exception):
    def __init__(self, detail: Detail):
        super().__init__("detailed")
        self.detail = detail


def round_trip(exc: BaseException) -> Exception:
    # Through the journal's own form (JSON text), as a replay in a fresh process reads it.
    info = ErrorInfo.from_dict(json.loads(json.dumps(error_info(exc).to_dict())))
    return rebuild_error(info)


def client_error() -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "ConditionalCheckFailedException", "Message": "nope"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "PutItem",
    )


def test_client_error_keeps_its_response_and_operation() -> None:
    original = client_error()
    back = round_trip(original)
    assert type(back) is ClientError
    assert isinstance(back, ClientError)
    assert back.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert back.operation_name == "PutItem"
    assert str(back) == str(original)


def test_key_error_keeps_its_args() -> None:
    back = round_trip(KeyError("missing"))
    assert type(back) is KeyError
    assert back.args == ("missing",)
    assert str(back) == "'missing'"


def test_custom_attributes_are_restored_without_calling_init() -> None:
    back = round_trip(QuotaExceededError("acme", Decimal("9.5"), Decimal(10)))
    assert isinstance(back, QuotaExceededError)
    assert (back.account, back.used, back.limit) == ("acme", Decimal("9.5"), Decimal(10))
    assert str(back) == "acme used 9.5 of 10"


def test_os_errors_keep_errno_and_filename() -> None:
    back = round_trip(FileNotFoundError(2, "No such file", "/tmp/x"))
    assert type(back) is FileNotFoundError
    assert (back.errno, back.filename) == (2, "/tmp/x")


def test_notes_are_kept() -> None:
    exc = ValueError("bad")
    exc.add_note("while parsing line 3")
    assert round_trip(exc).__notes__ == ["while parsing line 3"]


def test_runtime_errors_keep_their_recorded_fields_format() -> None:
    info = error_info(CallbackTimeoutError("cb-1", "deadline"))
    assert info.data == {"callback_id": "cb-1", "reason": "deadline"}  # as journals hold it
    back = round_trip(CallbackTimeoutError("cb-1", "deadline"))
    assert isinstance(back, CallbackTimeoutError)
    assert back.reason == "deadline"


def test_an_unknown_class_arrives_as_step_error_with_its_attributes() -> None:
    info = error_info(QuotaExceededError("acme", Decimal(1), Decimal(2)))
    moved = ErrorInfo(info.type, info.message, "gone.module", info.data)
    back = rebuild_error(moved)
    assert isinstance(back, StepError)
    assert back.original_type == back.error_type == "QuotaExceededError"
    assert back.module == "gone.module"
    assert back.message == "acme used 1 of 2"
    assert back.attributes == {"account": "acme", "used": Decimal(1), "limit": Decimal(2)}
    # Recorded again (a scope failing with it), it keeps the original description.
    assert error_info(back) == moved


def test_an_attribute_whose_class_is_missing_stays_in_recorded_form() -> None:
    info = error_info(WithDetailError(Detail(3)))
    tree: Any = json.loads(json.dumps(info.data))
    tree["__durable_exception__"]["attrs"]["detail"]["class"] = "gone:Detail"
    back = rebuild_error(ErrorInfo(info.type, info.message, info.module, tree))
    assert isinstance(back, StepError)
    assert back.attributes["detail"]["fields"] == {"code": 3}


def test_attributes_the_serializer_cannot_record_are_dropped_and_named() -> None:
    class HoldsSocketError(Exception):
        pass

    with socket.socket() as sock:
        exc = HoldsSocketError("with a socket")
        exc.sock = sock  # type: ignore[attr-defined]
        exc.code = 7  # type: ignore[attr-defined]
        info = error_info(exc)
    assert info.data is not None
    assert info.data["__durable_exception__"]["dropped"] == ["sock"]
    back = rebuild_error(info)  # a local class: not resolvable, so a StepError
    assert isinstance(back, StepError)
    assert back.attributes == {"code": 7}


def test_secrets_are_scrubbed_from_messages_args_and_attributes() -> None:
    key = Secret("sk-live-abcdef123456")
    revealed = key.reveal()
    exc = QuotaExceededError(revealed, Decimal(1), Decimal(2))
    exc.token = key  # type: ignore[attr-defined]  # a credential itself is never recorded
    info = error_info(exc)
    text = json.dumps(info.to_dict())
    assert revealed not in text
    back = rebuild_error(info)
    assert isinstance(back, QuotaExceededError)
    assert back.account == "***"
    assert not hasattr(back, "token")
    assert revealed not in str(back)


def test_an_error_with_unrecordable_args_keeps_its_message() -> None:
    exc = ValueError(object())
    back = round_trip(exc)
    assert type(back) is ValueError
    assert str(back) == str(exc)


def test_legacy_records_without_state_still_rebuild() -> None:
    back = rebuild_error(ErrorInfo("ValueError", "old message", "builtins"))
    assert type(back) is ValueError
    assert str(back) == "old message"
    unknown = rebuild_error(ErrorInfo("Nope", "m", "gone"))
    assert isinstance(unknown, StepError)
    assert unknown.original_type == "Nope"


@pytest.mark.parametrize("exc", [KeyError("k"), client_error(), RuntimeError("r")])
def test_rebuilding_is_stable(exc: Exception) -> None:
    # A replay of a replay records and raises the same thing.
    once = round_trip(exc)
    twice = round_trip(once)
    assert type(twice) is type(once)
    assert error_info(twice) == error_info(once)


def test_an_attribute_that_refers_to_the_error_is_dropped() -> None:
    exc = RuntimeError("loop")
    exc.me = [exc]  # type: ignore[attr-defined]
    exc.parts = [1, 2]  # type: ignore[attr-defined]
    info = error_info(exc)
    assert info.data is not None
    assert info.data["__durable_exception__"]["dropped"] == ["me"]
    assert round_trip(exc).parts == [1, 2]  # type: ignore[attr-defined]


def test_a_recorded_field_holding_a_secret_is_masked() -> None:
    info = error_info(CallbackTimeoutError("cb-1", Secret("sk-live-abcdef123456")))  # type: ignore[arg-type]
    assert info.data == {"callback_id": "cb-1", "reason": "***"}
