"""A package's exports, imported from their modules the first time each is read (PEP 562).

A package whose ``__init__`` imports everything it exports makes every import of any of its
modules pay for all of them: ``import durable_agents.errors`` used to load the engine, the
context and pydantic, and ``durable_agents.llm.types`` the scripted provider. With a table of
where each export lives, ``__init__`` loads nothing, and the package's ``__getattr__`` imports
an export when it is first read and keeps it in the package (docs/benchmarks.md, "Cold
start"). Type checkers read the same names from imports under ``TYPE_CHECKING``;
``tests/unit/test_exports.py`` keeps the two in step.

This module imports nothing of the package but ``_moved`` (names that moved out resolve, with a
warning, through it), so any ``__init__`` may use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from durable_agents._moved import moved_attribute


def lazy_exports(
    package: str, table: Mapping[str, tuple[str, ...]], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """The ``__getattr__`` of a package whose exports ``table`` lists by module.

    Args:
        package: The package's name (``__name__``).
        table: Each module the package exports from, with the names it exports from it.
        namespace: The package's globals, where a name read once is kept.

    Returns:
        A function for the package's ``__getattr__``: it imports ``name`` from its module,
        keeps it in ``namespace`` and returns it.
    """
    home = {name: module for module, names in table.items() for name in names}

    def __getattr__(name: str) -> Any:
        """Imports an export from its module on first read (``moved_attribute`` for the rest).

        Raises:
            AttributeError: If ``name`` is neither an export nor a name that moved.
        """
        module = home.get(name)
        if module is None:
            return moved_attribute(package, name)
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
