"""The front doors of ``protocol``, ``broker`` and ``controller`` (their ``__init__``): each exported name is
the object its module defines, the table that loads names lazily agrees with the imports type checkers
read, and importing a light name does not load the heavy modules (the CLI's start-up time)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import broker
import controller
import protocol

ROOT = Path(__file__).resolve().parents[2]
DOORS = [protocol, broker, controller]


def type_checking_imports(package: ModuleType) -> dict[str, str]:
    """``{name: module}`` of the ``from module import name`` lines under ``if TYPE_CHECKING:``."""
    tree = ast.parse(Path(package.__file__ or "").read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.dump(stmt)
                for alias in stmt.names:
                    out[alias.asname or alias.name] = stmt.module
    return out


@pytest.mark.parametrize("package", DOORS, ids=lambda p: p.__name__)
def test_the_lazy_table_agrees_with_the_typed_imports(package: ModuleType) -> None:
    exports: dict[str, str] = package._EXPORTS
    assert type_checking_imports(package) == exports
    assert sorted(package.__all__) == sorted(exports)


@pytest.mark.parametrize("package", DOORS, ids=lambda p: p.__name__)
def test_every_exported_name_is_its_modules_object(package: ModuleType) -> None:
    for name, module in package._EXPORTS.items():
        assert getattr(package, name) is getattr(importlib.import_module(module), name), name
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("package", DOORS, ids=lambda p: p.__name__)
def test_an_unknown_name_is_an_attribute_error(package: ModuleType) -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = package.no_such_name
    with pytest.raises(ImportError):
        exec(f"from {package.__name__} import no_such_name", {})


def test_light_names_do_not_load_the_heavy_modules() -> None:
    code = (
        "import sys\n"
        "from broker import BrokerConfig, ConfigError, read_journal\n"
        "from protocol import ApiKeys, Errors, TopicPartition, error_name\n"
        "heavy = sorted(m for m in sys.modules if m == 'trio' or m in ("
        "'broker.server', 'broker.replica_manager', 'controller.controller', 'raft.raft_client',"
        "'protocol.client', 'protocol.records', 'fetcher'))\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
