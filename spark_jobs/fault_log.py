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

FAULTS_FILE = "faults.jsonl"
NET_FAULTS = ("partition", "isolate", "delay", "loss")
DOWN_FAULTS = ("kill", "term")
# Protocol-level fault rules (docs/faults.md): instants, labelled with the rule and the request it hit.
RULE_ACTIONS = ("rule_add", "rule_hit", "rule_remove")


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


def _link(nodes: list[str], params: dict[str, Any]) -> str:
    """``1 -> controller`` for a one-way fault (only that direction is cut), ``1 <-> 2`` for both."""
    return (" -> " if params.get("one_way") else " <-> ").join(nodes)


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


def _label(action: str, nodes: list[str], params: dict[str, Any]) -> str:
    who = " ".join(nodes)
    if action == "partition":
        return f"partition {_link(nodes, params)}"
    if action == "delay":
        jitter = f"±{params['jitter_ms']}" if params.get("jitter_ms") else ""
        return f"delay {_link(nodes, params)} {params.get('ms')}{jitter} ms"
    if action == "loss":
        return f"loss {_link(nodes, params)} {params.get('percent')}%"
    return f"{action} {who}".strip()


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
    if band.action == "isolate":
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
        if action == "heal":
            for band in [b for b in open_ if b.action in NET_FAULTS and _heal_covers(nodes, b)]:
                close(band, ts, "heal")
        elif action == "restart":
            for band in [b for b in open_ if any(n in b.nodes for n in nodes)]:
                if band.action in NET_FAULTS or band.action in DOWN_FAULTS:
                    close(band, ts, "restart")
        elif action == "resume":
            for band in [b for b in open_ if b.action == "pause" and b.nodes == nodes]:
                close(band, ts, "resume")
        elif action in NET_FAULTS:
            for band in [b for b in open_ if b.action == action and _same_links(b, nodes, params)]:
                close(band, ts, f"another {action}")
        label = _rule_label(rec) if action in RULE_ACTIONS else _label(action, nodes, params)
        band = FaultBand(action, nodes, params, ts, label=label)
        bands.append(band)
        if action in NET_FAULTS or action in DOWN_FAULTS or action == "pause":
            open_.append(band)
        else:
            band.instant = True
            band.end_ms = ts
    return bands


__all__ = ["FAULTS_FILE", "FaultBand", "fault_bands", "read_fault_log"]
