"""``preload_fast_scan``: a node loads the C record reader in a thread as it starts; a failure to load it
then (no file descriptor left, say) is not an error: the first use tries again."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from protocol import record_codec


def test_a_failed_preload_returns_false_and_the_first_use_loads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_codec, "_CRecordBatch", record_codec._UNLOADED)
    real_import = builtins.__import__

    def no_descriptors(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("aiokafka"):
            raise OSError(24, "Too many open files")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_descriptors)
    assert record_codec.preload_fast_scan() is False
    assert record_codec._CRecordBatch is record_codec._UNLOADED  # nothing cached: the next use retries
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert record_codec.preload_fast_scan() is True
    assert record_codec._CRecordBatch is not record_codec._UNLOADED
