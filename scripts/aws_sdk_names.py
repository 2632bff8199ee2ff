"""Prints every public name of AWS's durable execution SDK for Python, one per line, sorted.

Usage: .venv-bench/bin/python scripts/aws_sdk_names.py > tests/fixtures/aws_durable_sdk_names.txt

The names are those of `aws-durable-execution-sdk-python` and its testing library (the versions
pinned in the Makefile's BENCH_PINS, installed by `make venv-bench`): every public module-level
class and function, each class's public attributes, methods, dataclass fields and enum members,
and every parameter name of those callables. tests/unit/test_docs_migrating_names.py checks the
migration guide's SDK column against the pinned list, and the list against the SDK itself where
.venv-bench exists, so the guide cannot name what the SDK does not have.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from typing import Any

ROOTS = ("aws_durable_execution_sdk_python", "aws_durable_execution_sdk_python_testing")


def _parameters(obj: Any) -> set[str]:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # builtins and some descriptors have none
        return set()
    return {p for p in signature.parameters if not p.startswith("_") and p not in ("self", "cls")}


def _class_names(cls: type) -> set[str]:
    found = _parameters(cls)
    for base in cls.__mro__:
        if not (getattr(base, "__module__", "") or "").startswith(ROOTS):
            continue
        for attr, value in vars(base).items():
            if attr.startswith("_"):
                continue
            found.add(attr)
            if callable(value) or isinstance(value, classmethod | staticmethod):
                found |= _parameters(getattr(cls, attr))
    if dataclasses.is_dataclass(cls):
        found |= {f.name for f in dataclasses.fields(cls)}
    found |= set(getattr(cls, "__members__", {}))  # enum members
    return found


def public_names() -> set[str]:
    """Every public name of the SDK and its testing library (see the module's docstring)."""
    names: set[str] = set()
    for root in ROOTS:
        package = importlib.import_module(root)
        modules = [package] + [
            importlib.import_module(info.name)
            for info in pkgutil.walk_packages(package.__path__, f"{root}.")
        ]
        for module in modules:
            for name, obj in vars(module).items():
                if name.startswith("_") or not (getattr(obj, "__module__", "") or "").startswith(
                    ROOTS
                ):
                    continue
                names.add(name)
                if inspect.isclass(obj):
                    names |= _class_names(obj)
                elif callable(obj):
                    names |= _parameters(obj)
    return names


if __name__ == "__main__":
    print("\n".join(sorted(public_names())))
