"""What a benchmark run produces: figures with their targets and ratios, grouped by scenario, the machine
they came from, a rich table for people and ``results.json`` for programs (and for comparing runs)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

RESULTS_VERSION = 1
PACKAGES = (
    "isrsim",
    "trio",
    "msgpack",
    "crc32c",
    "aiokafka",
    "cramjam",
    "zstandard",
    "click",
    "rich",
    "pyspark",
    "pyarrow",
)

Status = Literal["ok", "skipped", "failed"]


@dataclass
class Target:
    """``value op limit`` is the goal, e.g. ``>= 200000`` records/s or ``<= 10`` ms."""

    op: Literal[">=", "<="]
    limit: float
    text: str = ""

    def met(self, value: float) -> bool:
        return value >= self.limit if self.op == ">=" else value <= self.limit

    def describe(self, unit: str) -> str:
        return self.text or f"{self.op} {_num(self.limit)} {unit}".strip()


@dataclass
class Figure:
    key: str
    label: str
    value: float | None
    unit: str
    target: Target | None = None
    ratio: float | None = None
    ratio_to: str = ""
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.target is None or self.value is None:
            return None
        return self.target.met(self.value)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["target_met"] = self.met
        return out


@dataclass
class ScenarioResult:
    name: str
    title: str
    status: Status = "ok"
    reason: str = ""
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    # How busy the machine was meanwhile (load average, share of all CPUs busy): this machine is shared.
    machine_load: dict[str, float | None] = field(default_factory=dict)

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def figure(self, key: str) -> Figure | None:
        return next((f for f in self.figures if f.key == key), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "duration_s": round(self.duration_s, 2),
            "machine_load": self.machine_load,
            "figures": [f.to_json() for f in self.figures],
            "details": self.details,
        }


def machine_info() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_mib": _mem_total_mib(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "packages": versions,
    }
    with contextlib.suppress(OSError):
        info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    return info


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _mem_total_mib() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def format_value(figure: Figure) -> str:
    if figure.value is None:
        return "-"
    return f"{_num(figure.value)} {figure.unit}".strip()


def format_ratio(figure: Figure) -> str:
    if figure.ratio is None:
        return ""
    pct = figure.ratio * 100
    text = f"{pct:.1f}%" if pct >= 1 else f"{pct:.2g}%"
    return f"{text} of {figure.ratio_to}" if figure.ratio_to else text


def results_table(results: list[ScenarioResult], title: str = "isrsim bench") -> Table:
    table = Table(title=title, show_lines=False, header_style="bold")
    table.add_column("scenario", style="cyan", no_wrap=True)
    table.add_column("figure")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("ratio", justify="right")
    table.add_column("target", justify="right")
    table.add_column("", no_wrap=True)
    for r in results:
        if r.status != "ok" and not r.figures:
            style = "yellow" if r.status == "skipped" else "red"
            table.add_row(r.name, f"[{style}]{r.status}: {r.reason}[/]", "", "", "", "", end_section=True)
            continue
        for i, f in enumerate(r.figures):
            met = f.met
            mark = "" if met is None else ("[green]met[/]" if met else "[red]missed[/]")
            label = f.label + (f" [dim]({f.note})[/]" if f.note else "")
            table.add_row(
                r.name if i == 0 else "",
                label,
                format_value(f),
                format_ratio(f),
                f.target.describe(f.unit) if f.target else "",
                mark,
                end_section=(i == len(r.figures) - 1 and r.status == "ok"),
            )
        if r.status != "ok":
            style = "yellow" if r.status == "skipped" else "red"
            table.add_row("", f"[{style}]{r.status}: {r.reason}[/]", "", "", "", "", end_section=True)
    return table


def print_machine(console: Console, machine: dict[str, Any]) -> None:
    pkgs = ", ".join(f"{k} {v}" for k, v in machine["packages"].items() if v)
    console.print(
        f"[bold]machine[/]: {machine['cores']} cores ({machine.get('cpu_model') or '?'}), "
        f"{machine.get('memory_mib') or '?'} MiB, {machine['platform']}, "
        f"Python {machine['python']}; load at start {machine.get('load_average_at_start')}\n"
        f"[bold]packages[/]: {pkgs}"
    )


def write_results(
    out_dir: Path,
    *,
    mode: str,
    machine: dict[str, Any],
    results: list[ScenarioResult],
    started: float,
    finished: float,
    argv: list[str],
) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "version": RESULTS_VERSION,
        "mode": mode,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(finished - started, 1),
        "command": argv,
        "machine": machine,
        "scenarios": [r.to_json() for r in results],
        "targets": {
            "met": sum(1 for r in results for f in r.figures if f.met is True),
            "missed": [f"{r.name}.{f.key}" for r in results for f in r.figures if f.met is False],
        },
    }
    path = out_dir / "results.json"
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


def markdown_table(doc: dict[str, Any]) -> str:
    """The figures of a ``results.json`` as a Markdown table (for docs/performance.md)."""
    lines = ["| scenario | figure | value | ratio | target | |", "|---|---|---:|---:|---:|---|"]
    for s in doc["scenarios"]:
        if s["status"] != "ok" and not s["figures"]:
            lines.append(f"| {s['name']} | {s['status']}: {s['reason']} | | | | |")
            continue
        for f in s["figures"]:
            fig = Figure(
                f["key"],
                f["label"],
                f["value"],
                f["unit"],
                Target(**f["target"]) if f.get("target") else None,
                f.get("ratio"),
                f.get("ratio_to", ""),
                f.get("note", ""),
            )
            met = fig.met
            mark = "" if met is None else ("met" if met else "**missed**")
            label = fig.label + (f" ({fig.note})" if fig.note else "")
            target = fig.target.describe(fig.unit) if fig.target else ""
            lines.append(
                f"| {s['name']} | {label} | {format_value(fig)} | {format_ratio(fig)} | {target} | {mark} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys as _sys

    print(markdown_table(json.loads(Path(_sys.argv[1]).read_text(encoding="utf-8"))))
