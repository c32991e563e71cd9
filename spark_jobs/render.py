"""Writing the report: ``report.json`` (machine-readable), ``report.html`` (one page: verdict, a table per
check, timelines) and a short rich summary in the terminal."""

from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from spark_jobs.layout import InputProblem

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1 .pass,.pass{color:#17803d} h1 .fail,.fail{color:#b42318}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3} .muted{color:#666;font-size:13px} img{display:block;margin:.5em 0 1.5em}
code{background:#f5f5f5;padding:0 3px}
"""


def write_json(path: Path, report: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def unreadable_report(data_dir: Path, problems: list[InputProblem]) -> dict[str, Any]:
    return {
        "verdict": "unreadable",
        "data_dir": str(data_dir),
        "input_problems": [p.as_dict() for p in problems],
        "checks": [],
    }


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return '<p class="muted">none</p>'
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_e(r.get(c))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(path: Path, report: dict[str, Any], figures: dict[str, str]) -> None:
    verdict = report["verdict"]
    inp = report["inputs"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>isrsim consistency report</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Consistency report: <span class='{verdict}'>{verdict.upper()}</span></h1>",
        f"<p class='muted'>{_e(report['data_dir'])} · Spark master {_e(report['spark_master'])} · brokers "
        f"{_e(inp['brokers'])} · {inp['partitions']} partitions, up to {inp['max_replicas_per_partition']} "
        f"replicas each · read {inp['segment_bytes']:,} bytes of segments ({inp['batches']:,} batches) in "
        f"{inp['read_seconds']:.2f}s ({inp['read_mb_per_s']:.1f} MB/s) · {inp['journal_lines']:,} journal "
        f"lines, {inp['acked_lines']:,} acknowledged batches</p>",
        "<table><tr><th>check</th><th>verdict</th><th>violations</th><th>checked</th></tr>",
    ]
    for c in report["checks"]:
        v = "pass" if c["passed"] else "fail"
        parts.append(
            f"<tr><td><a href='#{c['name']}'>{_e(c['title'])}</a> <code>{c['name']}</code></td>"
            f"<td class='{v}'>{v.upper()}</td><td>{c['violations']}</td><td>{_e(c['checked'])}</td></tr>"
        )
    parts.append("</table>")
    parts.append(_faults_html(report.get("faults", [])))
    if inp["notes"]:
        parts.append(
            "<h3>Input notes</h3><ul>" + "".join(f"<li>{_e(n)}</li>" for n in inp["notes"]) + "</ul>"
        )
    for c in report["checks"]:
        v = "pass" if c["passed"] else "fail"
        parts.append(f"<h2 id='{c['name']}'>{_e(c['title'])}: <span class='{v}'>{v.upper()}</span></h2>")
        parts.append(f"<p>{_e(c['description'])}</p>")
        for n in c["notes"]:
            parts.append(f"<p class='muted'>{_e(n)}</p>")
        if c["violations"]:
            shown = len(c["examples"])
            parts.append(f"<h4>Violations ({c['violations']}, first {shown} shown)</h4>")
            parts.append(_table(c["examples"]))
        for name, rows in c["extra"].items():
            parts.append(f"<h4>{_e(name.replace('_', ' '))}</h4>{_table(rows)}")
    parts.append("<h2>Timelines</h2>")
    parts.append(
        "<p class='muted'>LEO (solid) and HW (dashed) of each replica from the journals; green lines: a "
        "broker became leader (L&lt;id&gt;); dotted lines: faults (crash, fenced, ISR shrink, unclean "
        "election); shaded bands: faults applied with the CLI (faults.jsonl).</p>"
    )
    for name, png in figures.items():
        parts.append(
            f"<h3>{_e(name)}</h3><img alt='timeline of {_e(name)}' src='data:image/png;base64,{png}'>"
        )
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")


def _clock(ts_ms: int | None) -> str:
    if ts_ms is None:
        return "end of run"
    return time.strftime("%H:%M:%S", time.gmtime(ts_ms / 1000)) + f".{ts_ms % 1000:03d}"


def fault_rows(faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The faults applied (faults.jsonl) as rows: what, when (UTC), until when and what ended it."""
    rows = []
    for f in faults:
        end = f.get("end_ms")
        rows.append(
            {
                "fault": f["label"],
                "from (UTC)": _clock(f["start_ms"]),
                "until": "" if f.get("instant") else _clock(end),
                "seconds": "" if f.get("instant") or end is None else f"{(end - f['start_ms']) / 1000:.1f}",
                "ended by": f.get("ended_by") or ("" if f.get("instant") else "still in force"),
                "params": ", ".join(f"{k}={v}" for k, v in sorted(f.get("params", {}).items())),
            }
        )
    return rows


def _faults_html(faults: list[dict[str, Any]]) -> str:
    if not faults:
        return "<h3>Faults applied</h3><p class='muted'>none recorded (no faults.jsonl)</p>"
    return (
        "<h3>Faults applied (faults.jsonl)</h3><p class='muted'>Network and process faults the CLI applied "
        "and healed during the run; they are the shaded bands on the timelines.</p>"
        + _table(fault_rows(faults))
    )


def render_terminal(console: Console, report: dict[str, Any], out: Path) -> None:
    table = Table(title=f"isrsim report: {report['verdict'].upper()}", title_style="bold")
    table.add_column("check")
    table.add_column("verdict")
    table.add_column("violations", justify="right")
    table.add_column("first violation", overflow="ellipsis", no_wrap=True, max_width=90)
    for c in report["checks"]:
        first = c["examples"][0] if c["examples"] else None
        example = " ".join(f"{k}={v}" for k, v in first.items() if v is not None) if first else ""
        style = "green" if c["passed"] else "bold red"
        table.add_row(
            c["name"], f"[{style}]{'pass' if c['passed'] else 'FAIL'}[/]", str(c["violations"]), example
        )
    console.print(table)
    faults = report.get("faults", [])
    if faults:
        ft = Table(title=f"faults applied ({len(faults)}, from faults.jsonl)", title_justify="left")
        rows = fault_rows(faults)
        for col in ("fault", "from (UTC)", "until", "ended by"):
            ft.add_column(col)
        for r in rows:
            ft.add_row(r["fault"], r["from (UTC)"], r["until"], r["ended by"])
        console.print(ft)
    console.print(f"report: {out / 'report.json'} and {out / 'report.html'}")
