"""``<root>/faults.jsonl``: every fault the CLI applies or heals, one JSON object a line (docs/faults.md).

``{"ts_ms", "action", "nodes", "params"}``: ``action`` is a fault kind or the action that ends one
(``protocol.FAULT_ACTIONS``: ``partition``, ``isolate``, ``delay``, ``loss``, ``heal``; ``kill``, ``term``,
``restart``, ``pause``, ``resume``);
``nodes`` are node names (``"controller"``, ``"1"`` ...); ``params`` the action's options.
Protocol-level fault rules (``kit.protocol_faults``) add ``rule_add``, ``rule_hit`` and ``rule_remove``
records, with ``rule_id`` and ``rule`` (and, for a hit, ``hit`` and the request's ``api``, ``topic``,
``partition``, ``group``, ``transactional_id``, ``client_id``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from protocol import FAULTS_FILE, RULE_ACTIONS, wall_clock_ms


def append_fault(
    root: Path,
    action: str,
    nodes: list[str],
    params: dict[str, Any] | None = None,
    *,
    ts_ms: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Appends one record (one ``write`` of one line, fsynced) and returns it. ``extra``: more fields of
    the record (a protocol-level fault rule's ``rule``, a hit's request)."""
    record = {
        "ts_ms": wall_clock_ms() if ts_ms is None else ts_ms,
        "action": str(action),
        "nodes": [str(n) for n in nodes],
        "params": params or {},
        **(extra or {}),
    }
    root.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True) + "\n"
    fd = os.open(root / FAULTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return record


def read_faults(root: Path) -> list[dict[str, Any]]:
    """The records in order; a torn last line (a crash mid-write) is skipped."""
    try:
        text = (root / FAULTS_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


__all__ = ["FAULTS_FILE", "RULE_ACTIONS", "append_fault", "read_faults"]
