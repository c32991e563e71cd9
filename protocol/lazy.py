"""Front doors that load their names on first use (PEP 562 module ``__getattr__``), so importing a package
costs nothing until a name is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a front door: ``exports`` maps each name to the module that
    defines it; a name, once loaded, is kept in the package's ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
