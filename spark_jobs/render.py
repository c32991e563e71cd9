"""Writing the report: ``report.json`` (machine-readable), ``report.html`` (one page: verdict, checks,
faults and time to full ISR, plots, the fault x partition matrix, details) and a terminal summary that stays
readable at 80 columns and in a CI log (lines, not a table: nothing is squeezed out).

Times shown to people are seconds since the first event of the run (``t0_ms`` in ``report.json``), the
same as on the plots' x axes; ``report.json`` keeps epoch milliseconds and adds the seconds beside them.
"""

from __future__ import annotations

import html
import json
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from spark_jobs.availability import availability_sentence
from spark_jobs.fault_overlap import fault_notice
from spark_jobs.layout import InputProblem
from spark_jobs.result import SCHEMA_VERSION

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em 2em;max-width:1250px;color:#222;line-height:1.35}
h1{margin-bottom:.2em} h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.15em}
.valid{color:#17803d} .invalid{color:#b42318} .unknown{color:#b54708} .unreadable{color:#b42318}
td.valid,td.invalid,td.unknown{font-weight:600}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#555;font-size:13px} img{display:block;margin:.3em 0 1.2em;max-width:100%}
code{background:#f5f5f5;padding:0 3px}
table.matrix td{text-align:center;min-width:3.2em;font-size:12px} table.matrix td.hit{background:#fde2c8}
table.matrix td.lead{background:#f9b27a;font-weight:600}
table.matrix th.fault{text-align:left;white-space:nowrap}
td.first{font-size:12px;max-width:520px;color:#444}
.explain{background:#f6f8fa;border-left:3px solid #ccd;padding:.4em .8em;font-size:13px}
"""

VERDICT_WORDS = {
    "valid": "no check found a violation, and every check examined something",
    "invalid": "a check found a violation",
    "unknown": "no violation found, but a check had nothing to examine (its input is missing or empty)",
    "unreadable": "the input cannot be read",
}


def verdict_words(verdict: str, checks: list[dict[str, Any]]) -> str:
    """The header's sentence under the verdict; it never claims that a check examined something when it
    did not (a check whose kind of input the run did not have passes with a note, and is named here)."""
    if verdict == "valid":
        idle = [c["name"] for c in checks if c.get("verdict") == "valid" and not c.get("checked")]
        if idle:
            return (
                f"no check found a violation; {len(idle)} of {len(checks)} had nothing of their kind in this "
                f"run ({', '.join(idle)})"
            )
    return VERDICT_WORDS.get(verdict, "")


# What each check counts in ``checked``.
CHECKED_UNITS = {
    "convergence": "partitions",
    "log_matching": "batches below the HW",
    "acked_not_lost": "acknowledged batches",
    "offsets_contiguous": "batches",
    "leader_hw_monotonic": "leader tenures",
    "epoch_cache": "epoch entries",
    "unclean_elections": "elections",
    "one_leader_per_epoch": "quorum epochs with a leader",
    "metadata_log_matching": "committed metadata batches",
    "no_stale_controller_obeyed": "applied controller requests",
    "batches_intact": "batches",
    "no_duplicates": "batches",
    "committed_offsets_not_lost": "committed offsets",
    "committed_offsets_below_hw": "committed offsets",
    "consumer_no_skip": "commits",
    "consumer_redelivery": "offsets served",
}
# Columns holding epoch milliseconds, shown in tables as seconds since the first event.
TIME_COLUMNS = ("ts_ms", "prev_ts", "trunc_ts", "elected_ts", "acked_ms", "sent_ms", "first_ts_ms")


def write_json(path: Path, report: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def unreadable_report(data_dir: Path, problems: list[InputProblem]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": "unreadable",
        "data_dir": str(data_dir),
        "input_problems": [p.as_dict() for p in problems],
        "checks": [],
    }


def nothing_report(data_dir: Path, reason: str) -> dict[str, Any]:
    """``report.json`` of a root with nothing to judge: verdict unknown, no check run."""
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": "unknown",
        "data_dir": str(data_dir),
        "nothing_to_judge": reason,
        "checks": [],
    }


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _is_time_column(key: str) -> bool:
    return key in TIME_COLUMNS or key.endswith("_ts")


def _time_header(col: str) -> str:
    """``ts_ms`` -> ``ts (s)``, ``elected_ts`` -> ``elected (s)``: the column now holds seconds since t0."""
    for suffix in ("_ms", "_ts"):
        col = col.removesuffix(suffix)
    return f"{col} (s)"


def _seconds(value: Any, t0_ms: int | None) -> Any:
    if t0_ms is None or not isinstance(value, int) or value < 10**12:
        return value
    return f"{(value - t0_ms) / 1000:.3f}"


def _cell(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return "; ".join(", ".join(f"{k} {v}" for k, v in d.items()) for d in value)
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


def _table(rows: list[dict[str, Any]], t0_ms: int | None = None) -> str:
    if not rows:
        return '<p class="muted">none</p>'
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    head = "".join(f"<th>{_e(_time_header(c) if _is_time_column(c) and t0_ms else c)}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            shown = _seconds(v, t0_ms) if _is_time_column(c) else v
            num = " class='num'" if isinstance(v, int | float) and not isinstance(v, bool) else ""
            cells.append(f"<td{num}>{_e(_cell(shown))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _s(value: float | None, plus: bool = False) -> str:
    if value is None:
        return ""
    return f"{'+' if plus else ''}{value:.2f}"


def t0_sentence(report: dict[str, Any]) -> str:
    """What every time of the report counts from, in the words ``isrsim chaos``, the demo and the scenarios
    use for the same t0 (``kit.run_clock``): ``times are seconds since t0 = 2026-11-25 20:01:02.345 UTC, the
    first event of the run (broker 1's journal: broker_started)``."""
    t0 = report.get("t0_ms")
    if not isinstance(t0, int):
        return "times are seconds since the first event of the run"
    when = datetime.fromtimestamp(t0 / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    source = report.get("t0_source") or "a journal or faults.jsonl"
    return f"times are seconds since t0 = {when} UTC, the first event of the run ({source})"


def converge_sentence(report: dict[str, Any]) -> str:
    """One sentence: how long after the last fault every ISR was full again (or why it was not). Named
    "ISR full", not "converged": ``isrsim chaos`` measures something else, "replicas in sync" (one LEO,
    HW = LEO), by asking the brokers."""
    overall = report.get("time_to_converge", {}).get("overall", {})
    if overall.get("time_to_converge_ms") is not None:
        last = f"{overall['last_fault']}, " if overall.get("last_fault") else ""
        return (
            f"ISR full again {overall['time_to_converge_ms'] / 1000:.2f} s after the last fault ended\n"
            f"  (the last fault window, {last}ended at {overall['last_fault_end_s']:.2f} s; every "
            f"replica back in its ISR from {overall['converged_s']:.2f} s)"
        )
    return f"ISR full again: not measured ({overall.get('note') or 'no fault'})"


def fault_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each fault window with its time to full ISR, times in seconds since t0."""
    rows = []
    for f in report.get("time_to_converge", {}).get("per_fault", []):
        ttc = f.get("time_to_converge_ms")
        rows.append(
            {
                "fault": f["fault"],
                "from (s)": _s(f.get("start_s")),
                "to (s)": _s(f.get("end_s")) if f.get("end_s") is not None else "still in force",
                "ended by": f.get("ended_by") or "",
                "seen in": f["source"],
                "partitions": f.get("partitions_touched", ""),
                "ISR full (s)": _s(f.get("converged_s")),
                "time to full ISR (s)": f"{ttc / 1000:.2f}"
                if ttc is not None
                else f.get("not_converged_because"),
            }
        )
    return rows


def _verdict_span(v: str) -> str:
    return f"<span class='{v}'>{v.upper()}</span>"


def _matrix_html(m: dict[str, Any]) -> str:
    if not m.get("faults"):
        return "<p class='muted'>no fault in this run</p>"
    head = "".join(f"<th>{_e(p)}</th>" for p in m["partitions"])
    rows = []
    for f, cells in zip(m["faults"], m["cells"], strict=True):
        tds = []
        for c in cells:
            parts = [
                f"{k}{c[n]}"
                for k, n in (("L", "leader_changes"), ("S", "isr_shrinks"), ("E", "isr_expands"))
                if c[n]
            ]
            cls = "lead" if c["leader_changes"] else ("hit" if parts else "")
            tds.append(f"<td class='{cls}'>{' '.join(parts)}</td>")
        src = "" if f["source"] == "faults.jsonl" else " <span class='muted'>(journal)</span>"
        rows.append(
            f"<tr><th class='fault'>{_e(f['label'])}{src}<br><span class='muted'>{_s(f['from_s'])} to "
            f"{_s(f['to_s'])} s</span></th>{''.join(tds)}</tr>"
        )
    return f"<table class='matrix'><tr><th>fault \\ partition</th>{head}</tr>{''.join(rows)}</table>"


def write_html(path: Path, report: dict[str, Any], figures: dict[str, str]) -> None:
    verdict = report["verdict"]
    inp = report["inputs"]
    t0 = report.get("t0_ms")
    counts = report.get("verdict_counts", {})
    count_text = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    any_bad = any(c["examples"] for c in report["checks"])
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>isrsim consistency report: "
        f"{_e(verdict)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Consistency report: {_verdict_span(verdict)}</h1>",
        f"<p><b>{_e(verdict_words(verdict, report['checks']))}</b> · {len(report['checks'])} checks: "
        f"{_e(count_text)}</p>",
        *(
            [f"<p class='explain'>{_e(n)}</p>"]
            if (n := fault_notice(report.get("writes_during_faults")))
            else []
        ),
        f"<p class='muted'>{_e(report['data_dir'])} · Spark master {_e(report['spark_master'])} · brokers "
        f"{_e(', '.join(str(b) for b in inp['brokers']))} · {inp['partitions']} partitions, up to "
        f"{inp['max_replicas_per_partition']} replicas each · read {inp['segment_bytes']:,} bytes of "
        f"segments ({inp['batches']:,} batches) in {inp['read_seconds']:.2f}s "
        f"({inp['read_mb_per_s']:.1f} MB/s) · "
        f"{inp['journal_lines']:,} journal lines, {inp['acked_lines']:,} acknowledged batches · "
        f"{_e(t0_sentence(report))}</p>",
        "<table><tr><th>check</th><th>verdict</th><th>violations</th><th>checked</th>"
        + ("<th>first violation</th>" if any_bad else "")
        + "</tr>",
    ]
    for c in report["checks"]:
        v = c["verdict"]
        unit = CHECKED_UNITS.get(c["name"], "")
        first = _first_example(c, t0)
        first = first if len(first) <= 160 else first[:157] + "..."
        parts.append(
            f"<tr><td><a href='#{c['name']}'>{_e(c['title'])}</a> <code>{c['name']}</code></td>"
            f"<td class='{v}'>{v.upper()}</td><td class='num'>{c['violations']}</td>"
            f"<td class='num'>{_e(c['checked'])} {_e(unit)}</td>"
            + (f"<td class='first'>{_e(first)}</td>" if any_bad else "")
            + "</tr>"
        )
    parts.append("</table>")
    parts.append(_availability_html(report.get("availability"), t0))
    parts.append(
        f"<h2 id='faults'>Faults applied and time to full ISR</h2><p>{_e(converge_sentence(report))}</p>"
    )
    parts.append(
        "<p class='muted'>A fault is a window from the action that started it to the one that ended it "
        "(faults.jsonl, written by the CLI), or, for one the CLI did not apply, what the journals show (a "
        "broker down between its last line and its restart, a broker fenced by the controller). Converged: "
        "every replica that should be in its partition's ISR is back in it (Kafka admits a follower only "
        "once it has caught up to the leader's high watermark), and stays there until the next fault.</p>"
    )
    rows = fault_rows(report)
    parts.append(
        _table(rows) if rows else "<p class='muted'>none recorded (no faults.jsonl, none in the journals)</p>"
    )
    if "overview" in figures:
        parts.append("<h2 id='throughput'>Throughput and commit latency</h2>")
        parts.append(
            "<p class='muted'>Top: one lane per fault (bar: in force; green: when every replica was back in "
            "its ISR). Then acknowledged records per second and the latency of each acknowledged batch "
            "(acked_ms - sent_ms), with the faults shaded in the same colours.</p>"
        )
        parts.append(
            f"<img alt='faults, throughput and latency' src='data:image/png;base64,{figures['overview']}'>"
        )
    parts.append("<h2 id='matrix'>Fault x partition matrix</h2>")
    parts.append(
        "<p class='muted'>What each fault did to each partition, from its start until every ISR was full "
        "again after it: <b>L</b> leader changes, <b>S</b> ISR shrinks, <b>E</b> ISR expansions (controller "
        "journal when there is one). Dark cells: the partition changed leader.</p>"
    )
    parts.append(_matrix_html(report.get("fault_matrix", {})))
    if inp["notes"]:
        parts.append(
            "<h3>Input notes</h3><ul>" + "".join(f"<li>{_e(n)}</li>" for n in inp["notes"]) + "</ul>"
        )
    parts.append("<h2>Checks</h2>")
    for c in report["checks"]:
        v = c["verdict"]
        parts.append(f"<h2 id='{c['name']}'>{_e(c['title'])}: {_verdict_span(v)}</h2>")
        parts.append(f"<p>{_e(c['description'])}</p>")
        if v == "unknown":
            parts.append(
                "<p class='explain'>Nothing was examined (0 checked): this check gives no evidence either "
                "way. Look at the input notes: a journal or workload file is missing or empty.</p>"
            )
        for n in c["notes"]:
            parts.append(f"<p class='muted'>{_e(n)}</p>")
        if c["violations"]:
            shown = len(c["examples"])
            parts.append(f"<h4>Violations ({c['violations']}, first {shown} shown)</h4>")
            parts.append(_table(c["examples"], t0))
        for name, rows_ in c["extra"].items():
            parts.append(f"<h4>{_e(name.replace('_', ' '))}</h4>{_table(_drop_ms(rows_), t0)}")
    lags = [k for k in figures if k.startswith("lag:")]
    if lags:
        parts.append("<h2 id='lag'>Replica lag per partition</h2>")
        parts.append(
            "<p class='muted'>Each follower's lag behind the leader (leader LEO - replica LEO, from the "
            "journals' offsets events, about every 100 ms); one colour per broker on every plot; black "
            "triangles: a new leader (its id above); shaded: the faults. A broker that is down keeps its "
            "last LEO, so its lag grows until it is back.</p>"
        )
        for key in lags:
            name = key.removeprefix("lag:")
            parts.append(
                f"<h3>{_e(name)}</h3><img alt='replica lag of {_e(name)}' "
                f"src='data:image/png;base64,{figures[key]}'>"
            )
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")


def _availability_html(a: dict[str, Any] | None, t0_ms: int | None) -> str:
    """The availability section: what the workload intended, got acknowledged, lost and left unknown, and
    every write stall with its cause and the fault in force."""
    if not a:
        return ""

    def n(v: Any) -> str:
        return "unknown" if v is None else f"{v:,}"

    ratio = a.get("acknowledged_ratio")
    head = (
        "<h2 id='availability'>Availability</h2>"
        f"<p><b>{_e(availability_sentence(a))}</b></p>"
        "<table><tr><th>intended</th><th>acknowledged</th><th>failed</th><th>unknown</th>"
        "<th>acknowledged / intended</th><th>longest stall (s)</th></tr>"
        f"<tr><td class='num'>{n(a.get('intended'))}</td><td class='num'>{n(a.get('acknowledged'))}</td>"
        f"<td class='num'>{n(a.get('failed'))}</td><td class='num'>{n(a.get('unknown'))}</td>"
        f"<td class='num'>{'' if ratio is None else f'{ratio * 100:.1f} %'}</td>"
        f"<td class='num'>{a.get('longest_stall_s', 0):.1f}</td></tr></table>"
        f"<p class='muted'>Records ({_e(a.get('counted_by') or '')}): {_e(a.get('intended_means') or '')}. "
        "Unknown: sent by isrsim produce and neither acknowledged nor failed. A stall: at least 1 s with no "
        "acknowledgement on a partition the workload was writing to; its cause is read from the journals "
        "(isr_shrink_wait: acks=all waited for the ISR to drop a follower; no_leader: a new leader was "
        "elected during it; leader_fenced: the controller fenced the leader; controller_unreachable: the "
        "cluster was cut off its active controller, or the quorum had no leader). The stalls are marked "
        "in red on the throughput plot.</p>"
    )
    stalls = a.get("stalls") or []
    return head + (_table(stalls, t0_ms) if stalls else "<p class='muted'>no write stall</p>")


def _drop_ms(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with both ``x_ts`` and ``x_s`` show the seconds only."""
    out = []
    for r in rows:
        out.append({k: v for k, v in r.items() if not (k.endswith("_ts") and f"{k[:-3]}_s" in r)})
    return out


# ------------------------------------------------------------------------------------------- terminal


def _first_example(c: dict[str, Any], t0_ms: int | None) -> str:
    if not c["examples"]:
        return ""
    first = c["examples"][0]
    return " ".join(
        f"{k}={_cell(_seconds(v, t0_ms) if _is_time_column(k) else v)}"
        for k, v in first.items()
        if v is not None and v != [] and v != ""
    )


def _say(
    console: Console, text: str, indent: int = 0, style: str = "", head: tuple[int, int, str] | None = None
) -> None:
    """``text`` wrapped to the console's width (later lines indented by ``indent``), each line printed as
    is: nothing padded to the width, no escape codes when the output is not a terminal. ``head``: (start,
    end, style) of a span of the first line to colour."""
    width = max(console.width, 40)
    lines = textwrap.wrap(
        text, width=width, subsequent_indent=" " * indent, break_on_hyphens=False, drop_whitespace=True
    ) or [""]
    lead = len(text) - len(text.lstrip(" "))
    lines[0] = " " * lead + lines[0].lstrip(" ") if not lines[0].startswith(" " * lead) else lines[0]
    for i, line in enumerate(lines):
        t = Text(line, style=style)
        if i == 0 and head is not None:
            t.stylize(head[2], head[0], head[1])
        console.print(t, soft_wrap=True, highlight=False)


def render_terminal(console: Console, report: dict[str, Any], out: Path) -> None:
    """Plain lines (no table): a verdict line (never wrapped), a line per check, t0, the time to full ISR,
    the faults; the other long lines wrap under their own indent at the console's width, with nothing
    padded."""
    style = {"valid": "green", "invalid": "bold red", "unknown": "yellow"}
    verdict = report["verdict"]
    counts = ", ".join(f"{n} {v}" for v, n in report.get("verdict_counts", {}).items() if n)
    # SPEC 12: the first line names the verdict, the acknowledged ratio and the longest stall; it is never
    # wrapped, so a reader (or a script) taking the first line of stdout gets all three.
    first = (
        f"isrsim report: {verdict.upper()}  ({counts}); {availability_sentence(report.get('availability'))}"
    )
    line = Text(first, style="bold")
    line.stylize(style.get(verdict, ""), 15, 15 + len(verdict))
    console.print(line, soft_wrap=True, highlight=False, crop=False, overflow="ignore")
    _say(console, f"  {verdict_words(verdict, report['checks'])}", 2, "dim")
    notice = fault_notice(report.get("writes_during_faults"))
    if notice:
        _say(console, f"  {notice}", 2, "yellow")
    t0 = report.get("t0_ms")
    for c in report["checks"]:
        v = c["verdict"]
        unit = CHECKED_UNITS.get(c["name"], "checked")
        if v == "invalid":
            checked = f"{c['checked']:,}" if c["checked"] is not None else "?"
            what = f"{c['violations']:,} violation(s) in {checked} {unit}"
        elif v == "unknown":
            what = "nothing to examine (0 checked)"
        else:
            what = f"{c['checked']:,} {unit}" if c["checked"] is not None else ""
        word = "INVALID" if v == "invalid" else v
        _say(console, f"  {word:<8} {c['name']:<20} {what}", 32, head=(2, 2 + len(word), style.get(v, "")))
        example = _first_example(c, t0)
        if example:
            _say(console, f"           first: {example}", 11, "dim")
    _say(console, t0_sentence(report), 2)
    for line in converge_sentence(report).splitlines():
        _say(console, line, 4)
    rows = fault_rows(report)
    if rows:
        _say(console, f"faults ({len(rows)}; seconds since t0):")
        for r in rows:
            ttc = r["time to full ISR (s)"]
            conv = f"ISR full +{ttc} s" if ttc and ttc[0].isdigit() else f"ISR not full: {ttc}"
            seen = "" if r["seen in"] == "faults.jsonl" else " (journal)"
            span = f"{r['from (s)']}-{r['to (s)'] if r['to (s)'] != 'still in force' else 'end'}"
            _say(console, f"  {span:<13} {r['fault']}{seen}; {conv}", 16)
    # The paths on lines of their own: a long path is never indented past the width.
    _say(console, f"report.json and report.html in {out}")
