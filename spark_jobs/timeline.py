"""Drawing the report's plots with matplotlib (PNG, base64, for the one-page HTML), from the data series of
``figures.py``; nothing is computed here.

- the overview: one lane per fault window (a bar from its start to its end, a thin line on to when the
  cluster converged after it), then throughput and commit latency with the windows shaded;
- per partition: each replica's lag behind the leader, leader changes as black triangles with the new
  leader's id, the windows shaded.

Every x axis is seconds since the first event and spans the whole run, so plots line up; each broker has
one colour everywhere; legends sit outside the axes, to the right, so they never cover data.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any

from protocol import FAULT_RULES
from spark_jobs.figures import FigureData

# One colour per broker (tab10 without green and grey, kept for "converged" and "down").
BROKER_COLOURS = ["tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
# Each fault kind's colour is its rule's (protocol.fault_kinds); the windows seen only in the journals
# take their kin's.
BAND_COLOURS = {
    **{kind: rule.colour for kind, rule in FAULT_RULES.items()},
    "crash": FAULT_RULES["kill"].colour,
    "stop": FAULT_RULES["term"].colour,
    "fenced": "#ff7f0e",
}
LEADER_MARK = {"marker": "v", "color": "black", "markersize": 6, "linestyle": "none"}
WIDTH_IN = 11.0


def broker_colour(broker: int) -> str:
    return BROKER_COLOURS[(broker - 1) % len(BROKER_COLOURS)]


def band_colour(action: str) -> str:
    rule = FAULT_RULES.get(action)
    return rule.colour if rule is not None else BAND_COLOURS.get(action, "#7f7f7f")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _shade(ax: Any, fd: FigureData) -> None:
    for w in fd.windows:
        end = w["end_s"] if w["end_s"] is not None else fd.end_s
        ax.axvspan(
            w["start_s"], max(end, w["start_s"] + 0.05), color=band_colour(w["action"]), alpha=0.15, lw=0
        )


def _axes_style(ax: Any, fd: FigureData) -> None:
    ax.set_xlim(0, max(fd.end_s, 0.1))
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.6)
    ax.tick_params(labelsize=8)


def draw_overview(fd: FigureData) -> str:
    """Fault lanes, throughput and commit latency (see the module doc) as one base64 PNG."""
    plt = _plt()
    lanes = max(len(fd.windows), 1)
    fig, (gantt, thr, lat) = plt.subplots(
        3,
        1,
        sharex=True,
        figsize=(WIDTH_IN, 2.2 + 0.22 * lanes + 4.2),
        gridspec_kw={"height_ratios": [0.5 + 0.22 * lanes, 2.0, 2.0]},
    )
    for i, w in enumerate(fd.windows):
        y = lanes - 1 - i
        end = w["end_s"] if w["end_s"] is not None else fd.end_s
        colour = band_colour(w["action"])
        gantt.barh(y, max(end - w["start_s"], 0.05), left=w["start_s"], height=0.6, color=colour, alpha=0.6)
        if w["converged_s"] is not None and w["converged_s"] > end:
            gantt.plot([end, w["converged_s"]], [y, y], color="tab:green", linewidth=1.2, linestyle=":")
        if w["converged_s"] is not None:
            gantt.plot([w["converged_s"]], [y], marker="|", color="tab:green", markersize=9)
        source = "" if w["source"] == "faults.jsonl" else " (journal)"
        open_ = "" if w["end_s"] is not None else " (never ended)"
        gantt.annotate(
            f"{w['label']}{source}{open_}",
            (w["start_s"], y),
            xytext=(0, 5),
            textcoords="offset points",
            fontsize=8.5,
            va="bottom",
        )
    gantt.set_ylim(-0.7, lanes + 0.1)
    gantt.set_yticks([])
    gantt.set_title(
        "faults (bar: in force; green: until ISR full, every replica back in its ISR)", fontsize=9, loc="left"
    )
    if not fd.windows:
        gantt.text(0.5, 0.5, "no fault in this run", transform=gantt.transAxes, ha="center", fontsize=8)
    _axes_style(gantt, fd)
    rate = fd.rate
    _shade(thr, fd)
    if rate.get("t_s"):
        thr.step(rate["t_s"], rate["records_per_s"], where="post", color="tab:blue", label="all clients")
        _client_lines(thr, rate, fd.clients, "records_per_s")
    else:
        thr.text(
            0.5, 0.5, "no acknowledged batch (no workload journal)", transform=thr.transAxes, ha="center"
        )
    _mark_stalls(thr, fd)
    thr.set_ylabel("records/s", fontsize=8)
    thr.set_title(
        f"throughput: acknowledged records per second ({rate.get('bin_s', 0):g} s bins)",
        fontsize=9,
        loc="left",
    )
    _axes_style(thr, fd)
    _shade(lat, fd)
    if rate.get("t_s"):
        for key, colour, label in (
            ("latency_max_ms", "#c7c7c7", "max"),
            ("latency_p99_ms", "tab:red", "p99"),
            ("latency_p50_ms", "tab:blue", "p50"),
        ):
            ys = [float("nan") if v is None else v for v in rate[key]]
            # Markers too: a bin between empty ones (a sparse workload) is otherwise a dash too short to see.
            lat.step(rate["t_s"], ys, where="post", color=colour, label=label, linewidth=1.1)
            lat.plot([t + rate["bin_s"] / 2 for t in rate["t_s"]], ys, "o", color=colour, markersize=2.2)
        _client_lines(lat, rate, fd.clients, "latency_p50_ms")
        lat.set_yscale("symlog", linthresh=10)
        lat.legend(
            fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), title="latency", title_fontsize=7
        )
    lat.set_ylabel("ms", fontsize=8)
    lat.set_title(
        "commit latency: acked_ms - sent_ms of each batch; dashed: each client's p50 at its leaders "
        "(acknowledged - received)",
        fontsize=9,
        loc="left",
    )
    lat.set_xlabel("seconds since t0, the first event of the run", fontsize=8)
    _axes_style(lat, fd)
    fig.tight_layout()
    return _png(fig)


def _mark_stalls(ax: Any, fd: FigureData) -> None:
    """Each write stall (a partition with no acknowledgement for a second or more) as a red bar along the
    foot of the throughput lane; the longest is labelled with its length and cause."""
    if not fd.stalls:
        return
    top = max(ax.get_ylim()[1], 1.0)
    for i, st in enumerate(fd.stalls):
        ax.plot(
            [st["from_s"], st["to_s"]],
            [top * 0.02, top * 0.02],
            color="tab:red",
            linewidth=5,
            alpha=0.55,
            solid_capstyle="butt",
            label="write stall (no ack >= 1 s on a partition)" if i == 0 else None,
        )
    longest = max(fd.stalls, key=lambda st: st["to_s"] - st["from_s"])
    ax.annotate(
        f"{longest['to_s'] - longest['from_s']:.1f} s ({longest['topic']}-{longest['partition']}, "
        f"{longest['cause']})",
        (longest["from_s"], top * 0.02),
        xytext=(0, 7),
        textcoords="offset points",
        fontsize=7.5,
        color="tab:red",
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))


def draw_lag(fd: FigureData, name: str) -> str:
    """One partition's replica lag (see the module doc) as a base64 PNG."""
    plt = _plt()
    data = fd.lag[name]
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.0))
    _shade(ax, fd)
    top = 1
    for broker, s in sorted(data["brokers"].items()):
        if s["t_s"]:
            ys = [math.nan if v is None else v for v in s["lag"]]
            ax.step(s["t_s"], ys, where="post", color=broker_colour(int(broker)), label=f"broker {broker}")
            top = max([top, *(v for v in s["lag"] if v is not None)])
    marks = data["leader_changes"]
    if marks:
        y = top * 1.08
        ax.plot([m["t_s"] for m in marks], [y] * len(marks), label="new leader", **LEADER_MARK)
        for m in marks:
            ax.annotate(
                str(m["leader"]),
                (m["t_s"], y),
                xytext=(0, 4),
                textcoords="offset points",
                fontsize=7,
                ha="center",
            )
        ax.set_ylim(-0.02 * top, top * 1.25)
    ax.set_title(
        f"{name}: each follower's lag behind the leader (leader LEO - replica LEO)", fontsize=9, loc="left"
    )
    ax.set_ylabel("offsets behind", fontsize=8)
    ax.set_xlabel("seconds since t0, the first event of the run", fontsize=8)
    if data["brokers"] or marks:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    else:
        ax.text(0.5, 0.5, "no offsets in the journals", transform=ax.transAxes, ha="center")
    _axes_style(ax, fd)
    fig.tight_layout()
    return _png(fig)


__all__ = ["BAND_COLOURS", "BROKER_COLOURS", "band_colour", "broker_colour", "draw_lag", "draw_overview"]


def _client_lines(ax: Any, rate: dict[str, Any], clients: dict[str, dict[str, list[Any]]], key: str) -> None:
    """One dashed line per client id (``FigureData.clients``), labelled with it; a legend when any."""
    if not clients:
        return
    for i, (client, series) in enumerate(sorted(clients.items())):
        ys = [float("nan") if v is None else v for v in series[key]]
        label = f"{client} (p50)" if key.startswith("latency") else client
        ax.step(
            rate["t_s"],
            ys,
            where="post",
            linestyle="--",
            linewidth=1.0,
            color=f"C{(i + 2) % 10}",
            label=label,
        )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
