"""One clock for a run (docs/report.md, Times): every time that chaos, the demo, the scenarios and the report
print is seconds since **t0**, the first event of the run: the earliest line of ``faults.jsonl`` or of a
node's journal (``broker-<id>/**/events.jsonl``, ``controller/**/events.jsonl``,
``controller-<id>/**/events.jsonl``). The report finds the same t0 in the same files (``t0_ms`` in
``report.json``), so ``312.4 s kill 3`` on chaos's console is the ``kill 3`` the report shows at 312.4 s.

Journal lines carry wall-clock milliseconds, so the clock is the wall clock. Each journal is written in
order, so its first line is its earliest; ``faults.jsonl`` is read whole (it is small).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kit.fault_journal import read_faults
from protocol import EVENTS_FILE, wall_clock_ms

_NODE_DIR = re.compile(r"^(broker-\d+|controller|controller-\d+)$")
_MAX_DEPTH = 3  # a journal is looked for this many levels below a node's directory


@dataclass(frozen=True)
class Origin:
    """t0: its epoch milliseconds and the event it is (``broker 1's journal: broker_started``)."""

    ts_ms: int
    source: str

    def describe(self) -> str:
        return describe_t0(self.ts_ms, self.source)


def describe_t0(ts_ms: int, source: str) -> str:
    """``t0 = 2026-11-25 20:01:02.345 UTC, the first event of the run (broker 1's journal: broker_started)``;
    the report says it in the same words."""
    when = datetime.fromtimestamp(ts_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"t0 = {when} UTC, the first event of the run ({source})"


def _journals(directory: Path, depth: int = 0) -> list[Path]:
    found: list[Path] = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return found
    for entry in entries:
        if entry.name == EVENTS_FILE and entry.is_file():
            found.append(entry)
        elif depth < _MAX_DEPTH and entry.is_dir():
            found.extend(_journals(entry, depth + 1))
    return found


def journal_paths(root: Path) -> list[Path]:
    """Every node's journal under a cluster root."""
    try:
        nodes = sorted(p for p in root.iterdir() if p.is_dir() and _NODE_DIR.match(p.name))
    except OSError:
        return []
    return [j for node in nodes for j in _journals(node)]


def _first_line(path: Path) -> dict[str, Any] | None:
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("ts_ms"), int):
                    return rec
    except OSError:
        return None
    return None


def journal_source(rec: dict[str, Any]) -> str:
    """``broker 1's journal: broker_started`` (a journal line names its writer)."""
    if "controller_id" in rec:
        writer = f"controller {rec['controller_id']}"
    else:
        writer = f"broker {rec.get('broker_id')}"
    return f"{writer}'s journal: {rec.get('event')}"


def fault_source(rec: dict[str, Any]) -> str:
    return f"faults.jsonl: {' '.join([str(rec.get('action')), *map(str, rec.get('nodes') or [])])}"


def run_origin(root: Path) -> Origin | None:
    """t0 of the run under ``root``; None while nothing has been written."""
    found: list[Origin] = []
    faults = [r for r in read_faults(root) if isinstance(r, dict) and isinstance(r.get("ts_ms"), int)]
    if faults:
        first = min(faults, key=lambda r: r["ts_ms"])
        found.append(Origin(first["ts_ms"], fault_source(first)))
    for path in journal_paths(root):
        rec = _first_line(path)
        if rec is not None:
            found.append(Origin(rec["ts_ms"], journal_source(rec)))
    return min(found, key=lambda o: o.ts_ms) if found else None


class RunClock:
    """Seconds since the run's t0 (``run_origin``), found on first use once the run has written something."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.origin: Origin | None = None

    def anchor(self) -> Origin | None:
        if self.origin is None:
            self.origin = run_origin(self.root)
        return self.origin

    def seconds(self, ts_ms: int | None = None) -> float | None:
        """``ts_ms`` (default: now) in seconds since t0; None before the run has written anything."""
        origin = self.anchor()
        if origin is None:
            return None
        return ((wall_clock_ms() if ts_ms is None else ts_ms) - origin.ts_ms) / 1000

    def stamp(self, ts_ms: int | None = None) -> str:
        """``  12.3s`` (six wide), or blanks before t0 exists."""
        s = self.seconds(ts_ms)
        return " " * 7 if s is None else f"{s:6.1f}s"


__all__ = [
    "Origin",
    "RunClock",
    "describe_t0",
    "fault_source",
    "journal_paths",
    "journal_source",
    "run_origin",
]
