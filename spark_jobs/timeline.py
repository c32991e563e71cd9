"""Per-partition timelines of LEO and HW per replica (from the journals), with leader changes and faults
marked, drawn with matplotlib into PNG images for the HTML report. The faults the CLI applied
(``faults.jsonl``: partitions, isolations, delays, loss, kills, pauses) are shaded bands."""

from __future__ import annotations

import base64
import io
from collections import defaultdict
from typing import Any

from pyspark.sql import functions as F

from spark_jobs.fault_log import FaultBand
from spark_jobs.history import cached
from spark_jobs.inputs import TP, Inputs

FAULT_COLOURS = {
    "crash": "red",
    "unclean_stop": "red",
    "fenced": "darkorange",
    "isr_shrink": "orange",
    "unclean_election": "purple",
}


BAND_COLOURS = {
    "partition": "tab:red",
    "isolate": "tab:purple",
    "delay": "tab:olive",
    "loss": "tab:brown",
    "kill": "dimgrey",
    "term": "grey",
    "pause": "tab:cyan",
}


def draw_timelines(
    inp: Inputs, max_plots: int = 12, bands: list[FaultBand] | None = None
) -> tuple[dict[str, str], str | None]:
    """``{"topic-partition": base64 PNG}`` for the first ``max_plots`` partitions, and a note if some were
    left out. ``bands`` (from faults.jsonl) are drawn on every timeline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    all_tps = [(r["topic"], r["partition"]) for r in inp.partitions.select(*TP).orderBy(*TP).collect()]
    tps = all_tps[:max_plots]
    note = (
        f"timelines drawn for the first {len(tps)} of {len(all_tps)} partitions"
        if len(all_tps) > len(tps)
        else None
    )
    if not tps:
        return {}, note
    keep = inp.partitions.sparkSession.createDataFrame(tps, "topic STRING, partition INT")
    series = cached(inp, "series").join(keep, TP).orderBy("ts_ms", "seq").collect()
    f = cached(inp, "faults")
    fault_rows = f.filter(F.col("topic").isNull()).collect() + f.join(keep, TP).collect()
    points: dict[tuple[str, int], dict[int, list[Any]]] = defaultdict(lambda: defaultdict(list))
    leader_marks: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for r in series:
        points[(r["topic"], r["partition"])][r["broker"]].append(r)
        if r["event"] == "became_leader":
            leader_marks[(r["topic"], r["partition"])].append(r)
    t0 = min((r["ts_ms"] for r in series), default=0)
    t_end = max((r["ts_ms"] for r in series), default=t0)
    images: dict[str, str] = {}
    for tp in tps:
        fig, ax = plt.subplots(figsize=(9, 3.2), dpi=90)
        for broker, rows in sorted(points[tp].items()):
            xs = [(r["ts_ms"] - t0) / 1000 for r in rows]
            (line,) = ax.step(xs, [r["leo"] for r in rows], where="post", label=f"broker {broker} LEO")
            ax.step(
                xs,
                [r["hw"] for r in rows],
                where="post",
                linestyle="--",
                color=line.get_color(),
                label=f"broker {broker} HW",
            )
        for r in leader_marks[tp]:
            x = (r["ts_ms"] - t0) / 1000
            ax.axvline(x, color="green", linewidth=0.8, alpha=0.7)
            ax.annotate(
                f"L{r['broker']}",
                (x, 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                color="green",
                va="top",
            )
        for f in fault_rows:
            if f["topic"] is not None and (f["topic"], f["partition"]) != tp:
                continue
            if f["kind"] == "leader_change":
                continue
            x = (f["ts_ms"] - t0) / 1000
            ax.axvline(x, color=FAULT_COLOURS.get(f["kind"], "red"), linewidth=1.2, linestyle=":")
            ax.annotate(
                f"{f['kind']} b{f['broker']}",
                (x, 0.02),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                rotation=90,
                color=FAULT_COLOURS.get(f["kind"], "red"),
            )
        _draw_bands(ax, bands or [], t0, t_end)
        ax.set_title(f"{tp[0]}-{tp[1]}: LEO (solid) and HW (dashed) per replica", fontsize=9)
        ax.set_xlabel("seconds since the first journal event", fontsize=8)
        ax.set_ylabel("offset", fontsize=8)
        ax.tick_params(labelsize=7)
        if points[tp]:
            # Band labels sit at the top left of their bands; offsets grow to the upper right.
            ax.legend(fontsize=6, loc="lower right" if bands else "upper left", ncol=2)
        else:
            ax.text(0.5, 0.5, "no offsets in the journals", transform=ax.transAxes, ha="center")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        images[f"{tp[0]}-{tp[1]}"] = base64.b64encode(buf.getvalue()).decode("ascii")
    return images, note


def _draw_bands(ax: Any, bands: list[FaultBand], t0: int, t_end: int) -> None:
    """Shaded spans from a fault's start to its end (or the end of the journals), labelled at the top;
    instants (a heal, a restart) are thin lines. Spans of several faults stack their labels."""
    for i, band in enumerate(bands):
        if band.start_ms > t_end or (band.end_ms is not None and band.end_ms < t0):
            continue
        colour = BAND_COLOURS.get(band.action, "black")
        x0 = (band.start_ms - t0) / 1000
        if band.instant:
            ax.axvline(x0, color=colour, linewidth=0.6, alpha=0.6)
            continue
        x1 = ((band.end_ms if band.end_ms is not None else t_end) - t0) / 1000
        ax.axvspan(x0, max(x1, x0 + 0.01), color=colour, alpha=0.12, linewidth=0)
        ax.annotate(
            band.label,
            (x0, 0.97 - 0.07 * (i % 4)),
            xycoords=("data", "axes fraction"),
            fontsize=6,
            color=colour,
            va="top",
        )
