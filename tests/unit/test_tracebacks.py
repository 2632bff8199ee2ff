"""What a recorded error's traceback holds (``durable_agents.core.tracebacks``), and old records."""

from __future__ import annotations

import pytest

from durable_agents.core.models import ErrorInfo
from durable_agents.core.serde import error_info, rebuild_error
from durable_agents.core.tracebacks import EXCEPTION_LINE_CHARS, MAX_CHARS, recorded_traceback
from durable_agents.errors import StepError


def raised(exc: Exception) -> Exception:
    try:
        raise exc
    except Exception as caught:
        return caught


def test_a_record_without_a_traceback_loads_and_says_so_and_dumps_without_the_key() -> None:
    old = {"type": "ValueError", "message": "m", "module": "builtins"}
    info = ErrorInfo.from_dict(old)
    assert info.traceback is None and info.to_dict() == old
    rebuilt = rebuild_error(info)
    assert isinstance(rebuilt, ValueError) and getattr(rebuilt, "recorded_traceback", 0) is None


def test_an_error_never_raised_has_none() -> None:
    assert recorded_traceback(ValueError("built, not raised")) is None
    assert error_info(ValueError("x")).traceback is None


def test_a_huge_message_is_cut_in_the_traceback_but_not_in_the_record() -> None:
    exc = raised(ValueError("y" * 100_000))
    info = error_info(exc)
    assert info.traceback is not None and len(info.traceback) <= MAX_CHARS
    last = info.traceback.rstrip("\n").splitlines()[-1]
    assert last.startswith("ValueError: yyy") and len(last) < EXCEPTION_LINE_CHARS
    assert len(info.message) == 100_000  # the message itself is recorded whole, as before


def test_the_recorded_traceback_is_never_one_of_the_recorded_attributes() -> None:
    first = error_info(raised(KeyError("sku")))
    rebuilt = rebuild_error(first)
    again = error_info(raised(rebuilt))
    assert again.data == first.data  # args and attributes as before: no recorded_traceback
    assert again.traceback is not None and first.traceback is not None
    # Re-raised from the journal, it tells its recorded story first, then where it met it.
    assert again.traceback.startswith(first.traceback.rstrip("\n"))
    assert "re-raised from the journal" in again.traceback


def test_a_cause_is_told_first_as_python_does() -> None:
    def wrap() -> None:
        try:
            raise OSError("disk")
        except OSError as exc:
            raise RuntimeError("save failed") from exc

    with pytest.raises(RuntimeError) as caught:
        wrap()
    text = recorded_traceback(caught.value)
    assert text is not None
    assert text.index("OSError: disk") < text.index("direct cause") < text.index("save failed")


def test_an_error_whose_class_is_gone_arrives_as_step_error_with_the_recorded_traceback() -> None:
    info = ErrorInfo("VanishedError", "gone", "no_such_module", traceback="Traceback: here\n")
    rebuilt = rebuild_error(info)
    assert isinstance(rebuilt, StepError) and rebuilt.recorded_traceback == "Traceback: here\n"
    assert StepError("E", "m").recorded_traceback is None  # made directly: none recorded
