"""Whether any acknowledged write was in flight during a fault: a run whose faults all fell while nothing
was being written (or that had none) shows writes that met no fault, not writes that survived faults, and
the report's header says so.

A write is in flight from the moment it was sent (the workload's ``sent_ms``; the leader's acknowledgement
time for a client that journals nothing) to its acknowledgement (``acked_ms``). A fault window
(``converge.Window``) lasts from its start to its end, or to the final stop if it never ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.converge import Window

NO_FAULT_IN_FLIGHT = "no fault happened while writes were in flight"


def writes_during_faults(
    acknowledged: DataFrame, windows: list[Window], until_ms: int | None
) -> dict[str, Any]:
    """``faults`` (windows), ``acknowledged`` (batches) and ``during_faults``: the acknowledged batches
    that were in flight while a fault window was open (one action)."""
    from pyspark.sql import functions as F

    sent = F.coalesce(F.col("sent_ms"), F.col("acked_ms"))
    overlaps = F.lit(False)
    for w in windows:
        end = w.end_ms if w.end_ms is not None else until_ms
        hit = F.col("acked_ms") >= F.lit(w.start_ms)
        if end is not None:
            hit = hit & (sent <= F.lit(end))
        overlaps = overlaps | hit
    row = acknowledged.agg(
        F.count("*").alias("n"), F.sum(F.when(overlaps, 1).otherwise(0)).alias("during")
    ).first()
    return {
        "faults": len(windows),
        "acknowledged": int(row["n"] or 0) if row else 0,
        "during_faults": int(row["during"] or 0) if row else 0,
    }


def fault_notice(overlap: dict[str, Any] | None) -> str | None:
    """The header's notice when no acknowledged write overlapped a fault, else None."""
    if not overlap or overlap.get("during_faults"):
        return None
    faults = int(overlap.get("faults") or 0)
    if not faults:
        why = "no fault in this run"
    elif not overlap.get("acknowledged"):
        why = f"{faults} fault window(s), and no write was acknowledged"
    else:
        why = f"{faults} fault window(s), none while an acknowledged write was outstanding"
    return (
        f"notice: {NO_FAULT_IN_FLIGHT} ({why}): the checks describe writes that met no fault, not "
        "writes that survived faults"
    )


__all__ = ["NO_FAULT_IN_FLIGHT", "fault_notice", "writes_during_faults"]
