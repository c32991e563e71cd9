"""``<root>/faults.jsonl`` (written by the CLI: every network and process fault applied or healed) as bands
of time: from the action that started a fault to the one that ended it (open bands last to the end of the
run). The report draws the bands on its timelines and lists them next to its findings.

Pairing: a network fault (``partition``, ``isolate``, ``delay``, ``loss``) ends at the first ``heal`` that
covers it (``heal`` of everything, of one of its nodes, or of its pair), at a ``restart`` of one of its
nodes (a restarted node starts healed and the CLI heals its links), or when the same fault is set again
on the same nodes. ``kill``/``term`` ends at the node's ``restart``; ``pause`` at its ``resume``. Other
records (a ``heal``, a ``restart`` of a running node, a protocol-level fault rule's ``rule_add``,
``rule_hit`` and ``rule_remove``) are instants.

The file is small and read on the driver in plain Python; a torn last line is skipped.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Which action ends each kind (a network fault: heal; kill and term: restart; pause: resume) and how each
# is labelled are protocol.fault_kinds' rules.
from protocol import FAULT_RULES, FAULTS_FILE, NETWORK, NODE, RULE_ACTIONS, FaultAction, fault_label


@dataclass
class FaultBand:
    action: str
    nodes: list[str]
    params: dict[str, Any]
    start_ms: int
    end_ms: int | None = None
    ended_by: str | None = None
    instant: bool = False
    label: str = field(default="")

    def as_dict(self, t0_ms: int | None = None) -> dict[str, Any]:
        out = asdict(self)
        if t0_ms is not None:
            out["start_s"] = round((self.start_ms - t0_ms) / 1000, 3)
            out["end_s"] = None if self.end_ms is None else round((self.end_ms - t0_ms) / 1000, 3)
        return out


def read_fault_log(root: Path) -> list[dict[str, Any]]:
    try:
        text = (Path(root) / FAULTS_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("ts_ms"), int) and isinstance(rec.get("action"), str):
            rec["nodes"] = [str(n) for n in rec.get("nodes") or []]
            rec["params"] = rec.get("params") if isinstance(rec.get("params"), dict) else {}
            out.append(rec)
    out.sort(key=lambda r: r["ts_ms"])
    return out


def _rule_label(rec: dict[str, Any]) -> str:
    """A protocol-level fault rule's record (``rule_add``, ``rule_hit``, ``rule_remove``; docs/faults.md)."""
    rule = rec.get("rule") if isinstance(rec.get("rule"), dict) else {}
    what = rule.get("error") or (f"delay {rule['delay_ms']} ms" if rule.get("delay_ms") else None)
    what = what or ("drop-response" if rule.get("drop_response") else "disconnect")
    where = "/".join(
        str(rec.get(k) if rec.get(k) is not None else rule.get(k)) for k in ("topic", "partition")
    )
    where = "" if where == "None/None" else " " + where.replace("/None", "")
    head = f"rule {rec.get('rule_id')}"
    if rec["action"] == "rule_hit":
        return f"{head} hit {rec.get('hit')}: {rec.get('api')}{where} {what} on {' '.join(rec['nodes'])}"
    verb = "added" if rec["action"] == "rule_add" else "removed"
    return f"{head} {verb}: {rule.get('api')}{where} {what}"


def _same_links(band: FaultBand, nodes: list[str], params: dict[str, Any]) -> bool:
    """The same links as ``band``: the same pair, and for a one-way fault the same direction."""
    if set(band.nodes) != set(nodes):
        return False
    if band.params.get("one_way") and params.get("one_way"):
        return band.nodes == nodes
    return True


def _heal_covers(heal_nodes: list[str], band: FaultBand) -> bool:
    if not heal_nodes:
        return True
    if len(heal_nodes) == 1:
        return heal_nodes[0] in band.nodes
    if FAULT_RULES[band.action].scope == NODE:
        return False  # healing one pair leaves the rest of the isolation in force
    return set(heal_nodes) == set(band.nodes)


def fault_bands(records: list[dict[str, Any]]) -> list[FaultBand]:
    """The records as bands (see the module's doc), in start order."""
    bands: list[FaultBand] = []
    open_: list[FaultBand] = []

    def close(band: FaultBand, ts: int, by: str) -> None:
        band.end_ms, band.ended_by = ts, by
        open_.remove(band)

    for rec in records:
        action, nodes, params, ts = rec["action"], rec["nodes"], rec["params"], rec["ts_ms"]
        ends = {k: FAULT_RULES[k].ended_by for k in (b.action for b in open_)}
        if action == FaultAction.HEAL:
            for band in [b for b in open_ if ends[b.action] == action and _heal_covers(nodes, b)]:
                close(band, ts, action)
        elif action == FaultAction.RESTART:
            # A restarted node starts healed: a restart ends its network faults, and its kill or term.
            for band in [b for b in open_ if any(n in b.nodes for n in nodes)]:
                if ends[band.action] in (FaultAction.HEAL, FaultAction.RESTART):
                    close(band, ts, action)
        elif action == FaultAction.RESUME:
            for band in [b for b in open_ if ends[b.action] == action and b.nodes == nodes]:
                close(band, ts, action)
        elif action in FAULT_RULES and FAULT_RULES[action].family == NETWORK:
            for band in [b for b in open_ if b.action == action and _same_links(b, nodes, params)]:
                close(band, ts, f"another {action}")
        label = _rule_label(rec) if action in RULE_ACTIONS else fault_label(action, nodes, params)
        band = FaultBand(action, nodes, params, ts, label=label)
        bands.append(band)
        if action in FAULT_RULES:
            open_.append(band)
        else:
            band.instant = True
            band.end_ms = ts
    return bands


__all__ = ["FAULTS_FILE", "FaultBand", "fault_bands", "read_fault_log"]
